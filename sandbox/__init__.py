"""sandbox: the terminal AI agents get when they must not touch the host."""

__version__ = "0.1.0"

"""The package version (one definition; ``pyproject.toml`` carries the same)."""

__version__ = "0.1.0"

"""The session image: its packaged Dockerfile and building it when it is missing.

The Dockerfile ships inside the package (``sandbox/images/session``), so a pip-installed user can
build the image as well as someone with a checkout. Building needs ``debian:bookworm-slim``
locally or a registry that serves it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from importlib import resources
from pathlib import Path

from sandbox.backends.base import Backend
from sandbox.config import DEFAULT_IMAGE
from sandbox.version import __version__

log = logging.getLogger(__name__)

__all__ = ["DEFAULT_IMAGE", "build_session_image", "ensure_session_image", "session_tags"]


def session_context_dir() -> Path:
    """The build context of the session image inside the installed package."""
    return Path(str(resources.files("sandbox").joinpath("images", "session")))


def session_tags() -> list[str]:
    return [DEFAULT_IMAGE, f"sandbox-session:{__version__}"]


def build_session_image(backend: Backend, on_line: Callable[[str], None] | None = None) -> None:
    """Build the packaged session image, streaming progress lines to ``on_line``."""
    emit = on_line or (lambda line: log.info("image build: %s", line))
    emit(f"building {DEFAULT_IMAGE} from {session_context_dir()} (about a minute, once)")
    backend.build_image(str(session_context_dir()), session_tags(), emit)
    emit(f"built {DEFAULT_IMAGE}")


def ensure_session_image(
    backend: Backend, image: str, on_line: Callable[[str], None] | None = None
) -> bool:
    """Build the default session image when it is missing. True when a build ran."""
    if image != DEFAULT_IMAGE or backend.image_exists(image):
        return False
    build_session_image(backend, on_line)
    return True

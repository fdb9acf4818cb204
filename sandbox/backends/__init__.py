"""Container engines, reduced to what sessions need (``base.Backend``, the one seam).

``docker`` speaks the Docker API (Docker Engine, Docker Desktop, and Podman's compatible
service, whose differences are in ``podman``), with its errors translated in ``docker_errors``
and its execs in ``docker_exec``; ``fake`` runs "containers" as host processes for
unit tests. ``connect()`` is how everything else gets the engine of the environment
(``DOCKER_HOST``); code asks a backend's capabilities (``Backend.isolated``,
``Backend.sets_fsize_ulimit``), never its class.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sandbox.backends.docker import DockerBackend


def connect(*, lazy: bool = False) -> DockerBackend:
    """The engine of the environment. ``lazy``: connect on first use (and again on each use
    until it answers), so a server can start before its engine and say what is wrong."""
    from sandbox.backends.docker import DockerBackend

    return DockerBackend(lazy=lazy)

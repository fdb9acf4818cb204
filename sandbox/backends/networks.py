"""Engine networks over docker-py, for the egress proxy (``Backend.networks``).

Networks here are ordinary bridge networks; an ``internal`` one has no route out of the
engine, which is what makes an allow-list session's only way out its proxy. Errors are
translated by ``sandbox.backends.docker_errors.translate``, as every other engine call.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import docker.errors

from sandbox.backends.base import NetworkState
from sandbox.backends.docker_errors import translate

if TYPE_CHECKING:
    import docker


class DockerNetworks:
    """``NetworkControl`` on a Docker-API engine."""

    def __init__(self, api: docker.APIClient) -> None:
        self._api = api

    def ensure_network(self, name: str, labels: dict[str, str], *, internal: bool) -> None:
        if self.network(name) is not None:
            return
        try:
            self._api.create_network(
                name, driver="bridge", internal=internal, labels=labels, check_duplicate=True
            )
        except docker.errors.APIError as exc:
            if exc.status_code == 409:  # created meanwhile by another server of the owner
                return
            raise translate(exc, what=f"creating network {name}") from exc
        except Exception as exc:
            raise translate(exc, what=f"creating network {name}") from exc

    def remove_network(self, name: str) -> None:
        try:
            self._api.remove_network(name)
        except docker.errors.NotFound:
            return
        except Exception as exc:
            raise translate(exc, what=f"removing network {name}") from exc

    def network(self, name: str) -> NetworkState | None:
        try:
            data: dict[str, Any] = self._api.inspect_network(name)
        except docker.errors.NotFound:
            return None
        except Exception as exc:
            raise translate(exc, what=f"inspecting network {name}") from exc
        return NetworkState(
            name=str(data.get("Name", name)),
            labels=dict(data.get("Labels") or {}),
            containers=tuple(sorted((data.get("Containers") or {}).keys())),
        )

    def connect(self, container_id: str, network: str) -> None:
        try:
            self._api.connect_container_to_network(container_id, network)
        except docker.errors.APIError as exc:
            if "already exists" in str(exc.explanation or ""):
                return
            raise translate(exc, what=f"connecting to network {network}") from exc
        except Exception as exc:
            raise translate(exc, what=f"connecting to network {network}") from exc

    def start(self, container_id: str) -> None:
        try:
            self._api.start(container_id)
        except Exception as exc:
            raise translate(exc, what="starting the container") from exc

    def follow_logs(self, container_id: str, since: int) -> Iterator[bytes]:
        try:
            stream = self._api.logs(
                container_id, stdout=True, stderr=False, stream=True, follow=True, since=since
            )
        except Exception as exc:
            raise translate(exc, what="following the container's log") from exc
        with contextlib.suppress(Exception):  # the stream ends when the container stops
            yield from stream

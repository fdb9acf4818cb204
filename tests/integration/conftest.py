"""Integration fixtures: a real engine, a manager whose containers carry this run's owner label.

With SANDBOX_REQUIRE_DOCKER=1 (CI) a missing engine fails the tests instead of skipping them.
Every container the tests make is removed by label at the end, even if a test leaks it.
"""

from __future__ import annotations

import os
import secrets
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbox.config import LABEL_MANAGED, LABEL_OWNER, SandboxConfig
from sandbox.session.manager import SessionManager

REPO = Path(__file__).resolve().parents[2]

RUN_OWNER = f"test-{secrets.token_hex(4)}"


def _engine() -> object | None:
    try:
        import docker

        client = docker.from_env(timeout=10)
        client.ping()
        return client
    except Exception:
        return None


@pytest.fixture(scope="session")
def docker_client() -> Iterator[object]:
    client = _engine()
    if client is None:
        if os.environ.get("SANDBOX_REQUIRE_DOCKER") == "1":
            pytest.fail("SANDBOX_REQUIRE_DOCKER=1 but no Docker engine answers")
        pytest.skip("no Docker engine answers")
    yield client
    import docker

    assert isinstance(client, docker.DockerClient)
    leaked = client.containers.list(
        all=True, filters={"label": [f"{LABEL_MANAGED}=true", f"{LABEL_OWNER}={RUN_OWNER}"]}
    )
    for container in leaked:
        container.remove(force=True)
    # No container may outlive the run: a leak fails the suite (after cleaning it up).
    assert not leaked, f"containers left behind: {[c.name for c in leaked]}"


def make_config(root: Path, **overrides: object) -> SandboxConfig:
    values: dict[str, object] = {
        "state_dir": root / ".state",
        "allowed_roots": (root,),
        "owner": RUN_OWNER,
        "max_sessions": 40,
        "memory_mb": 512,
        "pids": 256,
    }
    values.update(overrides)
    return SandboxConfig(**values)  # type: ignore[arg-type]


@pytest.fixture(scope="session")
def manager(docker_client: object, allowed_root: Path) -> Iterator[SessionManager]:
    mgr = SessionManager(make_config(allowed_root))
    yield mgr
    mgr.close()


def ensure_server_image(client: object, image: str) -> None:
    """Build the server image with scripts/server-image.sh when the engine lacks it."""
    import docker

    assert isinstance(client, docker.DockerClient)
    try:
        client.images.get(image)
        return
    except docker.errors.ImageNotFound:
        pass
    run = subprocess.run(
        ["bash", str(REPO / "scripts" / "server-image.sh")],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert run.returncode == 0, f"scripts/server-image.sh failed:\n{run.stderr[-4000:]}"

"""Install a peer offline: its own venv from the package index, its image built locally.

``ensure(peer, base_image)`` returns a ``Ready`` (the venv's python and the image tag) or raises
``PeerUnavailable`` with the reason. A venv is reused when its ``ready.json`` names the same
requirements; an image is reused when it exists. Images are built FROM the session image with
``docker build`` (nothing pulled) and labelled ``sandbox.managed=true``.
"""

from __future__ import annotations

import contextlib
import io
import json
import shutil
import subprocess
import sys
import tarfile
from dataclasses import dataclass
from pathlib import Path

import docker

from sandbox.config import LABEL_MANAGED, LABEL_OWNER

CACHE = Path(__file__).resolve().parents[1] / ".peers"
HERE = Path(__file__).resolve().parent
IMAGE_OWNER = "bench-peers"  # images outlive a run: they are the cache's, not the run's


class PeerUnavailable(Exception):
    """The peer cannot be installed or started here; the message says why."""


@dataclass(frozen=True)
class Peer:
    name: str  # the venv's folder and the image's tag
    driver: str  # a driver_*.py of this folder
    requirements: tuple[str, ...]
    # installed with --no-deps --ignore-requires-python (a package whose metadata asks for more
    # than the part we drive needs), then ``requirements`` on their own
    no_deps: tuple[str, ...] = ()
    # pip install --target of these, copied into the image at /opt/peer (PYTHONPATH)
    in_image: tuple[str, ...] = ()
    dockerfile_extra: str = ""


@dataclass(frozen=True)
class Ready:
    peer: Peer
    python: Path
    image: str


def _pip(python: Path, *args: str, log: Path) -> None:
    with log.open("a") as out:
        proc = subprocess.run(
            [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            timeout=900,
            check=False,
        )
    if proc.returncode != 0:
        tail = [ln for ln in log.read_text().splitlines() if "ERROR" in ln][-2:]
        raise PeerUnavailable(f"pip install {' '.join(args)} failed: {' / '.join(tail)}")


def _venv(peer: Peer) -> Path:
    home = CACHE / peer.name
    python = home / "bin" / "python"
    stamp = home / "ready.json"
    want = {"requirements": list(peer.requirements), "no_deps": list(peer.no_deps)}
    with contextlib.suppress(OSError, ValueError):
        if json.loads(stamp.read_text()) == want and python.exists():
            return python
    shutil.rmtree(home, ignore_errors=True)
    home.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "venv", str(home)], check=True, timeout=300)
    log = CACHE / f"{peer.name}.log"
    log.write_text("")
    if peer.no_deps:
        _pip(python, "--no-deps", "--ignore-requires-python", *peer.no_deps, log=log)
    _pip(python, *peer.requirements, log=log)
    stamp.write_text(json.dumps(want))
    return python


def _context(peer: Peer, python: Path, base_image: str) -> bytes:
    """A tar build context: the Dockerfile, and /opt/peer when the image needs packages."""
    lines = [f"FROM {base_image}"]
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        if peer.in_image:
            target = CACHE / f"{peer.name}-image"
            if not target.exists():
                log = CACHE / f"{peer.name}.log"
                _pip(python, "--target", str(target), *peer.in_image, log=log)
            tar.add(str(target), arcname="peer")
            lines += ["COPY peer /opt/peer", "ENV PYTHONPATH=/opt/peer"]
        lines.append(peer.dockerfile_extra)
        data = "\n".join(lines).encode()
        info = tarfile.TarInfo("Dockerfile")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _image(client: docker.DockerClient, peer: Peer, python: Path, base_image: str) -> str:
    tag = f"sandbox-peer-{peer.name}:bench"
    with contextlib.suppress(docker.errors.ImageNotFound):
        client.images.get(tag)
        return tag
    context = _context(peer, python, base_image)
    try:
        client.images.build(
            fileobj=io.BytesIO(context),
            custom_context=True,
            tag=tag,
            pull=False,
            rm=True,
            labels={LABEL_MANAGED: "true", LABEL_OWNER: IMAGE_OWNER},
        )
    except (docker.errors.BuildError, docker.errors.APIError) as exc:
        raise PeerUnavailable(f"building {tag} FROM {base_image} failed: {exc}") from exc
    return tag


def ensure(client: docker.DockerClient, peer: Peer, base_image: str) -> Ready:
    try:
        python = _venv(peer)
    except (OSError, subprocess.SubprocessError) as exc:
        raise PeerUnavailable(f"venv for {peer.name}: {type(exc).__name__}: {exc}") from exc
    return Ready(peer, python, _image(client, peer, python, base_image))


SWEREX_REMOTE = (
    'RUN printf \'#!/bin/sh\\nexec python3 -c "from swerex.server import main; main()" "$@"\\n\''
    " > /usr/local/bin/swerex-remote && chmod 755 /usr/local/bin/swerex-remote"
)

PEERS: dict[str, Peer] = {
    "llm-sandbox": Peer(
        "llm-sandbox", "driver_llm_sandbox.py", ("llm-sandbox[docker]==0.3.46", "docker")
    ),
    "swe-rex": Peer(
        "swe-rex",
        "driver_swerex.py",
        ("swe-rex==1.4.0", "aiohttp"),  # its remote runtime's client needs aiohttp
        in_image=("swe-rex==1.4.0",),
        dockerfile_extra=SWEREX_REMOTE,
    ),
    # terminal-bench 0.2.18 asks for Python >= 3.12 and ~40 packages (pandas, streamlit,
    # litellm, ...) for its agents and UI; its tmux harness needs only these.
    "terminal-bench": Peer(
        "terminal-bench",
        "driver_tmux.py",
        ("docker", "pydantic", "pyyaml", "jinja2", "tenacity", "tabulate", "ruamel.yaml"),
        no_deps=("terminal-bench==0.2.18",),
    ),
}

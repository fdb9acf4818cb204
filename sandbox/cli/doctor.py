"""``sandbox doctor``: is this machine ready to run sessions? Each check says ok or FAIL, and how
to fix it.

Checks run in order and later ones are skipped when what they need failed (no engine: no image
check). The resource-limit checks start a tiny labelled container from the session image with
known limits and read its cgroup files (v1 or v2), so they prove the engine *enforces* limits,
not merely accepts them. ``exit_code`` is 0 only when every required check passed.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Generator, Iterator
from pathlib import Path
from typing import Any

from sandbox.backends.base import EngineDescription
from sandbox.cli.check import Check
from sandbox.cli.doctor_limits import limits
from sandbox.config import SandboxConfig, env_var
from sandbox.egress.health import egress_health
from sandbox.errors import SandboxError
from sandbox.session.image import DEFAULT_IMAGE

MIN_API_VERSION = (1, 40)
RUNTIME_ENV = env_var("runtime")
ALLOWED_RUNTIMES_ENV = env_var("allowed_runtimes")
GVISOR = "runsc"
# How to register gVisor with a Docker engine. Debian's runsc works with networking off only,
# and sessions need no network by default: pass --network=none to every sandbox it runs.
RUNSC_DAEMON_JSON = (
    '{"runtimes": {"runsc": {"path": "/usr/bin/runsc", "runtimeArgs": ["--network=none"]}}}'
)
RUNSC_HOWTO = (
    "install gVisor (Debian/Ubuntu: `apt-get install runsc`, or gvisor.dev/docs/user_guide/"
    "install), add a `runtimes` entry to /etc/docker/daemon.json (merge it with what is there): "
    f"{RUNSC_DAEMON_JSON}, reload the engine (`sudo kill -HUP $(pidof dockerd)`; running "
    "containers keep running; scripts/engine.sh does all this as root on Debian), then set "
    "SANDBOX_RUNTIME=runsc (every session) or SANDBOX_ALLOWED_RUNTIMES=runsc (sessions that "
    "ask). With --network=none, sessions under runsc have no network even when they ask for it."
)


def run_checks(
    environ: dict[str, str] | None = None,
    backend_factory: Callable[[], Any] | None = None,
) -> Iterator[Check]:
    """Yield each check as it completes (so a slow one shows progress)."""
    env = dict(os.environ if environ is None else environ)
    config = yield from _configuration(env)
    yield _state_dir(config)
    yield _allowed_roots(config)
    connected = yield from _engine(env, backend_factory)
    if connected is None:
        yield Check("session image", "skip", "needs the engine")
        yield Check("resource limits", "skip", "needs the engine")
        return
    backend, engine = connected
    yield _api_version(engine)
    yield _user_namespaces(backend)
    runtime = config.runtime
    yield _runtime(engine, runtime, ",".join(config.allowed_runtimes))
    if runtime not in engine.runtimes:
        runtime = None  # already reported; probe the limits with the default runtime
    present = yield from _session_image(backend, config.image)
    for finding in egress_health(backend, config):
        yield Check(finding.name, finding.status, finding.detail, finding.fix, finding.required)
    if not present:
        yield Check("resource limits", "skip", "needs the session image")
        return
    yield from limits(backend, config, config.image, runtime)


def _configuration(env: dict[str, str]) -> Generator[Check, None, SandboxConfig]:
    try:
        config = SandboxConfig.from_env(env)
        yield Check("configuration", "ok", "SANDBOX_* variables are valid")
    except SandboxError as exc:
        yield Check("configuration", "FAIL", exc.message, exc.hint)
        config = SandboxConfig.defaults()
    return config


def _engine(
    env: dict[str, str], backend_factory: Callable[[], Any] | None
) -> Generator[Check, None, tuple[Any, EngineDescription] | None]:
    """The "engine answers" check; the backend and its description, or None."""
    where = env.get("DOCKER_HOST") or "the default socket (unix:///var/run/docker.sock)"
    try:
        if backend_factory is None:
            from sandbox.backends import connect

            backend: Any = connect()
        else:
            backend = backend_factory()
        engine: EngineDescription = backend.describe()
    except SandboxError as exc:
        yield Check(
            "engine answers",
            "FAIL",
            f"no container engine at {where}: {exc.message}",
            "Start Docker (Docker Desktop, `sudo systemctl start docker`) or Podman "
            "(`systemctl --user start podman.socket`), or point DOCKER_HOST at its socket.",
        )
        return None
    details = [engine.version]
    if engine.os:
        details.append(engine.os)
    if engine.cgroup_version:
        details.append(f"cgroup v{engine.cgroup_version}")
    yield Check("engine answers", "ok", f"{engine.name} {', '.join(details)} at {where}")
    return backend, engine


def _session_image(backend: Any, image: str) -> Generator[Check, None, bool]:
    """The "session image" check; whether the image is present."""
    try:
        present: bool = backend.image_exists(image)
    except SandboxError as exc:
        yield Check("session image", "FAIL", f"cannot look up {image}: {exc.message}", exc.hint)
        return False
    if present:
        yield Check("session image", "ok", f"{image} is present")
    else:
        fix = (
            "Run `sandbox image build`."
            if image == DEFAULT_IMAGE
            else f"Build or load {image} on this engine, or unset SANDBOX_IMAGE."
        )
        yield Check("session image", "FAIL", f"{image} is not on the engine", fix)
    return present


def _state_dir(config: SandboxConfig) -> Check:
    path = config.state_dir
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path, prefix=".doctor-"):
            pass
    except OSError as exc:
        return Check(
            "state directory writable",
            "FAIL",
            f"{path}: {exc.strerror or exc}",
            "Make it writable for this user, or set SANDBOX_STATE_DIR to a directory that is.",
        )
    return Check("state directory writable", "ok", str(path))


def _allowed_roots(config: SandboxConfig) -> Check:
    roots = [Path(r) for r in config.allowed_roots]
    missing = [str(r) for r in roots if not r.is_dir()]
    present = [str(r) for r in roots if r.is_dir()]
    if not present:
        return Check(
            "allowed roots exist",
            "FAIL",
            "none of them exists: " + ", ".join(missing),
            "Set SANDBOX_ALLOWED_ROOTS to existing directories (separated by "
            f"{os.pathsep!r}) under which your projects live.",
        )
    if missing:
        return Check(
            "allowed roots exist",
            "warn",
            f"{', '.join(present)} (missing: {', '.join(missing)})",
            "Create the missing directories or drop them from SANDBOX_ALLOWED_ROOTS.",
        )
    return Check("allowed roots exist", "ok", ", ".join(present))


def _api_version(engine: EngineDescription) -> Check:
    try:
        version = tuple(int(p) for p in engine.api_version.split(".")[:2])
    except ValueError:
        version = ()
    minimum = ".".join(str(p) for p in MIN_API_VERSION)
    if len(version) == 2 and version >= MIN_API_VERSION:
        return Check("API version", "ok", f"{engine.api_version} (need {minimum}+)")
    return Check(
        "API version",
        "FAIL",
        f"{engine.api_version or 'unknown'} is older than {minimum}",
        "Upgrade the engine (Docker 19.03+ or Podman 3+).",
    )


def _user_namespaces(backend: Any) -> Check:
    """Reported, not required: sessions run unprivileged with every capability dropped."""
    try:
        info: dict[str, Any] = backend.api.info()
    except Exception:
        return Check("user namespaces", "info", "unknown", required=False)
    options = " ".join(str(o) for o in info.get("SecurityOptions") or [])
    if "name=rootless" in options:
        return Check("user namespaces", "ok", "rootless engine", required=False)
    if "name=userns" in options:
        return Check("user namespaces", "ok", "userns-remap is on", required=False)
    return Check(
        "user namespaces",
        "info",
        "off (root in a container is root on the host; a shell runs as root only for a "
        "root-owned project, and every shell drops every capability; rootless Docker/Podman "
        "or userns-remap would add a layer)",
        required=False,
    )


def _runtime(engine: EngineDescription, runtime: str | None, allowed: str = "") -> Check:
    """Whether gVisor (runsc) is registered with the engine, used, and how to register it.

    Optional: a stricter tier (a user-space kernel between the session and the host's)."""
    registered = ", ".join(engine.runtimes) or "none reported"
    has_runsc = GVISOR in engine.runtimes
    name = "gVisor runtime" if runtime in (None, GVISOR) else "runtime"
    if runtime is None:
        offered = GVISOR in {r.strip() for r in allowed.split(",")}
        if has_runsc:
            use = (
                f"sessions may ask for it ({ALLOWED_RUNTIMES_ENV})"
                if offered
                else f"not used: set {RUNTIME_ENV}=runsc or {ALLOWED_RUNTIMES_ENV}=runsc"
            )
            return Check(name, "info", f"runsc is registered; {use}", required=False)
        return Check(
            name,
            "info",
            f"runsc is not registered with the engine (runtimes: {registered}); sessions use "
            "the default runtime (namespaces and cgroups on the host's kernel)",
            RUNSC_HOWTO,
            required=False,
        )
    if runtime in engine.runtimes:
        return Check(name, "ok", f"{runtime} is registered and used for every session")
    return Check(
        name,
        "FAIL",
        f"{RUNTIME_ENV}={runtime} but the engine has only: {registered}",
        (RUNSC_HOWTO if runtime == GVISOR else f"Register {runtime} with the engine")
        + f" Or unset {RUNTIME_ENV}.",
    )

"""``sandbox doctor``: is this machine ready to run sessions? Each check says ok or FAIL, and how
to fix it.

Checks run in order and later ones are skipped when what they need failed (no engine: no image
check). The resource-limit checks start a tiny labelled container from the session image with
known limits and read its cgroup files (v1 or v2), so they prove the engine *enforces* limits,
not merely accepts them. ``exit_code`` is 0 only when every required check passed.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from sandbox.backends.base import EngineDescription
from sandbox.config import SESSION_HOME, SandboxConfig, env_var
from sandbox.egress.health import egress_health
from sandbox.errors import SandboxError
from sandbox.models import CreateRequest
from sandbox.session.image import DEFAULT_IMAGE
from sandbox.session.profile import blueprint, container_spec, session_spec
from sandbox.shell.markers import SHELL_ARGV

Status = Literal["ok", "FAIL", "warn", "info", "skip"]

MIN_API_VERSION = (1, 40)
PROBE_MEMORY_MB = 64
PROBE_PIDS = 64
PROBE_CPUS = 0.5
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

# Printed by the probe container: "file=value" for each cgroup file it can read.
_CGROUP_FILES = (
    "memory.max",
    "pids.max",
    "cpu.max",
    "memory/memory.limit_in_bytes",
    "pids/pids.max",
    "cpu/cpu.cfs_quota_us",
    "cpu/cpu.cfs_period_us",
    "cpu,cpuacct/cpu.cfs_quota_us",
    "cpu,cpuacct/cpu.cfs_period_us",
)
# What a session's shell does before it starts (SHELL_ARGV's preamble), then a write.
_HOME_CHECK = SHELL_ARGV[2].split("exec bash")[0] + 'touch "$HOME/.sandbox-doctor" && echo home-ok'

_PROBE_SCRIPT = (
    f"for f in {' '.join(_CGROUP_FILES)}; do "
    '[ -r "/sys/fs/cgroup/$f" ] && printf "%s=%s\\n" "$f" "$(cat "/sys/fs/cgroup/$f")"; '
    "done; true"
)


@dataclass(frozen=True)
class Check:
    name: str
    status: Status
    detail: str = ""
    fix: str = ""
    required: bool = True

    @property
    def passed(self) -> bool:
        return self.status != "FAIL" or not self.required

    def render(self) -> str:
        line = f"{self.status:<5} {self.name}" + (f": {self.detail}" if self.detail else "")
        if self.fix and self.status in ("FAIL", "warn"):
            line += f"\n      fix: {self.fix}"
        elif self.fix and self.status == "info":
            line += f"\n      how: {self.fix}"
        return line


def exit_code(checks: list[Check]) -> int:
    return 0 if all(c.passed for c in checks) else 1


def run_checks(
    environ: dict[str, str] | None = None,
    backend_factory: Callable[[], Any] | None = None,
) -> Iterator[Check]:
    """Yield each check as it completes (so a slow one shows progress)."""
    env = dict(os.environ if environ is None else environ)
    try:
        config = SandboxConfig.from_env(env)
        yield Check("configuration", "ok", "SANDBOX_* variables are valid")
    except SandboxError as exc:
        yield Check("configuration", "FAIL", exc.message, exc.hint)
        config = SandboxConfig.defaults()
    yield _state_dir(config)
    yield _allowed_roots(config)

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
        yield Check("session image", "skip", "needs the engine")
        yield Check("resource limits", "skip", "needs the engine")
        return
    details = [engine.version]
    if engine.os:
        details.append(engine.os)
    if engine.cgroup_version:
        details.append(f"cgroup v{engine.cgroup_version}")
    yield Check("engine answers", "ok", f"{engine.name} {', '.join(details)} at {where}")
    yield _api_version(engine)
    yield _user_namespaces(backend)
    runtime = config.runtime
    yield _runtime(engine, runtime, ",".join(config.allowed_runtimes))
    if runtime not in engine.runtimes:
        runtime = None  # already reported; probe the limits with the default runtime

    image = config.image
    try:
        present = backend.image_exists(image)
    except SandboxError as exc:
        present = False
        yield Check("session image", "FAIL", f"cannot look up {image}: {exc.message}", exc.hint)
    else:
        if present:
            yield Check("session image", "ok", f"{image} is present")
        else:
            fix = (
                "Run `sandbox image build`."
                if image == DEFAULT_IMAGE
                else f"Build or load {image} on this engine, or unset SANDBOX_IMAGE."
            )
            yield Check("session image", "FAIL", f"{image} is not on the engine", fix)
    for finding in egress_health(backend, config):
        yield Check(finding.name, finding.status, finding.detail, finding.fix, finding.required)
    if not present:
        yield Check("resource limits", "skip", "needs the session image")
        return
    yield from _limits(backend, config, image, runtime)


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


def _limits(
    backend: Any, config: SandboxConfig, image: str, runtime: str | None
) -> Iterator[Check]:
    """Start a container with exactly a session's options (the container profile: tmpfs
    mounts, init, read-only root, limits, user), so this fails where sessions would; then read
    its cgroup and open a shell's home the way a session's shell does."""
    tag = f"doctor-{secrets.token_hex(6)}"
    cid: str | None = None
    with tempfile.TemporaryDirectory(prefix="sandbox-doctor-") as project:
        Path(project).chmod(0o755)
        probe = config.model_copy(
            update={
                "allowed_roots": (Path(project).resolve(),),
                "image": image,
                "runtime": runtime,
                "allowed_images": (),
                "max_memory_mb": max(config.max_memory_mb, PROBE_MEMORY_MB),
                "max_cpus": max(config.max_cpus, PROBE_CPUS),
                "max_pids": max(config.max_pids, PROBE_PIDS),
            }
        )
        try:
            bp = blueprint(
                probe,
                CreateRequest(
                    project_path=project,
                    memory_mb=PROBE_MEMORY_MB,
                    cpus=PROBE_CPUS,
                    pids=PROBE_PIDS,
                ),
            )
            spec = session_spec(bp, tag, 24, 80)
            cid = backend.create(container_spec(probe, tag, spec))
            result = backend.run(cid, ["sh", "-c", _PROBE_SCRIPT], user="65534:65534")
            values = parse_cgroup_output(result.output.decode("utf-8", "replace"))
            home = backend.run(cid, [*SHELL_ARGV[:2], _HOME_CHECK], user=spec.user, env=spec.env)
        except SandboxError as exc:
            yield Check(
                "session container starts",
                "FAIL",
                f"a container with the sessions' options did not start: {exc.message}",
                exc.hint
                or f"Try `docker run --rm --memory {PROBE_MEMORY_MB}m --cpus {PROBE_CPUS:g} "
                f"--pids-limit {PROBE_PIDS} --init --read-only {image} true` and fix what the "
                "engine reports.",
            )
            return
        finally:
            if cid is not None:
                with contextlib.suppress(SandboxError):
                    backend.remove(cid)
    yield Check("session container starts", "ok", "a container with the sessions' options ran")
    said = home.output.decode("utf-8", "replace")
    if "home-ok" in said:
        yield Check("session home writable", "ok", f"{SESSION_HOME} made and written as the shell")
    else:
        yield Check(
            "session home writable",
            "FAIL",
            f"the shell's home {SESSION_HOME} could not be made or written: {said.strip()[-200:]}",
            f"The session's home is a tmpfs at {SESSION_HOME}: an image with a file there, or an "
            "engine that ignores the tmpfs's owner and mode, breaks it. Rebuild the session "
            "image with `sandbox image build`.",
        )
    yield from judge_limits(values)


def parse_cgroup_output(text: str) -> dict[str, str]:
    values = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            values[key.strip()] = value.strip()
    return values


def judge_limits(values: dict[str, str]) -> Iterator[Check]:
    """Compare the probe's cgroup files with the limits it was started with."""
    v2 = "memory.max" in values or "cpu.max" in values or "pids.max" in values
    version = "v2" if v2 else "v1"
    fix = (
        "The engine does not apply this limit: enable the cgroup controller (cgroup v2 with "
        "systemd: `systemd.unified_cgroup_hierarchy=1`; rootless engines: delegate cpu, memory "
        "and pids to the user with systemd), then restart the engine."
    )

    memory = values.get("memory.max") or values.get("memory/memory.limit_in_bytes")
    expected = PROBE_MEMORY_MB * 1024 * 1024
    if memory is not None and memory.isdigit() and int(memory) <= expected:
        yield Check("memory limit enforced", "ok", f"cgroup {version}: {int(memory) >> 20} MiB")
    else:
        yield Check(
            "memory limit enforced", "FAIL", f"cgroup {version}: {memory or 'unreadable'}", fix
        )

    pids = values.get("pids.max") or values.get("pids/pids.max")
    if pids is not None and pids.isdigit() and int(pids) <= PROBE_PIDS:
        yield Check("pids limit enforced", "ok", f"cgroup {version}: {pids}")
    else:
        yield Check("pids limit enforced", "FAIL", f"cgroup {version}: {pids or 'unreadable'}", fix)

    cpus: float | None = None
    if "cpu.max" in values:
        quota, _, period = values["cpu.max"].partition(" ")
        cpus = _ratio(quota, period)
    else:
        for base in ("cpu", "cpu,cpuacct"):
            v1_quota = values.get(f"{base}/cpu.cfs_quota_us")
            v1_period = values.get(f"{base}/cpu.cfs_period_us")
            if v1_quota is not None and v1_period is not None:
                cpus = _ratio(v1_quota, v1_period)
                break
    if cpus is not None and abs(cpus - PROBE_CPUS) < 0.01:
        yield Check("CPU limit enforced", "ok", f"cgroup {version}: {cpus:g} CPUs")
    else:
        shown = f"{cpus:g} CPUs" if cpus is not None else "no quota"
        yield Check("CPU limit enforced", "FAIL", f"cgroup {version}: {shown}", fix)


def _ratio(quota: str, period: str) -> float | None:
    try:
        q, p = int(quota), int(period)
    except ValueError:
        return None
    return q / p if q > 0 and p > 0 else None

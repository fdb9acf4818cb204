"""``sandbox doctor``'s resource-limit checks: a tiny labelled container started with exactly
a session's options, whose cgroup files (v1 or v2) prove the engine *enforces* the limits, not
merely accepts them, and whose shell home opens the way a session's does.
"""

from __future__ import annotations

import contextlib
import secrets
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from sandbox.cli.check import Check
from sandbox.config import SESSION_HOME, SandboxConfig
from sandbox.errors import SandboxError
from sandbox.models import CreateRequest
from sandbox.session.profile import blueprint, container_spec, session_spec
from sandbox.shell.markers import SHELL_ARGV

PROBE_MEMORY_MB = 64
PROBE_PIDS = 64
PROBE_CPUS = 0.5

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


def limits(backend: Any, config: SandboxConfig, image: str, runtime: str | None) -> Iterator[Check]:
    """Start a container with exactly a session's options (the container profile: tmpfs
    mounts, init, read-only root, limits, user), so this fails where sessions would; then read
    its cgroup and open a shell's home the way a session's shell does."""
    tag = f"doctor-{secrets.token_hex(6)}"
    cid: str | None = None
    with tempfile.TemporaryDirectory(prefix="sandbox-doctor-") as project:
        Path(project).chmod(0o755)
        probe = _probe_config(config, Path(project), image, runtime)
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
            yield _start_failed(exc, image)
            return
        finally:
            if cid is not None:
                with contextlib.suppress(SandboxError):
                    backend.remove(cid)
    yield Check("session container starts", "ok", "a container with the sessions' options ran")
    yield _home_writable(home.output.decode("utf-8", "replace"))
    yield from judge_limits(values)


def _probe_config(
    config: SandboxConfig, project: Path, image: str, runtime: str | None
) -> SandboxConfig:
    """``config`` opened just enough for the probe: its project, image, runtime and limits."""
    return config.model_copy(
        update={
            "allowed_roots": (project.resolve(),),
            "image": image,
            "runtime": runtime,
            "allowed_images": (),
            "max_memory_mb": max(config.max_memory_mb, PROBE_MEMORY_MB),
            "max_cpus": max(config.max_cpus, PROBE_CPUS),
            "max_pids": max(config.max_pids, PROBE_PIDS),
        }
    )


def _start_failed(exc: SandboxError, image: str) -> Check:
    return Check(
        "session container starts",
        "FAIL",
        f"a container with the sessions' options did not start: {exc.message}",
        exc.hint
        or f"Try `docker run --rm --memory {PROBE_MEMORY_MB}m --cpus {PROBE_CPUS:g} "
        f"--pids-limit {PROBE_PIDS} --init --read-only {image} true` and fix what the "
        "engine reports.",
    )


def _home_writable(said: str) -> Check:
    """What the probe's shell said when it made and wrote its home."""
    if "home-ok" in said:
        return Check("session home writable", "ok", f"{SESSION_HOME} made and written as the shell")
    return Check(
        "session home writable",
        "FAIL",
        f"the shell's home {SESSION_HOME} could not be made or written: {said.strip()[-200:]}",
        f"The session's home is a tmpfs at {SESSION_HOME}: an image with a file there, or an "
        "engine that ignores the tmpfs's owner and mode, breaks it. Rebuild the session "
        "image with `sandbox image build`.",
    )


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

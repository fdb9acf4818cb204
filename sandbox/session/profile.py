"""What a create request becomes: a validated ``Blueprint``, the session's spec, and the
container spec that carries the security profile (DESIGN §6).

Every check names the field it refused and says what would be accepted. The profile itself:
the project's owner as the shell's user (root too, unless SANDBOX_ROOT_SHELL=0: then uid 1000,
and the project is reported not writable up front), no capabilities,
no new privileges, memory (and swap), CPU and pids limits, no network unless asked and allowed,
a read-only root with sized tmpfs mounts (together at most half the memory limit, since their
pages count against it), a file size cap, and a keepalive that ends the container by its
maximum lifetime. The spec is also stored as a label, so a later server can adopt a durable
session.
"""

from __future__ import annotations

import json
import os
import re
import secrets
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from sandbox.backends.base import ContainerSpec, Mount
from sandbox.config import (
    KEEPALIVE_UID,
    LABEL_CREATED,
    LABEL_DURABLE,
    LABEL_MANAGED,
    LABEL_NAME,
    LABEL_OWNER,
    LABEL_PROJECT,
    LABEL_SERVER,
    LABEL_SESSION,
    LABEL_SPEC,
    LABEL_VERSION,
    SANDBOX_UID,
    SESSION_HOME,
    WORKSPACE,
    SandboxConfig,
)
from sandbox.egress.names import PROXY_ENV_NAMES, network_name, proxy_env
from sandbox.egress.policy import session_network
from sandbox.errors import InvalidArgumentError
from sandbox.models import CreateRequest, Limits
from sandbox.session.paths import project_owner, resolve_project_path, write_access
from sandbox.session.spec import SessionSpec, now_iso
from sandbox.shell.durable import STATE_DIR
from sandbox.version import __version__

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
_RESERVED_ENV = {"SANDBOX_RC", "SANDBOX_FSIZE_KB", "SANDBOX_NPROC"}
_LABEL_ENV = (
    "HOME",
    "USER",
    "LOGNAME",
    "TERM",
    "LANG",
    "SANDBOX_SESSION",
    "SANDBOX_FSIZE_KB",
    "SANDBOX_NPROC",
    *PROXY_ENV_NAMES,
)
# gVisor (runsc, ptrace platform) backs every process of the sandbox with host tasks (measured:
# about 8 per process, 38 for an idle sandbox): the container's pids limit bounds those, and
# the session's own process limit is the shell's RLIMIT_NPROC, which gVisor enforces.
GVISOR_TASKS_PER_PROCESS = 10
GVISOR_BASE_TASKS = 128


def is_gvisor(runtime: str | None) -> bool:
    return runtime is not None and ("runsc" in runtime or "gvisor" in runtime)


def host_pids_limit(pids: int, runtime: str | None) -> int:
    """The container's pids limit for a session that may run ``pids`` processes."""
    if is_gvisor(runtime):
        return pids * GVISOR_TASKS_PER_PROCESS + GVISOR_BASE_TASKS
    return pids


@dataclass(frozen=True)
class Blueprint:
    """Everything that shapes a session's container and shell (validated, hashable)."""

    image: str
    runtime: str | None
    project: str
    workdir: str
    name: str
    network: bool
    durable: bool
    memory_mb: int
    cpus: float
    pids: int
    read_only_project: bool
    command: tuple[str, ...] | None
    uid: int
    gid: int
    env: tuple[tuple[str, str], ...]
    fsize_kb: int = 0
    egress: tuple[str, ...] | None = None  # an allow-list through the egress proxy


def blueprint(config: SandboxConfig, request: CreateRequest) -> Blueprint:
    """Validate a request into the blueprint of its container (errors name the field)."""
    project = resolve_project_path(request.project_path, config.allowed_roots)
    limits = _limits(config, request)
    uid, gid = project_owner(project)
    if uid == 0 and not config.root_shell:
        uid, gid = SANDBOX_UID, SANDBOX_UID
    runtime = _runtime(config, request.runtime)
    network = session_network(config, request.network)
    if network.restricted and is_gvisor(runtime):
        raise InvalidArgumentError(
            f"an egress allow-list cannot be given to a session under {runtime}: that runtime "
            "runs with --network=none here, so the session could not reach its proxy",
            hint="Use the default runtime for a session with network=[...], or network=false "
            "under gVisor.",
        )
    return Blueprint(
        image=_image(config, request.image),
        runtime=runtime,
        project=str(project),
        workdir=_workdir(request.workdir),
        name=_name(request.name, project),
        network=network.enabled,
        egress=network.allow,
        durable=config.durable if request.durable is None else request.durable,
        memory_mb=limits.memory_mb,
        cpus=limits.cpus,
        pids=limits.pids,
        read_only_project=request.read_only_project,
        command=tuple(request.command) if request.command else None,
        uid=uid,
        gid=gid,
        env=tuple(sorted(_env(request.env).items())),
        fsize_kb=config.fsize_mb * 1024,
    )


@dataclass(frozen=True)
class ProjectAccess:
    """Whether a session's shell can write its project, and what to tell the agent if not."""

    project_writable: bool
    notices: list[str]


def project_access(spec: SessionSpec) -> ProjectAccess:
    """Judged on the host from the shell's uid:gid, the mount and the directory's mode."""
    uid, _, gid = spec.user.partition(":")
    path = Path(spec.project_path)
    reason = write_access(path, int(uid), int(gid or uid), read_only=spec.read_only_project)
    if reason is None:
        return ProjectAccess(True, [])
    if spec.read_only_project:  # as asked: nothing to fix
        return ProjectAccess(False, [])
    if "read-only file system" in reason:
        fix = "mount it read-write on the host, or work on a copy in /tmp"
    elif project_owner(path)[0] == 0:
        fix = (
            "the server runs root's projects as uid 1000 because SANDBOX_ROOT_SHELL=0; unset it "
            "(the shell then runs as root, without any capability)"
        )
    else:
        fix = (
            f"give uid {uid} write access on the host (chown or chmod), or use a directory it owns"
        )
    notice = f"{spec.project_path} is not writable from this session: {reason}. Fix: {fix}."
    return ProjectAccess(False, [notice])


def session_spec(
    bp: Blueprint, session_id: str, rows: int, cols: int, owner: str = ""
) -> SessionSpec:
    """The spec of a new session built from ``bp`` (the shell's base environment included)."""
    secret = secrets.token_hex(16) if bp.egress is not None else ""
    return SessionSpec(
        session_id=session_id,
        name=bp.name,
        image=bp.image,
        project_path=bp.project,
        workdir=bp.workdir,
        rows=rows,
        cols=cols,
        network=bp.network,
        durable=bp.durable,
        limits=Limits(memory_mb=bp.memory_mb, cpus=bp.cpus, pids=bp.pids),
        created_at=now_iso(),
        read_only_project=bp.read_only_project,
        command=list(bp.command) if bp.command else None,
        runtime=bp.runtime,
        user=f"{bp.uid}:{bp.gid}",
        env={
            "HOME": SESSION_HOME,
            "USER": "sandbox",
            "LOGNAME": "sandbox",
            "TERM": "xterm-256color",
            "LANG": "C.UTF-8",
            "SANDBOX_SESSION": session_id,
            **({"SANDBOX_FSIZE_KB": str(bp.fsize_kb)} if bp.fsize_kb else {}),
            **({"SANDBOX_NPROC": str(bp.pids)} if is_gvisor(bp.runtime) else {}),
            **(proxy_env(owner, session_id, secret) if bp.egress is not None else {}),
            **dict(bp.env),
        },
        egress=list(bp.egress) if bp.egress is not None else None,
        egress_secret=secret,
    )


def container_spec(config: SandboxConfig, instance_id: str, spec: SessionSpec) -> ContainerSpec:
    """The container of session ``spec``, with the security profile and its labels."""
    c = config
    project = Path(spec.project_path)
    # tmpfs pages count against the memory limit: full tmpfs mounts must leave the shell
    # room to live, so together they get at most half of it.
    budget = max(8, spec.limits.memory_mb // 2)
    tmp_mb = min(c.tmp_mb, budget // 2)
    home_mb = min(c.home_mb, budget // 4)
    var_mb = min(64, budget // 8)
    uid, _, gid = spec.user.partition(":")
    network = "none"
    if spec.egress is not None:
        network = network_name(c.owner)
    elif spec.network:
        network = c.network if c.network_enabled else "bridge"
    return ContainerSpec(
        image=spec.image,
        name=f"sandbox-{spec.session_id}",
        labels={
            LABEL_MANAGED: "true",
            LABEL_SESSION: spec.session_id,
            LABEL_OWNER: c.owner,
            LABEL_SERVER: instance_id,
            LABEL_PROJECT: str(project),
            LABEL_NAME: spec.name,
            LABEL_DURABLE: "true" if spec.durable else "false",
            LABEL_CREATED: spec.created_at,
            LABEL_VERSION: __version__,
            LABEL_SPEC: spec_label(spec),
        },
        mounts=(
            Mount(str(project), WORKSPACE, read_only=spec.read_only_project),
            *((Mount(volume_name(spec.session_id), STATE_DIR),) if spec.durable else ()),
        ),
        command=("sleep", str(c.max_lifetime_s)),
        user=f"{KEEPALIVE_UID}:{KEEPALIVE_UID}",
        memory_mb=spec.limits.memory_mb,
        cpus=spec.limits.cpus,
        pids=host_pids_limit(spec.limits.pids, spec.runtime),
        network=network,
        tmpfs={
            "/tmp": f"rw,nosuid,nodev,size={tmp_mb}m,mode=1777",
            "/var/tmp": f"rw,nosuid,nodev,size={var_mb}m,mode=1777",
            # The shell's own (Podman refuses uid=/gid=: there it is 1777, see backends.podman)
            SESSION_HOME: f"rw,nosuid,nodev,size={home_mb}m,uid={uid},gid={gid},mode=0755",
            "/run": "rw,nosuid,nodev,noexec,size=16m,mode=0755",
        },
        read_only_root=True,
        fsize_bytes=c.fsize_mb * 1024 * 1024,
        env={
            "HOME": SESSION_HOME,
            "LANG": "C.UTF-8",
            **{k: v for k, v in spec.env.items() if k in PROXY_ENV_NAMES},
        },
        workdir=WORKSPACE,
        runtime=spec.runtime,
        # Behind the egress proxy no outside name resolves: fail in a second or two, not 20.
        dns_options=("timeout:1", "attempts:1") if spec.egress is not None else (),
    )


def volume_name(session_id: str) -> str:
    """The named volume of a durable session (its tmux socket and raw log)."""
    return f"sandbox-{session_id}"


def spec_label(spec: SessionSpec) -> str:
    """The spec as a container label, so a later server can adopt the session. Only the
    base environment is kept: variables the client passed may hold secrets."""
    data = spec.model_dump()
    data["env"] = {k: v for k, v in spec.env.items() if k in _LABEL_ENV}
    return json.dumps(data, separators=(",", ":"))


def spec_from_label(text: str) -> SessionSpec | None:
    try:
        return SessionSpec.model_validate_json(text)
    except ValidationError:
        return None


def _limits(config: SandboxConfig, request: CreateRequest) -> Limits:
    c = config
    checks = (
        ("memory_mb", request.memory_mb, c.memory_mb, c.max_memory_mb),
        ("cpus", request.cpus, c.cpus, c.max_cpus),
        ("pids", request.pids, c.pids, c.max_pids),
    )
    values: dict[str, float] = {}
    for field, asked, default, maximum in checks:
        value = default if asked is None else asked
        if value > maximum:
            raise InvalidArgumentError(
                f"{field}={asked} is above the server's maximum of {maximum}",
                hint=f"Ask for at most {maximum} (or omit {field} for the default {default}).",
            )
        values[field] = value
    return Limits(
        memory_mb=int(values["memory_mb"]), cpus=float(values["cpus"]), pids=int(values["pids"])
    )


def _image(config: SandboxConfig, asked: str | None) -> str:
    """A client may only pick an allowed image (SANDBOX_ALLOWED_IMAGES)."""
    image = asked or config.image
    allowed = {config.image, *config.allowed_images}
    if image not in allowed:
        raise InvalidArgumentError(
            f"image {image!r} is not allowed on this server",
            hint=f"Use one of: {', '.join(sorted(allowed))} (the operator sets "
            "SANDBOX_ALLOWED_IMAGES).",
        )
    return image


def _runtime(config: SandboxConfig, asked: str | None) -> str | None:
    runtime = asked or config.runtime
    allowed = {r for r in (config.runtime, *config.allowed_runtimes) if r}
    if runtime is not None and runtime not in allowed:
        raise InvalidArgumentError(
            f"runtime {runtime!r} is not allowed on this server",
            hint="Omit runtime for the default"
            + (f", or use one of: {', '.join(sorted(allowed))}" if allowed else "")
            + " (the operator sets SANDBOX_ALLOWED_RUNTIMES).",
        )
    return runtime


def _env(env: dict[str, str]) -> dict[str, str]:
    if len(env) > 256:
        raise InvalidArgumentError("too many environment variables", hint="Pass at most 256.")
    for key, value in env.items():
        if not _ENV_NAME.match(key) or key in _RESERVED_ENV:
            raise InvalidArgumentError(
                f"bad environment variable name {key!r}",
                hint="Names are letters, digits and _, not starting with a digit.",
            )
        if "\x00" in value or len(value) > 32768:
            raise InvalidArgumentError(
                f"bad value for environment variable {key}", hint="No NUL, at most 32 KiB."
            )
    return dict(env)


def _workdir(workdir: str) -> str:
    if not workdir.startswith("/") or "\x00" in workdir or "\n" in workdir:
        raise InvalidArgumentError(
            f"workdir must be an absolute path inside the container, got {workdir!r}",
            hint=f"The project is mounted at {WORKSPACE}; use it or a directory under it.",
        )
    return os.path.normpath(workdir)


def _name(name: str | None, project: Path) -> str:
    if name is None:
        base = re.sub(r"[^A-Za-z0-9_.-]", "-", project.name or "project").strip("-.") or "project"
        return base[:48]
    if not _NAME.match(name):
        raise InvalidArgumentError(
            f"bad session name {name!r}",
            hint="Use letters, digits, '.', '_' and '-' (at most 64; first a letter or digit).",
        )
    return name

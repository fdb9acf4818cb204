"""Project path validation: which host directory a session may mount.

A security boundary. ``resolve_project_path`` turns the ``project_path`` a client sent into the
real (symlink-free) directory that gets bind-mounted, or refuses it:

* ``InvalidArgumentError`` (INVALID_ARGUMENT): not a string, empty, contains NUL, too long,
  relative, does not exist, cannot be resolved, not a directory;
* ``PathNotAllowedError`` (PATH_NOT_ALLOWED), judged on the resolved path: ``/``, a system
  directory, inside one or containing one; a container engine socket, or a directory that holds
  one; not under any allowed root (the roots are resolved too).

Symlinks are resolved before any check, so a link inside an allowed root that points outside it
is refused. The tables come first; the logic after them only looks things up.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Final

from sandbox.errors import InvalidArgumentError, PathNotAllowedError

__all__ = ["is_within", "project_owner", "resolve_project_path", "write_access"]

# --------------------------------------------------------------------------- tables

# Longest path accepted, in bytes (Linux PATH_MAX).
MAX_PATH_BYTES: Final = 4096

# Directories that are never mounted, nor anything inside them, nor anything containing them.
# macOS: /var, /etc and /tmp are links into /private; the temp dir (/private/var/folders/...)
# is deliberately not listed.
SYSTEM_DIRS: Final[tuple[str, ...]] = (
    "/bin",
    "/boot",
    "/dev",
    "/etc",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/proc",
    "/run",
    "/sbin",
    "/sys",
    "/usr",
    "/var/run",
    "/var/lib",
    "/var/lib/docker",
    "/var/lib/containerd",
    "/System",
    "/Library",
    "/private/etc",
    "/private/var/run",
    "/private/var/db",
)

# File names of container engine sockets: never mounted, nor a directory holding one directly.
ENGINE_SOCKET_NAMES: Final[frozenset[str]] = frozenset(
    {"docker.sock", "podman.sock", "containerd.sock", "dockershim.sock", "cri-dockerd.sock"}
)

# Well-known engine socket locations; a project directory containing one (at any depth) is
# refused. Relative entries are under the user's home.
ENGINE_SOCKET_PATHS: Final[tuple[str, ...]] = (
    "/var/run/docker.sock",
    "/run/docker.sock",
    "/run/podman/podman.sock",
    "/run/containerd/containerd.sock",
    ".docker/run/docker.sock",
    ".docker/desktop/docker.sock",
    ".colima/default/docker.sock",
    ".colima/docker.sock",
    ".orbstack/run/docker.sock",
    ".rd/docker.sock",
    ".lima/default/sock/docker.sock",
)

ROOTS_ENV_VAR: Final = "SANDBOX_ALLOWED_ROOTS"

# --------------------------------------------------------------------------- logic


def resolve_project_path(path: str, allowed_roots: Sequence[Path]) -> Path:
    """The real directory ``path`` names, once it is known safe to mount.

    ``path`` must be an absolute path to an existing directory; after resolving symlinks it must
    lie under (or be) one of ``allowed_roots`` and be neither ``/``, a system directory nor an
    engine socket's home. Raises ``InvalidArgumentError`` or ``PathNotAllowedError``.
    """
    _check_syntax(path)
    resolved = _resolve_existing(path)
    shown = repr(path) if str(resolved) == path else f"{path!r} (resolves to {str(resolved)!r})"
    roots = _resolve_roots(allowed_roots)

    system_dir = _system_dir_conflict(resolved)
    if system_dir is not None:
        what = "the filesystem root" if resolved == Path("/") else f"system directory {system_dir}"
        raise PathNotAllowedError(
            f"Project path {shown} is, contains or lies inside {what}; "
            "system directories are never mounted.",
            hint=_roots_hint(roots, "Pass your project's own directory"),
            path=path,
            resolved=str(resolved),
        )

    socket = _engine_socket_conflict(resolved)
    if socket is not None:
        raise PathNotAllowedError(
            f"Project path {shown} is or contains the container engine socket {socket}; "
            "mounting it would hand the sandbox control of the host.",
            hint=_roots_hint(roots, "Pass a project directory that holds no engine socket"),
            path=path,
            resolved=str(resolved),
        )

    if not any(is_within(resolved, root) for root in roots):
        allowed = _format_roots(roots)
        raise PathNotAllowedError(
            f"Project path {shown} is not under an allowed root (allowed: {allowed}).",
            hint=(
                "Pass a directory under one of the allowed roots, or have the server's operator "
                f"add its parent to {ROOTS_ENV_VAR} (os.pathsep-separated absolute paths)."
            ),
            path=path,
            resolved=str(resolved),
            allowed_roots=[str(r) for r in roots],
        )

    if not resolved.is_dir():
        raise InvalidArgumentError(
            f"Project path {shown} is not a directory.",
            hint="Pass the directory that holds the project, not a file in it.",
            path=path,
            resolved=str(resolved),
        )
    return resolved


def project_owner(path: Path) -> tuple[int, int]:
    """The (uid, gid) owning ``path`` (symlinks followed)."""
    st = path.stat()
    return st.st_uid, st.st_gid


def write_access(path: Path, uid: int, gid: int, *, read_only: bool = False) -> str | None:
    """Why a shell running as ``uid:gid`` (no capabilities, no other groups) cannot create files
    in the project ``path``, or ``None`` when it can: the mount, the file system, the mode bits.

    Judged on the host, so a session says it up front instead of "Permission denied" three
    commands later; ACLs and network file systems that squash root are not modelled."""
    if read_only:
        return "the session mounts it read-only (read_only_project)"
    try:
        st = path.stat()
        flags = os.statvfs(path).f_flag
    except OSError as exc:
        return f"it cannot be inspected ({exc.strerror})"
    if flags & os.ST_RDONLY:
        return "it lies on a read-only file system"
    if st.st_uid == uid:
        needed = stat.S_IWUSR | stat.S_IXUSR
    elif st.st_gid == gid:
        needed = stat.S_IWGRP | stat.S_IXGRP
    else:
        needed = stat.S_IWOTH | stat.S_IXOTH
    if st.st_mode & needed != needed:
        return (
            f"it belongs to {st.st_uid}:{st.st_gid} with mode {stat.S_IMODE(st.st_mode):04o}, "
            f"and the shell runs as {uid}:{gid}"
        )
    return None


def is_within(child: Path, parent: Path) -> bool:
    """Whether ``child`` is ``parent`` or lies below it.

    Purely lexical (after normalising ``..``): pass resolved paths when symlinks matter.
    """
    child_n = Path(os.path.normpath(child))
    parent_n = Path(os.path.normpath(parent))
    return child_n == parent_n or child_n.is_relative_to(parent_n)


def _check_syntax(path: object) -> None:
    if not isinstance(path, str):
        raise InvalidArgumentError(
            f"Project path must be a string, got {type(path).__name__}.",
            hint="Pass project_path as an absolute directory path string.",
        )
    if not path.strip():
        raise InvalidArgumentError(
            "Project path is empty.",
            hint="Pass project_path as the absolute path of the project directory.",
        )
    if "\x00" in path:
        raise InvalidArgumentError(
            f"Project path {path!r} contains a NUL character.",
            hint="Pass a plain absolute directory path.",
        )
    if len(os.fsencode(path)) > MAX_PATH_BYTES:
        raise InvalidArgumentError(
            f"Project path is too long ({len(os.fsencode(path))} bytes, at most {MAX_PATH_BYTES}).",
            hint="Pass a shorter absolute directory path.",
        )
    if not Path(path).is_absolute():
        raise InvalidArgumentError(
            f"Project path {path!r} is not absolute.",
            hint=(
                "Pass an absolute path (starting with /); relative paths and ~ are not "
                "expanded because the server's working directory is not yours."
            ),
        )


def _resolve_existing(path: str) -> Path:
    try:
        return Path(os.path.realpath(path, strict=True))
    except OSError as exc:
        reason = {
            errno.ENOENT: "does not exist",
            errno.ENOTDIR: "does not exist (a component of it is not a directory)",
            errno.ELOOP: "contains a symlink loop",
            errno.ENAMETOOLONG: "is too long",
            errno.EACCES: "cannot be accessed by the server (permission denied)",
        }.get(exc.errno or 0, f"cannot be resolved ({exc.strerror or exc})")
        raise InvalidArgumentError(
            f"Project path {path!r} {reason}.",
            hint="Pass the absolute path of an existing project directory on the server's host.",
            path=path,
        ) from exc


def _resolve_roots(allowed_roots: Iterable[Path]) -> list[Path]:
    """Allowed roots, user-expanded and resolved; relative roots are ignored (they would
    depend on the server's working directory)."""
    roots: list[Path] = []
    for root in allowed_roots:
        expanded = Path(root).expanduser()
        if not expanded.is_absolute():
            continue
        resolved = Path(os.path.realpath(expanded))
        if resolved not in roots:
            roots.append(resolved)
    return roots


def _system_dir_conflict(resolved: Path) -> str | None:
    """The system directory ``resolved`` is, lies in or contains; "/" for the root itself."""
    if resolved == Path("/"):
        return "/"
    for entry in SYSTEM_DIRS:
        for form in {Path(entry), Path(os.path.realpath(entry))}:
            if is_within(resolved, form) or is_within(form, resolved):
                return entry
    return None


def _engine_socket_conflict(resolved: Path) -> str | None:
    """The engine socket ``resolved`` is or contains, if any."""
    try:
        mode = resolved.stat().st_mode
    except OSError:
        mode = 0
    if resolved.name in ENGINE_SOCKET_NAMES or stat.S_ISSOCK(mode):
        return str(resolved)
    if stat.S_ISDIR(mode):
        for name in sorted(ENGINE_SOCKET_NAMES):
            candidate = resolved / name
            if os.path.lexists(candidate):
                return str(candidate)
    for socket in _known_socket_paths():
        if not os.path.lexists(socket):
            continue
        for form in {socket, Path(os.path.realpath(socket))}:
            if is_within(form, resolved):
                return str(socket)
    return None


def _known_socket_paths() -> list[Path]:
    paths = [Path(p) for p in ENGINE_SOCKET_PATHS if p.startswith("/")]
    try:
        home = Path("~").expanduser()
    except RuntimeError:  # no HOME and no passwd entry
        pass
    else:
        paths += [home / p for p in ENGINE_SOCKET_PATHS if not p.startswith("/")]
    runtime_dir = Path(os.environ.get("XDG_RUNTIME_DIR") or "relative")
    if runtime_dir.is_absolute():
        paths += [runtime_dir / "docker.sock", runtime_dir / "podman/podman.sock"]
    docker_host = os.environ.get("DOCKER_HOST", "")
    if docker_host.startswith("unix://") and Path(docker_host[len("unix://") :]).is_absolute():
        paths.append(Path(docker_host[len("unix://") :]))
    return paths


def _format_roots(roots: Sequence[Path]) -> str:
    return ", ".join(str(r) for r in roots) if roots else "none configured"


def _roots_hint(roots: Sequence[Path], action: str) -> str:
    return (
        f"{action} under one of the allowed roots ({_format_roots(roots)}); "
        f"the operator sets them with {ROOTS_ENV_VAR}."
    )

"""What Podman's Docker-compatible service (4.3) needs differently from Docker Engine.

``DockerBackend`` talks to both through docker-py; the differences, measured on Podman 4.3.1
(Debian bookworm) against Docker 20.10, are handled here:

- A tmpfs's ``uid=``/``gid=`` options are refused (``unknown mount option``): such a tmpfs
  (the session's home) is open to every user instead, mode 1777 (``host_tmpfs``).
- Given any ulimit, Podman sets the open-files and processes limits to its own maxima (1048576),
  above many hosts' hard limits (``error setting rlimit type 7``): it gets none, and the
  session's prelude caps the file size (``sandbox.session.profile.SHELL_ARGV``).
- Its default seccomp profile lets an unprivileged process create a user namespace (Docker's
  refuses ``unshare``/``clone`` with ``CLONE_NEWUSER`` without ``CAP_SYS_ADMIN``), and its
  compatible API takes a profile as a *path* on the engine's host, not inline as Docker does:
  ``seccomp_profile`` derives the engine's own default profile with user namespaces refused
  and writes it where a local engine reads it.
- ``/info`` lists every runtime containers.conf knows a path for, installed or not; its
  own ``libpod/info`` names the one in use (``DockerBackend.describe``).
"""

from __future__ import annotations

import copy
import hashlib
import json
import logging
import os
import tempfile
from pathlib import Path
from typing import Any

import platformdirs

log = logging.getLogger(__name__)

# Where a Podman host keeps its default seccomp profile (containers-common), /etc first.
DEFAULT_PROFILES = (
    Path("/etc/containers/seccomp.json"),
    Path("/usr/share/containers/seccomp.json"),
)
CLONE_NEWUSER = 0x10000000
_EPERM = 1
_ENOSYS = 38
_S390 = ["s390", "s390x"]  # clone's flags are its second argument there
_GATED = ("clone", "clone3", "unshare")


def is_podman(version: dict[str, Any]) -> bool:
    """Whether a ``/version`` answer comes from Podman's Docker-compatible service."""
    components = " ".join(str(c.get("Name", "")) for c in version.get("Components") or [])
    platform = str((version.get("Platform") or {}).get("Name", ""))
    return "podman" in f"{components} {platform}".lower()


def host_tmpfs(tmpfs: dict[str, str]) -> dict[str, str]:
    """A profile's tmpfs options as Podman takes them: a mount that was to be owned by a
    user (``uid=``, refused here) is open to all, sticky, so the shell can write it."""
    out = {}
    for path, options in tmpfs.items():
        kept = [o for o in options.split(",") if o]
        if any(o.startswith(("uid=", "gid=")) for o in kept):
            kept = [o for o in kept if not o.startswith(("uid=", "gid=", "mode="))]
            kept.append("mode=1777")
        out[path] = ",".join(kept)
    return out


def _flags_rule(name: str, index: int, action: str, value: int, **extra: Any) -> dict[str, Any]:
    rule: dict[str, Any] = {
        "names": [name],
        "action": action,
        "args": [
            {"index": index, "value": CLONE_NEWUSER, "valueTwo": value, "op": "SCMP_CMP_MASKED_EQ"}
        ],
        "comment": "sandbox: no user namespace without CAP_SYS_ADMIN, as Docker's default",
        "includes": {},
        "excludes": {},
        **extra,
    }
    if action == "SCMP_ACT_ERRNO":
        rule["errnoRet"] = _EPERM
    return rule


def without_user_namespaces(profile: dict[str, Any]) -> dict[str, Any]:
    """``profile`` (a containers-common seccomp profile) with user namespaces refused: clone
    and unshare with ``CLONE_NEWUSER`` fail with EPERM, and clone3 (whose flags a filter
    cannot read) with ENOSYS, so the C library falls back to clone. Everything else stays."""
    out = copy.deepcopy(profile)
    for rule in out.get("syscalls") or []:
        unconditional = not rule.get("args") and not rule.get("includes")
        if rule.get("action") == "SCMP_ACT_ALLOW" and unconditional:
            rule["names"] = [n for n in rule.get("names") or [] if n not in _GATED]
    rules: list[dict[str, Any]] = []
    for name in ("clone", "unshare"):
        for index, arches in (
            (0, {"excludes": {"arches": _S390}}),
            (1, {"includes": {"arches": _S390}}),
        ):
            if name == "unshare" and index == 1:
                continue
            where = arches if name == "clone" else {}
            rules.append(_flags_rule(name, index, "SCMP_ACT_ALLOW", 0, **where))
            rules.append(_flags_rule(name, index, "SCMP_ACT_ERRNO", CLONE_NEWUSER, **where))
    rules.append(
        {
            "names": ["clone3"],
            "action": "SCMP_ACT_ERRNO",
            "errnoRet": _ENOSYS,
            "args": [],
            "comment": "sandbox: flags out of a filter's reach; ENOSYS makes libc use clone",
            "includes": {},
            "excludes": {},
        }
    )
    out["syscalls"] = [r for r in out.get("syscalls") or [] if r.get("names")] + rules
    return out


def seccomp_profile(local_engine: bool) -> Path | None:
    """The path of the engine's default seccomp profile with user namespaces refused, written
    under the user's cache directory; None when the engine is not on this host (its profile
    and our file would not be where it looks) or this host has no Podman profile."""
    if not local_engine:
        return None
    source = next((p for p in DEFAULT_PROFILES if p.is_file()), None)
    if source is None:
        return None
    try:
        profile = without_user_namespaces(json.loads(source.read_text()))
    except (OSError, ValueError, TypeError, AttributeError) as exc:
        log.warning("cannot read Podman's seccomp profile %s: %s", source, exc)
        return None
    text = json.dumps(profile, indent=1, sort_keys=True)
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    directory = Path(platformdirs.user_cache_dir("sandbox", appauthor=False)) / "seccomp"
    path = directory / f"podman-{digest}.json"
    if path.is_file():
        return path
    try:
        directory.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=".podman-", suffix=".json")
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
        Path(tmp).chmod(0o644)
        Path(tmp).replace(path)  # atomic: servers racing write the same bytes
    except OSError as exc:
        log.warning("cannot write the sessions' seccomp profile under %s: %s", directory, exc)
        return None
    return path

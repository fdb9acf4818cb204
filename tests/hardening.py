"""The container profile every session gets, as the engine reports it: Docker spells it one way,
Podman's compatible service another (it lists the capabilities it dropped, writes a bare
``no-new-privileges``, takes the user-namespace seccomp profile as a path, and caps the file
size in the shell's prelude instead of a ulimit)."""

from __future__ import annotations

from typing import Any

# Docker's and Podman's default capability set: what "drop ALL" has to remove.
DEFAULT_CAPS = {
    "AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD",
    "NET_BIND_SERVICE", "NET_RAW", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT",
}  # fmt: skip


def assert_hardened(host: dict[str, Any], *, podman: bool) -> None:
    """``host`` (an inspect's HostConfig) drops every capability and sets no-new-privileges."""
    assert not host["CapAdd"]
    options = host["SecurityOpt"] or []
    if podman:
        dropped = {c.removeprefix("CAP_") for c in host["CapDrop"]}
        assert dropped >= DEFAULT_CAPS - {"AUDIT_WRITE", "MKNOD", "NET_RAW"}, dropped
        assert any(o.startswith("no-new-privileges") for o in options), options
        assert any(o.startswith("seccomp=") for o in options), options  # user namespaces
    else:
        assert host["CapDrop"] == ["ALL"]
        assert "no-new-privileges:true" in options

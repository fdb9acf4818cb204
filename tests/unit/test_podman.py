"""Podman's dialect: the seccomp profile that refuses user namespaces as Docker's does."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from sandbox.backends.podman import (
    CLONE_NEWUSER,
    host_tmpfs,
    seccomp_profile,
    without_user_namespaces,
)

# A containers-common profile reduced to what matters here (the real one: 35 rules).
PODMAN_DEFAULT: dict[str, Any] = {
    "defaultAction": "SCMP_ACT_ERRNO",
    "defaultErrnoRet": 38,
    "syscalls": [
        {"names": ["read", "clone", "clone3", "unshare", "mount"], "action": "SCMP_ACT_ALLOW"},
        {
            "names": ["bpf", "setns"],
            "action": "SCMP_ACT_ALLOW",
            "includes": {"caps": ["CAP_SYS_ADMIN"]},
        },
    ],
}


def test_the_derived_profile_refuses_user_namespaces_and_keeps_the_rest() -> None:
    derived = without_user_namespaces(PODMAN_DEFAULT)
    rules = derived["syscalls"]
    assert rules[0]["names"] == ["read", "mount"]  # no unconditional clone/unshare any more
    assert rules[1] == PODMAN_DEFAULT["syscalls"][1]
    by_action: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for rule in rules[2:]:
        by_action.setdefault((rule["names"][0], rule["action"]), []).append(rule)
    for name in ("clone", "unshare"):
        allowed = by_action[(name, "SCMP_ACT_ALLOW")]
        refused = by_action[(name, "SCMP_ACT_ERRNO")]
        assert all(r["args"][0]["valueTwo"] == 0 for r in allowed)
        assert all(r["args"][0]["valueTwo"] == CLONE_NEWUSER for r in refused)
        assert all(r["errnoRet"] == 1 for r in refused)  # EPERM, as Docker's profile gives
    assert by_action[("clone3", "SCMP_ACT_ERRNO")][0]["errnoRet"] == 38  # ENOSYS: libc falls back
    assert PODMAN_DEFAULT["syscalls"][0]["names"][1] == "clone"  # the input is untouched


@pytest.fixture
def cache_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    source = tmp_path / "seccomp.json"
    source.write_text(json.dumps(PODMAN_DEFAULT))
    monkeypatch.setattr("sandbox.backends.podman.DEFAULT_PROFILES", (source,))
    return tmp_path / "cache"


def test_the_profile_is_written_once_for_a_local_engine_only(cache_home: Path) -> None:
    assert seccomp_profile(local_engine=False) is None
    path = seccomp_profile(local_engine=True)
    assert path is not None
    assert path.is_relative_to(cache_home)
    assert json.loads(path.read_text()) == without_user_namespaces(PODMAN_DEFAULT)
    assert path.stat().st_mode & 0o044 == 0o044  # a rootful engine reads it
    assert seccomp_profile(local_engine=True) == path


def test_no_profile_without_podmans_own(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sandbox.backends.podman.DEFAULT_PROFILES", (Path("/nonexistent/x"),))
    assert seccomp_profile(local_engine=True) is None


def test_a_tmpfs_owned_by_a_user_is_open_to_all_on_podman_and_others_are_kept() -> None:
    tmpfs = {
        "/home/sandbox": "rw,nosuid,size=12m,uid=1000,gid=1000,mode=0755",
        "/tmp": "rw,nosuid,size=24m,mode=1777",
    }
    assert host_tmpfs(tmpfs) == {
        "/home/sandbox": "rw,nosuid,size=12m,mode=1777",
        "/tmp": "rw,nosuid,size=24m,mode=1777",
    }

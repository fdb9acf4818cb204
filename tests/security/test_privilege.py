"""Privilege, the engine socket, the network and persistence: each case is a command an agent
could run, and the outcome that proves the sandbox held. Every one fails if its protection goes
(a capability kept, a socket mounted, a network attached, a writable root).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import docker
import pytest

from sandbox.backends.docker import DockerBackend
from sandbox.models import ExecResult
from sandbox.session.manager import SessionManager
from sandbox.session.profile import host_pids_limit, is_gvisor
from sandbox.session.session import Session
from tests.hardening import assert_hardened
from tests.security.conftest import open_session

pytestmark = pytest.mark.docker


@dataclass(frozen=True)
class Case:
    command: str
    holds: Callable[[ExecResult], bool]
    why: str
    # Under gVisor the sentry is the kernel the command sees: where it answers differently (and
    # the guarantee still holds, for the reason given), what it answers instead.
    gvisor: Callable[[ExecResult], bool] | None = None
    gvisor_why: str = ""


def says(*needles: str) -> Callable[[ExecResult], bool]:
    return lambda r: all(n in r.output for n in needles)


def says_none_of(*needles: str) -> Callable[[ExecResult], bool]:
    return lambda r: not any(n in r.output for n in needles)


def matches(pattern: str) -> Callable[[ExecResult], bool]:
    return lambda r: re.search(pattern, r.output, re.MULTILINE) is not None


CASES: dict[str, Case] = {
    # -- privilege ----------------------------------------------------------------------------
    "not-root": Case("id -u; id -g", matches(r"\A(?!0\n)\d+\n(?!0\n)\d+\n\Z"), "uid/gid not 0"),
    "no-capabilities": Case(
        "grep -E '^Cap(Inh|Prm|Eff|Bnd|Amb)' /proc/self/status",
        lambda r: r.output.count("0000000000000000") == 5,
        "every capability set is empty, the bounding set too",
        gvisor=lambda r: r.output.count("0000000000000000") == 4 and "CapAmb" not in r.output,
        gvisor_why="gVisor's status has no ambient set; the other four are empty",
    ),
    "no-new-privileges": Case(
        "grep NoNewPrivs /proc/self/status; echo rc=$?",
        says("NoNewPrivs:\t1"),
        "setuid cannot raise",
        gvisor=says("rc=1"),
        gvisor_why="gVisor's status has no NoNewPrivs line (the engine sets it on the sandbox: "
        "test_container_profile_is_the_hardened_one; setuid-su-fails checks its effect)",
    ),
    "setuid-su-fails": Case(
        "su -c id root </dev/null 2>&1; echo rc=$?",
        lambda r: "uid=0" not in r.output and "rc=0" not in r.output,
        "a setuid binary does not make root",
    ),
    "setuid-mount-fails": Case(
        "mkdir -p /tmp/m; mount -t tmpfs none /tmp/m 2>&1; echo rc=$?",
        lambda r: "rc=0" not in r.output,
        "mount (setuid root in the image) is refused",
    ),
    "umount-workspace-fails": Case(
        "umount /workspace 2>&1; echo rc=$?", lambda r: "rc=0" not in r.output, "no umount"
    ),
    "user-namespace-refused": Case(
        "unshare -U -r id 2>&1; echo rc=$?",
        lambda r: "uid=0" not in r.output and "rc=0" not in r.output,
        "no user namespace to become root in",
        gvisor=says("uid=0", "rc=0"),
        gvisor_why="gVisor implements user namespaces inside its own kernel: root in one holds "
        "capabilities over the sandbox's objects only, never over the host's",
    ),
    "mount-namespace-refused": Case(
        "unshare -m true 2>&1; echo rc=$?; unshare -n true 2>&1; echo rc=$?",
        lambda r: "rc=0" not in r.output,
        "no new mount or network namespace",
    ),
    "proc-sys-read-only": Case(
        "echo 1 > /proc/sys/kernel/sysrq 2>&1; echo rc=$?;"
        " echo x > /proc/sys/kernel/hostname 2>&1; echo rc=$?",
        lambda r: "rc=0" not in r.output,
        "kernel knobs cannot be written",
    ),
    "proc-sysrq-and-kcore-masked": Case(
        "for f in /proc/sysrq-trigger /proc/kcore /proc/keys /proc/timer_list; do "
        "if [ -s $f ] && head -c1 $f >/dev/null 2>&1; then echo open:$f; fi; done; echo done",
        says_none_of("open:"),
        "masked /proc entries stay masked",
    ),
    "dmesg-refused": Case(
        "dmesg 2>&1 | head -3; echo rc=${PIPESTATUS[0]}",
        lambda r: "rc=0" not in r.output,
        "the kernel log does not leak",
        gvisor=says("Starting gVisor..."),
        gvisor_why="gVisor's dmesg is its own made-up boot log, never the host kernel's",
    ),
    "keepalive-environment-unreadable": Case(
        "cat /proc/1/environ 2>&1; echo; ls /proc/1/root/ 2>&1 | head -1; echo done",
        lambda r: "Permission denied" in r.output and "HOSTNAME=" not in r.output,
        "PID 1 (uid 65534) is not the shell's to read",
        gvisor=lambda r: "Permission denied" in r.output and "SANDBOX_" not in r.output,
        gvisor_why="gVisor lets any process of the sandbox read PID 1's environment; it holds "
        "only the image's variables (nothing of the server's), and its root stays closed",
    ),
    "cannot-signal-pid-1": Case(
        "kill -9 1 2>&1; echo rc=$?", says("rc=1"), "the keepalive cannot be killed"
    ),
    "no-sudo": Case(
        "command -v sudo doas pkexec || echo none", says("none"), "no privilege helpers"
    ),
    "devices-minimal": Case(
        "ls /dev | tr '\\n' ' '",
        says_none_of("sda", "nvme", "mem ", "kmsg", "port "),
        "no block devices, no /dev/mem",
    ),
    # -- the engine socket ---------------------------------------------------------------------
    "no-engine-socket-file": Case(
        "ls -la /var/run/docker.sock /run/docker.sock /run/containerd/containerd.sock 2>&1;"
        " find / -xdev \\( -name '*.sock' -o -type s \\) 2>/dev/null | grep -v ^/proc; echo end",
        lambda r: "srw" not in r.output and ".sock\n" not in r.output.replace("cannot", ""),
        "no engine socket anywhere in the container",
    ),
    "no-engine-over-tcp": Case(
        "for h in 172.17.0.1 127.0.0.1 host.docker.internal; do for p in 2375 2376; do "
        "(exec 3<>/dev/tcp/$h/$p) 2>/dev/null && echo open:$h:$p; done; done; echo done",
        says_none_of("open:"),
        "no engine API on the bridge gateway or localhost",
    ),
    # -- the network ---------------------------------------------------------------------------
    "only-loopback-interface": Case(
        "ls /sys/class/net | tr '\\n' ' '", lambda r: r.output.split() == ["lo"], "no NIC"
    ),
    "no-egress": Case(
        "timeout 5 curl -sS -m 3 http://1.1.1.1/ 2>&1; echo rc=$?;"
        " (exec 3<>/dev/tcp/8.8.8.8/53) 2>&1; echo tcp=$?",
        lambda r: "rc=0" not in r.output and "tcp=0" not in r.output,
        "nothing leaves the container",
    ),
    "no-dns": Case(
        "getent hosts example.com || echo unresolved", says("unresolved"), "no name resolution"
    ),
    # -- the root filesystem -------------------------------------------------------------------
    "root-read-only": Case(
        "for d in / /usr /etc /var /opt /root; do touch $d/.sb-x 2>/dev/null && echo wrote:$d;"
        " done; echo done",
        says_none_of("wrote:"),
        "nothing outside the tmpfs mounts and the project is writable",
    ),
    "tmpfs-sized-nosuid": Case(
        "grep -E ' (/tmp|/var/tmp|/run|/home/sandbox) ' /proc/mounts",
        lambda r: (
            len(r.output.splitlines()) == 4
            and all("nosuid" in ln and "size=" in ln for ln in r.output.splitlines())
        ),
        "every writable tmpfs is sized and nosuid",
        gvisor=lambda r: (
            len(r.output.splitlines()) == 4
            and all("size=" in ln and "noexec" in ln for ln in r.output.splitlines())
        ),
        gvisor_why="gVisor's mounts list no nosuid (setuid cannot raise there either: "
        "setuid-su-fails); each is sized and noexec",
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_agent_command_is_contained(shared: Session, name: str) -> None:
    case = CASES[name]
    result = shared.execute(case.command, timeout_s=20)
    assert not result.timed_out, result
    holds, why = case.holds, case.why
    if is_gvisor(shared.spec.runtime) and case.gvisor is not None:
        holds, why = case.gvisor, f"{case.why} (gVisor: {case.gvisor_why})"
    assert holds(result), f"{name}: {why}\n--- output ---\n{result.output}"


def test_container_profile_is_the_hardened_one(
    shared: Session, engine: docker.DockerClient, sec_manager: SessionManager
) -> None:
    host = engine.api.inspect_container(shared.container_id)["HostConfig"]
    podman = DockerBackend(engine).is_podman
    assert_hardened(host, podman=podman)
    assert host["Privileged"] is False
    assert host["ReadonlyRootfs"] is True
    assert host["NetworkMode"] == "none"
    assert host["PidsLimit"] == host_pids_limit(sec_manager.config.pids, shared.spec.runtime)
    assert host["Memory"] == host["MemorySwap"] == sec_manager.config.memory_mb * 1024 * 1024
    assert host["Init"] is True
    # Podman: no ulimit (it would raise the others past the host's), the prelude caps it
    ulimits = [u["Name"].lower().removeprefix("rlimit_") for u in host["Ulimits"] or []]
    assert ulimits == ["fsize"] if not podman else "fsize" not in ulimits
    assert not any("docker.sock" in b for b in host.get("Binds") or [])
    assert host["PidMode"] in ("", "private")
    # Podman 4.3 reports a container's own IPC namespace as "shareable" even when asked for
    # "private": only someone with the engine could make another container join it.
    assert host["IpcMode"] in ("private", "none", "", *(("shareable",) if podman else ()))


def test_a_new_session_does_not_see_an_old_ones_files_outside_the_workspace(
    sec_manager: SessionManager, sec_project: Path
) -> None:
    with open_session(sec_manager, sec_project) as first:
        planted = first.execute(
            "echo a > /tmp/planted; echo b > ~/planted; echo c > /var/tmp/planted;"
            " echo d > /workspace/planted; touch /usr/planted 2>/dev/null; echo done",
            timeout_s=10,
        )
        assert planted.exit_code == 0
    with open_session(sec_manager, sec_project) as second:
        seen = second.execute(
            "ls /tmp/planted ~/planted /var/tmp/planted /usr/planted /workspace/planted 2>&1",
            timeout_s=10,
        )
    assert "/workspace/planted" in seen.output
    assert seen.output.count("No such file") == 4, seen.output
    assert (sec_project / "planted").read_text() == "d\n"  # the project is the only way out


def test_the_image_is_unchanged_by_a_session(
    sec_manager: SessionManager, sec_project: Path, engine: docker.DockerClient
) -> None:
    with open_session(sec_manager, sec_project) as session:
        session.execute("touch /etc/x /bin/x /x 2>/dev/null; echo hi > /tmp/y", timeout_s=10)
        changes = engine.api.diff(session.container_id) or []
    paths = {c["Path"] for c in changes}
    assert not paths & {"/etc/x", "/bin/x", "/x"}, changes

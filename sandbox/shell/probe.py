"""One control command that tells what a session is doing: foreground job, cwd, cgroup usage.

It runs as the shell's own user (with all capabilities dropped, root could not read the shell's
``/proc`` entries) and reads the container's cgroup, v1 or v2. One exec answers everything, so
``session_info`` costs one engine round trip.
"""

from __future__ import annotations

from dataclasses import dataclass

# Sets $t to the terminal's foreground process group of the shell $p (the shell's own, or 0,
# when nothing runs in front of it). gVisor's /proc (Debian's 2022 runsc) has no controlling
# terminal and a tpgid of 0 for every process: there, the newest process group the shell started
# that is not stopped stands in for it (a job the shell put in front is its newest group).
FOREGROUND_GROUP_SH = r"""
t=$(ps -o tpgid= -p $p 2>/dev/null | tr -d ' ')
if [ "${t:-0}" = 0 ] && [ "$(ps -o tty= -p $p 2>/dev/null | tr -d ' ')" = "?" ]; then
  t=$(ps -e -o pgid=,ppid=,stat= 2>/dev/null \
      | awk -v p="$p" '$2 == p && $1 != p && $3 !~ /^T/ {g = $1} END {print g + 0}')
fi
"""


def probe_script(shell_pid: int) -> str:
    return PROBE_SCRIPT.replace("@FOREGROUND_GROUP@", FOREGROUND_GROUP_SH.strip()).replace(
        "@PID@", str(int(shell_pid))
    )


PROBE_SCRIPT = r"""
p=@PID@
c=/sys/fs/cgroup
# first, with builtins only: at the pids limit every fork below fails, these lines do not
d=$c; [ -f $c/pids.current ] || d=$c/pids
n=; x=; read -r n < $d/pids.current; read -r x < $d/pids.max
echo "pids $n"
echo "pids_max $x"
@FOREGROUND_GROUP@
echo "tpgid ${t:-}"
if [ -n "$t" ] && [ "$t" -gt 0 ] 2>/dev/null && [ "$t" != "$p" ]; then
  echo "fg $(ps -o args= -p $t 2>/dev/null | head -c 300)"
fi
echo "cwd $(readlink /proc/$p/cwd 2>/dev/null)"
if [ -f $c/memory.current ]; then
  echo "mem $(cat $c/memory.current)"
  echo "cpu_us $(awk '/^usage_usec/ {print $2}' $c/cpu.stat)"
  echo "oom $(awk '/^oom_kill / {print $2}' $c/memory.events)"
elif [ -f $c/memory/memory.usage_in_bytes ]; then
  echo "mem $(cat $c/memory/memory.usage_in_bytes)"
  echo "cpu_us $(( $(cat $c/cpuacct/cpuacct.usage) / 1000 ))"
  echo "oom $(awk '/^oom_kill / {print $2}' $c/memory/memory.oom_control)"
fi
"""


@dataclass(frozen=True)
class ProbeResult:
    foreground_pgid: int | None  # None: the shell itself is in the foreground
    foreground: str | None
    cwd: str | None
    memory_mb: float | None
    cpu_s: float | None
    pids: int | None
    oom_kills: int | None
    pids_max: int | None = None  # None: no limit ("max") or unknown

    @property
    def pids_pressure(self) -> bool:
        """At 90% of the pids limit: the next fork may fail (the next execute clears it)."""
        return (
            self.pids is not None
            and bool(self.pids_max)
            and self.pids * 10 >= (self.pids_max or 0) * 9
        )


def parse_probe(text: str, shell_pid: int) -> ProbeResult:
    values: dict[str, str] = {}
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if key:
            values[key] = value.strip()

    def num(key: str) -> int | None:
        try:
            return int(values[key])
        except (KeyError, ValueError):
            return None

    tpgid = num("tpgid")
    fg_pgid = tpgid if tpgid is not None and tpgid > 0 and tpgid != shell_pid else None
    mem = num("mem")
    cpu = num("cpu_us")
    return ProbeResult(
        foreground_pgid=fg_pgid,
        foreground=values.get("fg") or None,
        cwd=values.get("cwd") or None,
        memory_mb=round(mem / 1024 / 1024, 1) if mem is not None else None,
        cpu_s=cpu / 1e6 if cpu is not None else None,
        pids=num("pids"),
        oom_kills=num("oom"),
        pids_max=num("pids_max"),
    )

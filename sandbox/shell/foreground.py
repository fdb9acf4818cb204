"""What holds the terminal when an ``execute`` wants it: a program an earlier command left in
the foreground, either waiting for input (a REPL, an editor, ``cat``, a prompt) or working.

One control command (run as the shell's user) names the foreground process group and, for each
of its processes, its state and the kernel function it sleeps in (``/proc/PID/wchan``). A group
whose processes all sleep, one of them in a terminal read or a poll, waits for input: the
session suspends it (``SIGTSTP``, then ``SIGSTOP``) so the new command runs, and says how to
bring it back. A working one is named in the ``SESSION_BUSY`` hint instead.
"""

from __future__ import annotations

from dataclasses import dataclass

from sandbox.shell.probe import FOREGROUND_GROUP_SH

FOREGROUND_SCRIPT = r"""
p=@PID@
@FOREGROUND_GROUP@
echo "tpgid ${t:-0}"
[ -n "$t" ] && [ "$t" -gt 0 ] 2>/dev/null || exit 0
echo "args $(ps -o args= -p $t 2>/dev/null | head -c 200)"
for q in $(pgrep -g "$t" 2>/dev/null); do
  s=$(cut -d' ' -f3 /proc/$q/stat 2>/dev/null) || continue
  echo "proc $q ${s:-?} $(cat /proc/$q/wchan 2>/dev/null)"
done
"""

# Where a process sleeps while it waits for terminal input: a read of the tty (n_tty_read sleeps
# in wait_woken on current kernels) or a poll/select on it (readline front ends, editors).
INPUT_WAITS = frozenset(
    {
        "wait_woken",
        "n_tty_read",
        "poll_schedule_timeout",
        "poll_schedule_timeout.constprop.0",
        "do_select",
        "core_sys_select",
        "do_sys_poll",
        "ep_poll",
    }
)


def foreground_script(shell_pid: int) -> str:
    return FOREGROUND_SCRIPT.replace("@FOREGROUND_GROUP@", FOREGROUND_GROUP_SH.strip()).replace(
        "@PID@", str(int(shell_pid))
    )


@dataclass(frozen=True)
class Foreground:
    pgid: int
    args: str
    waiting: bool  # every process sleeps, one where input is awaited
    is_shell: bool  # the shell itself holds the terminal (a builtin such as ``read``)


def parse_foreground(text: str, shell_pid: int) -> Foreground | None:
    """The foreground group from the script's output (None: nothing but the shell's prompt)."""
    pgid, args = 0, ""
    states: list[tuple[str, str]] = []
    for line in text.splitlines():
        key, _, rest = line.partition(" ")
        if key == "tpgid" and rest.strip().isdigit():
            pgid = int(rest.strip())
        elif key == "args":
            args = rest.strip()
        elif key == "proc":
            fields = rest.split()
            if len(fields) >= 2:
                states.append((fields[1], fields[2] if len(fields) > 2 else ""))
    if pgid <= 0 or not states:
        return None
    sleeping = all(state == "S" for state, _ in states)
    waiting = sleeping and any(wchan in INPUT_WAITS for _, wchan in states)
    return Foreground(pgid=pgid, args=args, waiting=waiting, is_shell=pgid == shell_pid)

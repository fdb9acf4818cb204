"""What ``execute`` tells the agent besides the output: the notices of an ``ExecResult``."""

from __future__ import annotations

RESPAWNED = (
    "The shell stopped answering (its output redirected, its functions replaced, or it was "
    "replaced itself) and a fresh shell took its place in the same container: the directory, "
    "variables and functions are back to their defaults; background processes and files are "
    "as they were."
)
RESET = (
    "The container was restarted to stop this command (nothing else could): "
    "processes are gone, files in the project and in /tmp stay."
)


def background_writes(count: int) -> str:
    return (
        f"Something in the background wrote {count} bytes to the terminal "
        "since the last command, and may still: its lines can be mixed into this "
        "output. `jobs` lists the shell's jobs; stop one with `kill %N`, or start it "
        "with its output redirected to a file."
    )


def shell_exited(exit_code: int | None) -> str:
    return (
        f"The shell exited (code {exit_code}); the next execute starts a fresh shell in "
        "this container, where background processes keep running."
    )


def container_stopped(oom: bool) -> str:
    return (
        "The session's container stopped"
        + (" because it ran out of memory" if oom else " (killed from outside?)")
        + ": this session has ended. Create a new one"
        + (" with more memory_mb." if oom else ".")
    )


def pressure_notice(report: str) -> str:
    """What the shell's pids-pressure report (``p:CUR:MAX:PGID/COUNT/NAME,...``) tells the
    agent: which process groups were killed so that its command could run."""
    _, current, limit, groups = [*report.split(":", 3), "", "", ""][:4]
    killed = []
    for group in filter(None, groups.split(",")):
        pgid, _, rest = group.partition("/")
        count, _, name = rest.partition("/")
        killed.append(f"group {pgid} ({count} processes{', ' + name if name else ''})")
    what = (
        "the biggest process groups were killed: " + "; ".join(killed)
        if killed
        else "nothing the shell may stop was found to kill"
    )
    return (
        f"The session was at {current} of its {limit} processes (its pids limit) when this "
        f"command started, so {what}, before the command ran. A background job that forks "
        "without end (a loop starting '&' jobs) does this; bound it or stop it with signal."
    )

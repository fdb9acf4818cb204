"""Durable sessions: the shell runs inside tmux in the container, so it outlives the server.

Layout inside the container (a named volume at ``/run/sandbox``, kept across server restarts)::

    /run/sandbox/tmux.sock   tmux's private socket
    /run/sandbox/raw.log     the pane's raw output, written by ``pipe-pane`` (bounded by ``dd``)

``pipe-pane`` copies what the program in the pane wrote *before* tmux interprets it, so the
marker protocol (private OSC 777) and the screen (pyte) work exactly as in a plain session.

The server talks to it through ``DurableChannel``:

- input goes to a control-mode tmux client as ``send-keys -H`` commands (every byte reaches the
  pane literally, so tmux's prefix, ctrl-b, stays free for a person who attaches);
- output comes from ``tail -c +N -F raw.log`` (an exec in raw TTY mode), started at the size of
  the server's own copy of the log, so offsets continue with no gap and no duplicate after a
  restart, including what the shell printed while no server was running;
- the shell is gone when the client is: the channel then reports end of stream.

tmux answers the pane's terminal queries (cursor position, device attributes) itself.
"""

from __future__ import annotations

import contextlib
import logging
import shlex
import threading

from sandbox.backends.base import Backend, ExecChannel
from sandbox.config import KEEPALIVE_UID
from sandbox.errors import SessionExitedError

log = logging.getLogger(__name__)

STATE_DIR = "/run/sandbox"
SOCKET = f"{STATE_DIR}/tmux.sock"
LOG_FILE = f"{STATE_DIR}/raw.log"
SESSION = "main"
_SEND_CHUNK = 1024  # bytes per send-keys command
_GO = "sandbox-go"

# Set right after the session exists (tmux 3.3 refuses window options on an empty server);
# the pane's TERM is forced through ``env`` since default-terminal would come too late.
_OPTIONS = [
    ("default-terminal", "xterm-256color"),
    ("status", "off"),
    ("escape-time", "0"),
    ("window-size", "manual"),
    ("history-limit", "5000"),
    ("remain-on-exit", "off"),
    ("exit-empty", "on"),
]


def tmux(*args: str) -> list[str]:
    return ["tmux", "-S", SOCKET, *args]


def start_argv(
    shell_argv: list[str], *, rows: int, cols: int, workdir: str, log_cap: int
) -> list[str]:
    """One tmux command list: the session, its options, the pipe to the log, then "go".

    The pane's command first waits on a tmux channel that is signalled only after
    ``pipe-pane`` is in place, so the log holds the shell's very first bytes."""
    gate = f'tmux -S {SOCKET} wait-for {_GO}; exec "$@"'
    argv = [
        "tmux", "-S", SOCKET, "-f", "/dev/null",
        "new-session", "-d", "-s", SESSION, "-x", str(cols), "-y", str(rows), "-c", workdir,
        "--", "sh", "-c", gate, "sh", "env", "TERM=xterm-256color", *shell_argv,
    ]  # fmt: skip
    for name, value in _OPTIONS:
        argv += [";", "set-option", "-g", name, value]
    # dd writes each read at once (head would buffer through stdio) and stops at the cap.
    pipe = (
        f"exec dd of={LOG_FILE} oflag=append conv=notrunc bs=65536 "
        f"count={int(log_cap)} iflag=count_bytes status=none"
    )
    argv += [";", "pipe-pane", "-o", "-t", SESSION, pipe, ";", "wait-for", "-S", _GO]
    return argv


def start(
    backend: Backend,
    container_id: str,
    argv: list[str],
    *,
    user: str,
    env: dict[str, str],
    rows: int,
    cols: int,
    workdir: str,
    log_cap: int,
) -> None:
    """Start the durable session's tmux running ``argv`` in the container."""
    # A new named volume is root's on Docker and the container user's (the keepalive's) on
    # Podman: its owner opens it to the shell's user (no capability needed for that).
    opened = backend.run(container_id, ["chmod", "0777", STATE_DIR], user="0:0")
    if opened.exit_code != 0:
        keepalive = f"{KEEPALIVE_UID}:{KEEPALIVE_UID}"
        backend.run(container_id, ["chmod", "0777", STATE_DIR], user=keepalive)
    started = backend.run(
        container_id,
        start_argv(argv, rows=rows, cols=cols, workdir=workdir, log_cap=log_cap),
        user=user,
        env=env,
    )
    if started.exit_code != 0:
        raise SessionExitedError(
            "tmux did not start in the durable session: "
            + started.output.decode("utf-8", "replace").strip()[-300:],
            hint="The session image has tmux; a custom image needs tmux >= 3 for durable=true.",
        )


def attach_command(container_id: str, user: str) -> str:
    """What a person runs to take over the session (ctrl-b d detaches)."""
    inner = shlex.join(tmux("attach-session", "-t", SESSION))
    return f"docker exec -it -u {user} -e TERM=xterm-256color {container_id[:12]} {inner}"


def pane_pid(backend: Backend, container_id: str, user: str) -> int | None:
    """The shell's pid (the pane's process), or None when tmux has no such session."""
    result = backend.run(
        container_id, tmux("display-message", "-p", "-t", SESSION, "#{pane_pid}"), user=user
    )
    try:
        return int(result.output.strip())
    except ValueError:
        return None


class DurableChannel:
    """``ExecChannel`` over tmux: input through a control-mode client, output from the log.

    Input is sent as ``send-keys -H`` (hex) commands to a ``tmux -C`` client, so every byte
    reaches the pane literally: no key binding, no prefix, no paste detection in between
    (a person attached with ctrl-b keeps it), and resizes go the same way."""

    def __init__(self, control: ExecChannel, follower: ExecChannel) -> None:
        self._control = control
        self._follower = follower
        self._gone = threading.Event()
        self._drain = threading.Thread(target=self._drain_control, daemon=True, name="tmux-drain")
        self._drain.start()

    def _drain_control(self) -> None:
        while self._control.read(65536):
            pass  # control-mode notifications: the log file is what we read
        self._gone.set()
        # Let the follower deliver what the shell wrote last, then end the stream.
        threading.Timer(0.5, self._follower.close).start()

    def read(self, size: int = 65536) -> bytes:
        return self._follower.read(size)

    def write(self, data: bytes) -> None:
        if self._gone.is_set():
            raise SessionExitedError("the session's tmux is gone")
        commands = []
        for i in range(0, len(data), _SEND_CHUNK):
            hexed = " ".join(f"{byte:02x}" for byte in data[i : i + _SEND_CHUNK])
            commands.append(f"send-keys -t {SESSION} -H {hexed}\n")
        self._control.write("".join(commands).encode("ascii"))

    def resize(self, rows: int, cols: int) -> None:
        # the window's size is manual: a person who attaches sees the agent's size
        self._control.write(f"resize-window -t {SESSION} -x {cols} -y {rows}\n".encode())

    def exit_code(self) -> int | None:
        return None  # the shell's own exit marker carries it

    def close(self) -> None:
        for channel in (self._control, self._follower):
            with contextlib.suppress(Exception):
                channel.close()


def open_channel(
    backend: Backend,
    container_id: str,
    *,
    user: str,
    env: dict[str, str],
    rows: int,
    cols: int,
    from_offset: int,
) -> DurableChannel:
    """Attach to the session's tmux and follow its log from ``from_offset``."""
    follow = (
        "stty raw -echo 2>/dev/null; "
        f"exec tail -c +{int(from_offset) + 1} -F --sleep-interval=0.05 {LOG_FILE} 2>/dev/null"
    )
    follower = backend.exec_attach(
        container_id, ["sh", "-c", follow], user=user, env={}, workdir="/", rows=rows, cols=cols
    )
    try:
        control = backend.exec_attach(
            container_id,
            tmux("-C", "attach-session", "-t", SESSION),
            user=user,
            env={**env, "TERM": "xterm-256color"},
            workdir="/",
            rows=rows,
            cols=cols,
            tty=False,
        )
    except Exception:
        follower.close()
        raise
    return DurableChannel(control, follower)

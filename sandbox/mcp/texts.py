"""What the model reads: the server's instructions and each tool's title and description.

Kept apart from the code so the wording can be reviewed (and tuned) as text. ``<DEFAULT_TIMEOUT>``
and ``<MAX_TIMEOUT>`` are replaced with the server's configured values.
"""

from __future__ import annotations

INSTRUCTIONS = """\
A sandboxed Linux terminal: each session is a throwaway Docker container with a persistent bash \
shell and a host project directory mounted at /workspace. Nothing you run can touch the host \
outside that directory; there is no network unless a session asks for it.

Typical use: execute {"project_path": "/abs/path/to/project", "command": "pytest -q"} (the \
project's session is created on first use; later calls can pass the returned session_id). Use \
execute for commands that finish; background=true plus read for long-running ones (servers, \
watchers, long builds); send plus read for interactive programs; signal to stop things; \
session_destroy when done. Failing commands are results (exit_code), not errors."""

TITLES: dict[str, str] = {
    "session_create": "Create sandbox session",
    "session_list": "List sandbox sessions",
    "session_info": "Sandbox session details",
    "session_destroy": "Destroy sandbox session",
    "execute": "Run a shell command",
    "send": "Type into the terminal",
    "read": "Read the terminal",
    "signal": "Signal the foreground job",
    "resize": "Resize the terminal",
    "read_log": "Page through the terminal log",
    "server_info": "Sandbox server info",
    "session_update": "Change a session's allowed hosts",
}

DESCRIPTIONS: dict[str, str] = {
    "session_create": """\
Start a sandboxed terminal: a throwaway Linux container running bash, with the host directory \
project_path mounted at /workspace (read-write unless read_only_project). No network unless \
network=true, or network=["pkg.test", "*.github.com"] for those hosts only (HTTP/HTTPS through \
a proxy the session's HTTP(S)_PROXY names). Shell state (cwd, variables, background jobs) \
persists until session_destroy. Returns the session_id the other tools take. Often \
unnecessary: execute with project_path creates the project's session on first use.
Example: {"project_path": "/home/me/app", "name": "app"}""",
    "session_list": """\
List this server's sessions: session_id, name, project_path, status (running/exited), busy \
(a command is running), last activity. Use it to find a session_id again.
Example: {}""",
    "session_info": """\
Details of one session: limits, status, busy, the foreground command, cwd, memory/CPU/process \
usage, log size, and attach_command (what a person runs to watch or take over the terminal).
Example: {"session_id": "3f2a9c1b7d4e"}""",
    "session_destroy": """\
Stop a session and remove its container; files written under /workspace stay on the host. \
Fails with SESSION_BUSY while a command runs, unless force=true.
Example: {"session_id": "3f2a9c1b7d4e", "force": true}""",
    "execute": """\
Run a shell command in the session's persistent bash and return its output and exit code. The \
tool for anything that finishes by itself: builds, tests, git, file edits with sed or heredocs, \
scripts. cd, exports and functions persist between calls. A non-zero exit code or a timeout is \
a normal result (exit_code, timed_out), not an error.
timeout_s: default <DEFAULT_TIMEOUT> s, at most <MAX_TIMEOUT> s. On timeout the command is \
stopped (SIGINT, SIGTERM, SIGKILL), its partial output is returned with timed_out=true, and the \
shell stays usable. For anything that may run longer than about 30 s (servers, watchers, long \
builds or test suites) prefer background=true: execute returns after the first output while \
the command keeps running; follow it with read (e.g. wait_for a regex) and stop it with signal.
For programs that wait for keyboard input (REPLs, prompts, editors) use send and read instead; \
execute with background=true (or idle_timeout_s) returns as soon as the program waits for \
terminal input (waiting_for_input=true, e.g. `python3 -q` at its prompt).
output keeps the last max_lines lines (truncated=true when cut); the full output is in the \
session log at log_range: page it with read_log.
Pass session_id, or project_path (+ name) to use that project's session, created on first use.
Examples: {"session_id": "3f2a9c1b7d4e", "command": "pytest -q"}
{"project_path": "/home/me/app", "command": "npm run dev", "background": true}""",
    "send": """\
Type into the session's terminal: text exactly as given (end with "\\n" to press Enter) and/or \
keys. For interactive programs (python REPL, y/n prompts, less, vim, top) and for answering a \
command that waits for input; use execute for ordinary commands. Keys: enter tab escape \
backspace delete insert space up down left right home end pageup pagedown f1..f12, with \
ctrl+ alt+ shift+ prefixes (any case); ^C and [UP] notation also work. Multi-line text is sent \
as a bracketed paste (paste="auto"). With wait_ms the output that follows is returned as read \
would (view), so one call types and reads.
Examples: {"session_id": "3f2a9c1b7d4e", "text": "print(6*7)\\n", "wait_ms": 1000}
{"session_id": "3f2a9c1b7d4e", "keys": ["ctrl+c"]}""",
    "read": """\
Read the session's terminal without typing. view "new" (default): output since the last read \
or execute, to follow a background command. view "screen": the visible screen as drawn, for \
full-screen programs (vim, top, less) and prompts. view "scrollback": history lines, paged from \
the end with offset and limit. wait_for waits (up to timeout_ms) until the content matches a \
regex (screen lines have their trailing spaces removed: match ">>>" not ">>> $"); idle_ms \
returns once output has stopped for that long. exited/exit_code tell whether the shell itself \
ended; busy whether a command is still running.
Examples: {"session_id": "3f2a9c1b7d4e", "wait_for": "Listening on", "timeout_ms": 20000}
{"session_id": "3f2a9c1b7d4e", "view": "screen"}""",
    "signal": """\
Signal the job in the foreground of the session's shell; the shell itself survives. The way to \
stop a background command, a hung program or a server: the default INT with escalate=true sends \
SIGINT, then SIGTERM, then SIGKILL until the job is gone (stopped=true). TSTP and CONT pause \
and resume; HUP, QUIT, USR1 and USR2 are sent once.
Example: {"session_id": "3f2a9c1b7d4e", "signal": "INT"}""",
    "resize": """\
Change the terminal size; full-screen programs redraw for the new size. Widen it when long \
lines wrap awkwardly.
Example: {"session_id": "3f2a9c1b7d4e", "rows": 50, "cols": 200}""",
    "read_log": """\
Page through everything the session's terminal printed (its raw log), including output that \
execute truncated. Start at an execute result's log_range.from_byte (or 0, or a negative offset \
to read the end), then pass each answer's next_byte as from_byte until eof=true. \
strip_ansi=true returns clean text. Offsets stay valid for the session's whole life.
Example: {"session_id": "3f2a9c1b7d4e", "from_byte": 1024, "max_bytes": 65536, \
"strip_ansi": true}""",
    "session_update": """\
Change the hosts an allow-list session may reach (a session created with network=[...]), at \
once and without restarting it: its shell, processes and files stay. The new list replaces \
the old one, within what the server allows. A refused host shows in execute's notices and in \
session_info's egress field.
Example: {"session_id": "3f2a9c1b7d4e", "network": ["pkg.test", "files.example.com"]}""",
    "server_info": """\
The server's version, container engine, default limits (memory, CPUs, processes, timeout, \
network), maximum timeout, and how many sessions are open out of the maximum.
Example: {}""",
}

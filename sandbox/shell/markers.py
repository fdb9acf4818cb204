"""The marker protocol: how ``execute`` knows exactly where a command's output starts and ends.

The shell is bash with an rc file we pass through the environment (nothing is echoed at start).
Every command is typed as ONE line::

    __sb_s NONCE; eval $'<the command, ANSI-C quoted>'; __sb_e $?

- ``eval`` of an ANSI-C quoted string makes any command (multi-line, heredocs, nested quotes,
  unterminated quotes) a single line for readline: no PS2 prompt can hang, a syntax error is a
  non-zero status, and nothing forks (``$'...'`` is parsed by bash itself).
- ``__sb_s`` prints the start marker, ``__sb_e`` the end marker with the status. The start
  marker also carries the pid namespace's last allocated pid (``ns_last_pid``, read by a builtin,
  no fork): every process with a higher pid was born during the command, which is how a timeout
  finds and stops what escaped the process group (``setsid``, ``nohup``, double forks). It also
  exports ``SANDBOX_COMMAND=NONCE``, which every process the command starts inherits: a process
  an *earlier* command left running can fork after this one started (``setsid`` forks once more
  when it leads its group), and its environment says it is not this command's. When a
  command is interrupted the rest of the line never runs, so ``PROMPT_COMMAND`` prints the end
  marker instead (with 130 after ^C, 137 after SIGKILL).
- Markers are private OSC sequences ``ESC ]777;sb;NONCE;S BEL`` / ``...;E;STATUS BEL``: invisible
  on a terminal, swallowed by pyte, removed by the transcript cleaner. They are assembled by
  ``printf`` at run time, so the echoed command line never contains one; a marker whose nonce
  is not the running command's is ignored (a file that contains a marker cannot end a command).
- ``PS1`` ends with a prompt marker (``...;P BEL``) so readers can skip the prompt itself.
"""

from __future__ import annotations

import secrets
from typing import Literal, NamedTuple

MARKER_PREFIX = b"\x1b]777;sb;"
BEL = b"\x07"
# A marker longer than this is not ours (keeps the scanner's carry bounded).
_MAX_MARKER = 256

# The rc file, passed in $SANDBOX_RC and read by bash from a pipe: nothing is typed or echoed.
# ``@MARK@`` is ``MARKER_PREFIX`` as printf and PS1 spell it (``RC_MARKER_PREFIX``), so the
# prefix is written once; ``@TOKEN@`` is each shell's own.
_RC_TEMPLATE = r"""
unset SANDBOX_RC
[ -r "$HOME/.bashrc" ] && . "$HOME/.bashrc"
HISTFILE="$HOME/.bash_history"
HISTCONTROL=ignorespace
bind 'set bell-style none' 2>/dev/null
__sb_n=
# Pids pressure is looked at before a command (__sb_p) only when it may have built up: the
# limit is read once (the engine sets it at create), and since pids are handed out in order,
# at most L - __sb_pl tasks were born since the last look at pid __sb_pl, which counted
# __sb_pc; while that many more stay under 90% of the limit, pids.current is not read.
__sb_pf=/sys/fs/cgroup/pids; [ -r $__sb_pf/pids.current ] || __sb_pf=/sys/fs/cgroup
__sb_pm=; builtin read -r __sb_pm 2>/dev/null <$__sb_pf/pids.max
case $__sb_pm in ''|*[!0-9]*) __sb_pm=;; esac
__sb_pl=; __sb_pc=
__sb_s() {
  __sb_n=$1; builtin export SANDBOX_COMMAND=$1
  __sb_l=; __sb_x=; builtin read -r __sb_l 2>/dev/null </proc/sys/kernel/ns_last_pid || :
  if [ -n "$__sb_pm" ] && { [[ -z $__sb_l || -z $__sb_pl ]] \
      || (( __sb_l < __sb_pl || (__sb_pc + __sb_l - __sb_pl) * 10 >= __sb_pm * 9 )); }; then
    __sb_pl=$__sb_l; __sb_pc=
    if builtin read -r __sb_pc 2>/dev/null <$__sb_pf/pids.current; then
      (( __sb_pc * 10 < __sb_pm * 9 )) || __sb_p "$__sb_pc" "$__sb_pm"
    else
      __sb_pl=
    fi
  fi
  builtin printf '@MARK@%s;S;%s%s\007' "$1" "$__sb_l" "$__sb_x"
}
__sb_p() {
  # Pids pressure (CURRENT and MAX are $1 and $2), with builtins only (no fork can succeed
  # when the pids limit is full): SIGKILL the biggest process groups holding a tenth of the
  # limit or more (never the shell's, never init's) until under half. Sets __sb_x to
  # ";p:CURRENT:MAX:PGID/COUNT/NAME,..." for the start marker.
  local c=$1 m=$2 f=$__sb_pf d= g= s= n= k= i sk=' ' IFS=$' \t\n' -
  builtin set +f
  local p=";p:$c:$m:"
  for i in 1 2 3 4; do
    local -A size=()
    for d in /proc/[0-9]*; do
      builtin read -r s 2>/dev/null <$d/stat || continue
      s=${s##*) }; builtin set -- $s
      (( $3 > 1 )) && [ "$3" != "$$" ] && [[ $sk != *" $3 "* ]] \
        && size[$3]=$(( ${size[$3]:-0} + 1 ))
    done
    g=; n=$(( m / 10 - 1 ))
    for k in "${!size[@]}"; do (( size[$k] > n )) && { g=$k; n=${size[$k]}; }; done
    [ -n "$g" ] || break
    s=; builtin read -r s 2>/dev/null </proc/$g/comm
    builtin kill -9 -- -$g 2>/dev/null || { sk+="$g "; continue; }  # not ours to kill
    builtin wait "$g" 2>/dev/null  # a job of this shell: reaped now, not reported mid-command
    p+="$g/$n/${s//[^A-Za-z0-9_.+-]/},"
    builtin read -r c 2>/dev/null <$f/pids.current || break
    (( c * 2 < m )) && break
  done
  __sb_x=$p
}
__sb_e() {
  if [ -n "$__sb_n" ]; then builtin printf '@MARK@%s;E;%s\007' "$__sb_n" "$1"; __sb_n=; fi
}
PROMPT_COMMAND='__sb_e $?'
trap 'builtin printf "@MARK@exit;%s;@TOKEN@\007" "$?"' EXIT
PS1='\[\033]0;sandbox: \w\007\]sandbox:\w\$ \[@MARK@P\007\]'
PS2='> '
printf '@MARK@ready;%s;@TOKEN@\007' "$$"
"""
RC_MARKER_PREFIX = MARKER_PREFIX.decode("ascii").replace("\x1b", "\\033")
SHELL_RC = _RC_TEMPLATE.replace("@MARK@", RC_MARKER_PREFIX)

# Run by the exec: hands the rc file to an interactive bash through fd 3 (no temp file).
# Before the shell: its file size cap (soft and hard: it cannot raise it back; on every engine,
# since Podman cannot take it as a container ulimit), and its home if an image lacks it.
SHELL_ARGV = [
    "bash",
    "-c",
    '[ -z "$SANDBOX_FSIZE_KB" ] || ulimit -f "$SANDBOX_FSIZE_KB"; unset SANDBOX_FSIZE_KB; '
    '[ -z "$SANDBOX_NPROC" ] || ulimit -u "$SANDBOX_NPROC"; unset SANDBOX_NPROC; '
    '[ -d "$HOME" ] || mkdir -p -m 0755 "$HOME" 2>/dev/null; '
    'exec bash --noprofile --rcfile /dev/fd/3 -i 3<<<"$SANDBOX_RC"',
]

# A session's own command, where the engine cannot cap the file size (Podman) or the process
# count (gVisor): ``sh`` caps them (dash and busybox count 512-byte blocks and spell the
# process limit -p, bash counts KiB and spells it -u) and makes the home, then becomes it.
COMMAND_PRELUDE = (
    'if [ -n "$SANDBOX_FSIZE_KB" ]; then if [ -n "$BASH_VERSION" ]; '
    'then ulimit -f "$SANDBOX_FSIZE_KB"; else ulimit -f "$((SANDBOX_FSIZE_KB * 2))"; fi; fi; '
    'if [ -n "$SANDBOX_NPROC" ]; then if [ -n "$BASH_VERSION" ]; '
    'then ulimit -u "$SANDBOX_NPROC"; else ulimit -p "$SANDBOX_NPROC"; fi; fi; '
    "unset SANDBOX_FSIZE_KB SANDBOX_NPROC; "
    '[ -d "$HOME" ] || mkdir -p -m 0755 "$HOME" 2>/dev/null; exec "$@"'
)


def command_argv(command: list[str], *, prelude: bool) -> list[str]:
    """The argv that starts a session's own ``command``: as given where the engine caps the
    file size, else behind ``COMMAND_PRELUDE``."""
    return ["sh", "-c", COMMAND_PRELUDE, "sh", *command] if prelude else list(command)


def new_nonce() -> str:
    return secrets.token_hex(8)


def shell_rc(token: str) -> str:
    """The rc file for one shell: its ready and exit markers carry ``token`` (hex), which no
    file or program output can know, so printing a marker-like string cannot pretend that the
    shell started or exited."""
    return SHELL_RC.replace("@TOKEN@", token)


def ansi_c_quote(command: str) -> str:
    """Quote ``command`` as a bash ``$'...'`` string made only of printable ASCII.

    Every byte outside printable ASCII, and ``'`` and ``\\``, becomes an escape, so the typed
    line holds no control character that readline could act on (no newline, no ^C, no ESC).
    """
    out: list[str] = ["$'"]
    for byte in command.encode("utf-8", "surrogateescape"):
        if byte == 0x27:
            out.append("\\'")
        elif byte == 0x5C:
            out.append("\\\\")
        elif 0x20 <= byte < 0x7F:
            out.append(chr(byte))
        else:
            out.append(f"\\x{byte:02x}")
    out.append("'")
    return "".join(out)


# ^E ^U: move to the end of readline's line and discard it, so stray typed input (a key sent
# to a program that exited, a paste delimiter) can never prefix our line.
CLEAR_LINE = b"\x05\x15"


def command_line(command: str, nonce: str) -> bytes:
    """The one line typed into the shell for ``command`` (ends with Enter)."""
    line = f" __sb_s {nonce}; eval {ansi_c_quote(command)}; __sb_e $?\r"
    return CLEAR_LINE + line.encode("ascii")


def resync_line(nonce: str, status: int) -> bytes:
    """Ends command ``nonce`` from an idle prompt whose end marker was lost."""
    return CLEAR_LINE + f" __sb_n={nonce}; __sb_e {int(status)}\r".encode("ascii")


MarkerKind = Literal["start", "end", "prompt", "ready", "exit"]


class Marker(NamedTuple):  # a tuple: the reader builds one per marker, ~4x cheaper
    kind: MarkerKind
    nonce: str  # the command's nonce; for "ready" the shell's pid
    status: int | None
    start: int  # absolute offset of the ESC
    end: int  # absolute offset just after the BEL
    last_pid: int | None = None  # "start": the last pid allocated before the command ran
    pressure: str = ""  # "start": pids pressure the shell cleared first ("p:CUR:MAX:G/N/NAME,")
    token: str = ""  # "ready", "exit": the shell's token ("" from an older shell)


def _parse(body: bytes, start: int, end: int) -> Marker | None:
    parts = body.decode("ascii", "replace").split(";")
    if parts == ["P"]:
        return Marker("prompt", "", None, start, end)
    if len(parts) in (2, 3) and parts[0] == "ready":
        return Marker("ready", parts[1], None, start, end, token=_token(parts))
    if len(parts) in (2, 3) and parts[0] == "exit":
        try:
            return Marker("exit", "", int(parts[1]), start, end, token=_token(parts))
        except ValueError:
            return None
    if len(parts) in (2, 3, 4) and parts[1] == "S":
        last_pid = int(parts[2]) if len(parts) >= 3 and parts[2].isdigit() else None
        pressure = parts[3] if len(parts) == 4 and parts[3].startswith("p:") else ""
        return Marker("start", parts[0], None, start, end, last_pid, pressure=pressure)
    if len(parts) == 3 and parts[1] == "E":
        try:
            status = int(parts[2])
        except ValueError:
            return None
        return Marker("end", parts[0], status, start, end)
    return None


def _token(parts: list[str]) -> str:
    return parts[2] if len(parts) == 3 else ""


class MarkerScanner:
    """Finds markers in raw TTY bytes, including markers split across reads.

    ``scan`` is called by the reader thread on every chunk: it only uses ``bytes.find``.
    """

    def __init__(self) -> None:
        self._carry = b""
        self._carry_offset = 0

    def scan(self, chunk: bytes, offset: int) -> list[Marker]:
        if self._carry:
            data = self._carry + chunk
            base = self._carry_offset
            self._carry = b""
        else:
            if MARKER_PREFIX[:1] not in chunk:
                return []
            data = chunk
            base = offset
        found: list[Marker] = []
        pos = 0
        while True:
            i = data.find(MARKER_PREFIX, pos)
            if i < 0:
                break
            j = data.find(BEL, i + len(MARKER_PREFIX), i + _MAX_MARKER)
            if j < 0:
                if len(data) - i < _MAX_MARKER:  # may complete in the next chunk
                    self._carry = data[i:]
                    self._carry_offset = base + i
                    return found
                pos = i + 1
                continue
            marker = _parse(data[i + len(MARKER_PREFIX) : j], base + i, base + j + 1)
            if marker is not None:
                found.append(marker)
            pos = j + 1
        # A prefix of the marker's start may sit at the very end of the chunk.
        tail_from = max(pos, len(data) - len(MARKER_PREFIX) + 1)
        k = data.rfind(b"\x1b", tail_from)  # the last ESC: a prefix holds only one
        if k >= 0 and MARKER_PREFIX.startswith(data[k:]):
            self._carry = data[k:]
            self._carry_offset = base + k
        return found

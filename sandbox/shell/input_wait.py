"""Whether the program in front of the shell waits for terminal input, as the kernel says.

``background`` and ``idle_timeout_s`` return once a command's program waits for input (a
REPL's prompt, a ``[Y/n]`` question, ``cat``). Silence alone cannot tell that apart from a
program that works quietly or prints slowly; the kernel can: the program sleeps in a system
call that reads, polls or selects only on the session's terminal.

``WATCH_SCRIPT`` is a small bash loop run as the shell's user in the container (a second,
long-lived exec, so a question costs a round trip, not an engine call). For every line it is
sent (``SEQ SHELL_PID``) it answers one line, ``SEQ VERDICT``, reading ``/proc`` with builtins
only (no fork: it still answers at the pids limit):

- ``input``: every process of the terminal's foreground group sleeps, and one of them in
  ``read``/``readv`` of the terminal, or in ``select``/``poll``/``epoll`` whose descriptors are
  the terminal and regular files only (a socket or a pipe might wake it: not counted);
- ``shell``: the same, but the shell itself is in front (a builtin ``read``, or its prompt);
- ``busy``: anything else;
- ``unknown``: this kernel does not say (gVisor's ``/proc`` has no foreground group and no
  ``syscall`` file): the caller falls back to the silence rule.
"""

from __future__ import annotations

from typing import Literal, cast

Verdict = Literal["input", "shell", "busy", "unknown"]
VERDICTS: frozenset[str] = frozenset({"input", "shell", "busy", "unknown"})

# System call numbers (first field of /proc/PID/syscall) per machine: reads, then waits.
WATCH_SCRIPT = r"""
stty -echo 2>/dev/null
case $(uname -m) in
  x86_64) R=" 0 19 " S=" 23 270 " P=" 7 271 " E=" 232 281 " ;;
  aarch64|arm64) R=" 63 65 " S=" 72 " P=" 73 " E=" 22 " ;;
  *) R= S= P= E= ;;
esac
kind() {  # 2: the terminal, 1: a socket or pipe, 0: anything else (a file, nothing)
  local f=/proc/$1/fd/$2
  if [ "$f" -ef /proc/$p/fd/0 ] || [ "$f" -ef /dev/tty ]; then return 2; fi
  if [ -S "$f" ] || [ -p "$f" ]; then return 1; fi
  return 0
}
only_tty() {  # the descriptors $2... of process $1 include the terminal and nothing that wakes
  local q=$1 fd seen=0
  shift
  for fd in "$@"; do
    kind "$q" "$fd"
    case $? in 1) return 1 ;; 2) seen=1 ;; esac
  done
  [ $seen = 1 ]
}
waits() {  # process $1 sleeps waiting for the terminal only
  local q=$1 s fds=() f l i
  read -r s 2>/dev/null < /proc/$q/syscall || return 1
  set -- $s
  case "$R" in *" $1 "*) kind "$q" $(($2)); [ $? = 2 ]; return ;; esac
  case "$S" in *" $1 "*) for ((i = 0; i < $(($2)) && i < 1024; i++)); do fds+=("$i"); done ;;
  *) case "$P" in *" $1 "*)
       for f in /proc/$q/fd/*; do fds+=("${f##*/}"); done ;;
     *) case "$E" in *" $1 "*)
          while read -r l; do
            case $l in "tfd:"*) set -- $l; fds+=("$2") ;; esac
          done 2>/dev/null < /proc/$q/fdinfo/$(($2)) ;;
        *) return 1 ;; esac ;; esac ;;
  esac
  only_tty "$q" "${fds[@]}"
}
verdict() {  # sets v
  local l t q any=0
  v=busy
  read -r l 2>/dev/null < /proc/$p/stat || return
  l=${l##*) }; set -- $l; t=$6
  if [ -z "$R" ] || [ "${t:-0}" -le 0 ] || ! [ -r /proc/$p/syscall ]; then v=unknown; return; fi
  for q in /proc/[0-9]*; do
    q=${q#/proc/}
    read -r l 2>/dev/null < /proc/$q/stat || continue
    l=${l##*) }; set -- $l
    [ "$3" = "$t" ] || continue
    [ "$1" = S ] || return
    waits "$q" && any=1
  done
  if [ $any = 1 ]; then if [ "$t" = "$p" ]; then v=shell; else v=input; fi; fi
}
while read -r n p; do
  verdict
  echo "$n $v"
done
"""


def parse_answer(line: str) -> tuple[int, Verdict] | None:
    """``(seq, verdict)`` from one answer line, or None for anything else (an echo, noise)."""
    seq, _, word = line.strip().partition(" ")
    if not seq.isdigit() or word not in VERDICTS:
        return None
    return int(seq), cast(Verdict, word)

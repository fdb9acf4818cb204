"""The sweep: what a stopped command left behind outside its process group is killed.

Pure script and its reading; the session's process control runs it through a backend.
"""

from __future__ import annotations

import contextlib

SWEEP_ROUNDS = 4

# Kills, as the shell's user, every process born after pid @AFTER@ (the start marker's
# ``ns_last_pid``) except the shell and this script: what a timed-out command left behind outside
# its process group (``setsid``, ``nohup``, double forks). Pids only grow in a pid namespace until
# they wrap at pid_max: after a wrap (or with no start pid: @AFTER@ = -1) every process of the
# user goes, as it does when the container is at 90% of its pids limit (a fork bomb an earlier
# command left behind makes the session unusable anyway). Each round stops the processes first
# so a forking loop cannot outrun the kill. A process whose environment names another command
# (``SANDBOX_COMMAND``, exported by the start marker's function) is spared unless the pids limit
# is that full: a daemon an earlier command started can fork after this command began (``setsid``
# does, once more, when it leads its process group), and its pid alone would condemn it.
# Only builtins: it must work when the pids limit leaves no room for a fork. Prints the number
# of processes killed. It refuses to run ("swept -2") unless PID 1 is the session container's
# init, which runs as the keepalive's uid: never on a host (PID 1 is root's there), whatever
# backend asked.
SWEEP_SCRIPT = r"""
p1=; while read -r k v _; do [ "$k" = Uid: ] && { p1=$v; break; }; done </proc/1/status
[ "$p1" = @KEEPALIVE@ ] || { echo "swept -2"; exit 0; }
after=@AFTER@; shell=@SHELL@; self=$$; skip_tmux=@DURABLE@; nonce=@NONCE@; full=0
last=0; read -r last </proc/sys/kernel/ns_last_pid 2>/dev/null
[ "$after" -ge 0 ] && [ "$last" -ge "$after" ] 2>/dev/null || after=-1
for c in /sys/fs/cgroup/pids /sys/fs/cgroup; do
  cur=; max=; read -r cur <$c/pids.current 2>/dev/null; read -r max <$c/pids.max 2>/dev/null
  if [ -n "$cur" ] && [ "$max" -gt 0 ] 2>/dev/null; then
    [ $((cur * 10)) -ge $((max * 9)) ] && { after=-1; full=1; }
    break
  fi
done
killed=0; round=0
while [ $round -lt @ROUNDS@ ]; do
  round=$((round + 1)); victims=
  for d in /proc/[0-9]*; do
    p=${d#/proc/}
    [ "$p" = "$self" ] || [ "$p" = "$shell" ] || [ "$p" -le "$after" ] && continue
    [ -O "$d" ] || continue
    read -r st <"$d/stat" 2>/dev/null || continue
    rest=${st##*) }; set -- $rest
    case "$1" in Z|X|x) continue ;; esac
    [ "$2" = "$self" ] && continue
    if [ "$skip_tmux" = 1 ]; then
      case "${st#*(}" in tmux*|tail*) continue ;; esac
    fi
    if [ "$full" = 0 ] && [ -n "$nonce" ]; then
      tag=
      while IFS= read -r -d '' kv; do
        case "$kv" in SANDBOX_COMMAND=*) tag=${kv#SANDBOX_COMMAND=}; break ;; esac
      done <"$d/environ" 2>/dev/null
      [ -n "$tag" ] && [ "$tag" != "$nonce" ] && continue
    fi
    victims="$victims $p"
  done
  [ -z "$victims" ] && break
  kill -STOP $victims 2>/dev/null; kill -KILL $victims 2>/dev/null
  set -- $victims; killed=$((killed + $#))
done
echo "swept $killed"
"""


def sweep_script(
    *, keepalive_uid: int, after_pid: int | None, shell_pid: int, durable: bool, nonce: str | None
) -> str:
    """``SWEEP_SCRIPT`` for one shell: processes born after ``after_pid`` (None: every one),
    sparing those another command than ``nonce`` started."""
    return (
        SWEEP_SCRIPT.replace("@KEEPALIVE@", str(keepalive_uid))
        .replace("@AFTER@", str(-1 if after_pid is None else int(after_pid)))
        .replace("@SHELL@", str(int(shell_pid)))
        .replace("@DURABLE@", "1" if durable else "0")
        .replace("@ROUNDS@", str(SWEEP_ROUNDS))
        .replace("@NONCE@", nonce if nonce and nonce.isalnum() else "")
    )


def parse_sweep(text: str) -> int | None:
    """How many processes the script killed; -2 when it refused (not a sandbox container);
    None when it printed no count (it did not run to its end)."""
    for line in text.splitlines():
        if line.startswith("swept "):
            with contextlib.suppress(ValueError):
                return int(line.split()[1])
    return None

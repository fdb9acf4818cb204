"""Record golden terminal streams: ``.venv/bin/python tests/unit/captured/record.py [name ...]``.

Each scenario runs a real program on the host inside a private tmux server (``-L``), with
``TERM=xterm-256color`` and a UTF-8 locale. ``pipe-pane`` records every byte the program writes
(``<name>.input``); tmux is the reference terminal: ``capture-pane`` and the cursor / alternate
screen flags it reports become ``<name>.expected`` (JSON). ``test_terminal.py`` feeds the input
to ``ScreenModel`` and compares. Needs tmux, bash, vim, less, top on the host.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SERVER = "sandbox-golden"
ENV = "env -i TERM=xterm-256color LANG=C.UTF-8 LC_ALL=C.UTF-8 HOME={home} PATH=/usr/bin:/bin"
BASH = ENV + " PS1='$ ' bash --norc --noprofile"
VIM = ENV + " vim --clean -n -i NONE"

NOTES = (
    "Notes for the sandbox terminal\n"
    "wide: 中文字符 and emoji 😀 👍 take two cells\n"
    "combining: e\u0301te\u0301 and cafe\u0301; zwj: 👨\u200d👩\u200d👧 family\n"
    "flags and selectors: ❤\ufe0f ✔\ufe0e\n"
    + "".join(f"line {i:02d}: the quick brown fox jumps over the lazy dog\n" for i in range(40))
    + "a very long line "
    + "0123456789" * 20
    + "\n"
)

# name -> (rows, cols, command, steps); a step is ("type", text), ("key", name) or ("wait", s)
SCENARIOS: dict[str, tuple[int, int, str, list[tuple[str, str]]]] = {
    "vim_editing": (
        24, 80, VIM + " notes.txt",
        [("wait", "1"), ("type", ":set number\r"), ("type", "5G"), ("type", "A 中文 ok😀\x1b"),
         ("type", "12Gdd"), ("type", "3G$"), ("wait", "0.5")],
    ),
    "shell_vim_roundtrip": (
        20, 70, BASH,
        [("wait", "0.5"),
         ("type", "printf '\\033[1;32mgreen\\033[0m plain \\033]0;my title\\007after title\\n'\r"),
         ("type", "printf 'progress 10%%\\rprogress 50%%\\r\\033[Kdone 中文\\n'\r"),
         ("type", "seq 1 5\r"),
         ("type", "vim --clean -n -i NONE notes.txt\r"), ("wait", "1"),
         ("type", "Go新しい行 added\x1b"), ("type", ":wq\r"), ("wait", "0.5"),
         ("type", "echo back in the shell\r"), ("wait", "0.3")],
    ),
    "less_search": (
        24, 80, ENV + " LESS= less -S notes.txt",
        [("wait", "0.7"), ("type", "/fox\r"), ("wait", "0.3"), ("type", "2j"), ("wait", "0.3")],
    ),
    "top_frozen": (
        24, 100, ENV + " top -d 1",
        [("wait", "2.5"), ("stop", "top"), ("wait", "0.3")],
    ),
    "nested_tmux_split": (
        24, 80, ENV + " tmux -L sandbox-golden-inner -f inner.conf new-session",
        [("wait", "0.8"), ("key", "C-b"), ("type", "%"), ("wait", "0.4"),
         ("type", "seq 1 60\r"), ("wait", "0.4"), ("key", "C-b"), ("type", "o"),
         ("type", "printf 'left pane 中文 ok\\n'\r"), ("wait", "0.5")],
    ),
    "shell_unicode_edges": (
        18, 40, BASH,
        [("wait", "0.5"),
         ("type", "printf '%079d\\u4e2d|\\n' 0\r"),  # a wide char with one column left wraps
         ("type", "printf 'zwj \\U1F468\\u200d\\U1F469 vs \\u2764\\ufe0f e\\u0301x\\n'\r"),
         ("type", "printf 'a\\033_apc payload\\033\\\\b\\033Pq#1~\\033\\\\c\\n'\r"),
         ("type", "printf '\\033]2;edge title\\007\\033[>4;1mnot underlined?\\033[m\\n'\r"),
         ("type", "printf '12345\\b\\b\\033[K\\tT\\n'\r"), ("wait", "0.3")],
    ),
}  # fmt: skip

INNER_TMUX_CONF = "set -g default-command \"env PS1='$ ' bash --norc --noprofile\"\n"


def tmux(*args: str, conf: Path) -> str:
    cmd = ["tmux", "-L", SERVER, "-f", str(conf), *args]
    return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout


def record(name: str, work: Path) -> None:
    rows, cols, command, steps = SCENARIOS[name]
    conf = work / "tmux.conf"
    conf.write_text("set -g status off\nset -g escape-time 0\nset -g default-terminal tmux\n")
    stream = HERE / f"{name}.input"
    stream.unlink(missing_ok=True)
    home = work / "home"
    home.mkdir(exist_ok=True)
    command = command.format(home=home)
    tmux("new-session", "-d", "-s", "g", "-x", str(cols), "-y", str(rows), "-c", str(work),
         f"sleep 0.4; exec {command}", conf=conf)  # fmt: skip
    tmux("pipe-pane", "-t", "g", "-o", f"cat > {stream}", conf=conf)
    try:
        for kind, arg in steps:
            if kind == "type":
                tmux("send-keys", "-t", "g", "-l", arg, conf=conf)
                time.sleep(0.2)
            elif kind == "key":
                tmux("send-keys", "-t", "g", arg, conf=conf)
                time.sleep(0.2)
            elif kind == "stop":
                pid = tmux("display", "-p", "-t", "g", "#{pane_pid}", conf=conf).strip()
                os.kill(int(pid), 19)  # SIGSTOP: freeze the screen before we look at it
            else:
                time.sleep(float(arg))
        _settle(stream)
        lines = tmux("capture-pane", "-p", "-t", "g", conf=conf).split("\n")[:rows]
        info = tmux("display", "-p", "-t", "g", "#{cursor_x} #{cursor_y} #{alternate_on}",
                    conf=conf).split()  # fmt: skip
        tmux("pipe-pane", "-t", "g", conf=conf)  # stop recording before the program resumes
    finally:
        pid = tmux("display", "-p", "-t", "g", "#{pane_pid}", conf=conf).strip()
        os.kill(int(pid), 18)  # SIGCONT, in case we stopped it
        tmux("kill-server", conf=conf)
        subprocess.run(["tmux", "-L", "sandbox-golden-inner", "kill-server"], capture_output=True)
    lines += [""] * (rows - len(lines))
    expected = {
        "rows": rows,
        "cols": cols,
        # tmux reports a cursor waiting to wrap at column ``cols``; a terminal's CPR says cols.
        "cursor": [int(info[1]), min(int(info[0]), cols - 1)],
        "alternate_screen": info[2] == "1",
        "lines": [line.rstrip(" ") for line in lines],
    }
    (HERE / f"{name}.expected").write_text(json.dumps(expected, ensure_ascii=False, indent=1))
    print(f"{name}: {stream.stat().st_size} bytes")


def _settle(path: Path) -> None:
    size = -1
    while not path.exists() or path.stat().st_size != size:
        size = path.stat().st_size if path.exists() else -1
        time.sleep(0.3)


def main() -> None:
    names = sys.argv[1:] or list(SCENARIOS)
    for name in names:
        work = Path(tempfile.mkdtemp(prefix="sandbox-golden-"))
        try:
            (work / "notes.txt").write_text(NOTES)
            (work / "inner.conf").write_text(INNER_TMUX_CONF)
            record(name, work)
        finally:
            shutil.rmtree(work)


if __name__ == "__main__":
    main()

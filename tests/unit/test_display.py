"""The display alone, over a real raw log: protocol lines shown as the command typed, and the
cursor of the "new" view skipping the prompt that follows a command."""

from __future__ import annotations

from pathlib import Path

from sandbox.session.display import Display
from sandbox.terminal.rawlog import RawLog

PROMPT = b"sandbox:~$ "


def test_the_screen_shows_the_command_instead_of_its_protocol_line(tmp_path: Path) -> None:
    log = RawLog(tmp_path / "raw.log", max_bytes=1 << 20)
    display = Display(log, rows=4, cols=30)
    log.append(PROMPT)
    line = b" __sb_s 1f; eval $'echo hi'\r\n"
    at = log.append(line)
    log.append(b"hi\r\n" + PROMPT)
    display.add_echo(at, at + len(line), b"echo hi\r\n")
    assert display.display_read(0, log.size) == PROMPT + b"echo hi\r\nhi\r\n" + PROMPT
    assert display.snapshot().lines[:3] == ["sandbox:~$ echo hi", "hi", "sandbox:~$"]


def test_new_reads_start_after_the_prompt_that_follows_a_command(tmp_path: Path) -> None:
    log = RawLog(tmp_path / "raw.log", max_bytes=1 << 20)
    display = Display(log, rows=4, cols=30)
    log.append(b"out\r\n")
    after = log.size
    display.command_done(after, prompt_end=None)  # its prompt has not come yet
    assert display.new_since(log.size, consume=False) == after
    log.append(PROMPT)
    display.on_prompt(log.size)
    assert display.new_since(log.size, consume=True) == log.size
    display.command_done(None, None)  # not finished: new reads start at the end
    log.append(b"more")
    assert display.new_since(log.size, consume=False) == log.size - 4

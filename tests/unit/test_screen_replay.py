"""The lazy screen after a long history reads only a short tail, and shows exactly what feeding
every byte would: checked against a full pyte feed of the same bytes, for recorded programs
(tests/unit/captured) and for random shell-like output."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from sandbox.terminal.stream import LazyScreen, ScreenModel, exact_tail
from tests.unit.test_terminal import Log

CAPTURED = Path(__file__).parent / "captured"


def shell_history(lines: int, seed: int = 7) -> bytes:
    """Prompts, coloured listings, progress lines overwritten with CR and erase-in-line."""
    rng = random.Random(seed)
    out = []
    for i in range(lines):
        kind = rng.randrange(4)
        if kind == 0:
            out.append(b"\x1b]0;me@box: ~\x07\x1b[01;32mme@box\x1b[0m:~$ \x1b[?2004hls\r\n")
        elif kind == 1:
            out.append(b"\x1b[0m\x1b[01;34mdir%d\x1b[0m  file%d.txt\r\n" % (i, i))
        elif kind == 2:
            out.append(b"progress 10%%\r\x1b[Kprogress %d%%\r\n" % rng.randrange(100))
        else:
            out.append(b"line %d " % i + b"x" * rng.randrange(0, 200) + b"\r\n")
    return b"".join(out)


def full_feed(rows: int, cols: int, data: bytes) -> ScreenModel:
    model = ScreenModel(rows, cols)
    model.feed(data)
    return model


@pytest.mark.parametrize("name", sorted(p.stem for p in CAPTURED.glob("*.input")))
def test_a_recorded_program_after_a_long_history_shows_as_a_full_feed(name: str) -> None:
    expected = json.loads((CAPTURED / f"{name}.expected").read_text())
    rows, cols = expected["rows"], expected["cols"]
    log = Log()
    log.append(shell_history(2_500))
    log.append((CAPTURED / f"{name}.input").read_bytes())
    screen = LazyScreen(rows, cols)
    screen.catch_up(len(log.data), log.read, log.scanner)
    snap = screen.snapshot()
    assert snap == full_feed(rows, cols, bytes(log.data)).snapshot()
    if expected["alternate_screen"]:  # nothing of the history shows: the recording's own screen
        assert snap.lines == expected["lines"]


@pytest.mark.parametrize("seed", range(8))
def test_random_shell_output_after_a_long_history_is_exact_and_cheap(seed: int) -> None:
    rng = random.Random(seed)
    rows, cols = rng.choice([(5, 20), (24, 80), (40, 120)])
    log = Log()
    log.append(shell_history(rng.randrange(1_500, 3_000), seed))
    screen = LazyScreen(rows, cols)
    screen.catch_up(len(log.data), log.read, log.scanner)
    assert screen.snapshot() == full_feed(rows, cols, bytes(log.data)).snapshot()
    assert log.read_bytes <= screen.backlog_limit


def test_the_exact_tail_is_the_last_rows_lines_of_a_checked_twice_as_long_end() -> None:
    data = b"".join(b"l%d\r\n" % i for i in range(100))
    assert exact_tail(data, 4) == b"l97\r\nl98\r\nl99\r\n"  # and the cursor's empty row
    end = data[-8 * 5 :]  # l92 to l99: 8 newlines, the checked end for 4 rows starts at l93
    assert exact_tail(end[:10] + b"\x1b[5A" + end[10:], 4) is None  # a move in the checked end
    assert exact_tail(b"\x1b[5A" + end, 4) is not None  # before it: scrolled away, fine


def test_no_exact_tail_when_the_cursor_leaves_its_row_or_lines_are_too_few() -> None:
    lines = b"".join(b"l%d\r\n" % i for i in range(100))
    assert exact_tail(lines + b"\x1b[3Aup", 4) is None  # cursor up: older rows show through
    assert exact_tail(lines + b"\x1b[1;1Hx", 4) is None
    assert exact_tail(lines + b"\x1b(0q", 4) is None  # line-drawing charset
    assert exact_tail(b"a\r\nb\r\n", 4) is None
    assert exact_tail(lines.replace(b"\r\n", b"\n"), 4) is None  # the column would carry over


def test_a_screen_close_behind_is_fed_as_it_came() -> None:
    log = Log()
    screen = LazyScreen(24, 80)
    log.append(shell_history(200))
    screen.catch_up(len(log.data), log.read, log.scanner)
    before = log.read_bytes
    log.append(b"x" * 100 + b"\r\n")
    screen.catch_up(len(log.data), log.read, log.scanner)
    assert log.read_bytes - before == 102
    assert screen.snapshot() == full_feed(24, 80, bytes(log.data)).snapshot()


def test_the_main_screen_comes_back_right_after_a_read_inside_the_alternate_one() -> None:
    log = Log()
    screen = LazyScreen(6, 40)
    log.append(shell_history(3000) + b"$ vim\r\n")
    log.append(b"\x1b[?1049h\x1b[H\x1b[2J" + b"\x1b[3;1Hediting" * 10)
    screen.catch_up(len(log.data), log.read, log.scanner)
    assert screen.snapshot().alternate_screen
    assert log.read_bytes < 1024  # the main screen behind it is not rebuilt yet
    log.append(b"\x1b[?1049l$ echo done\r\ndone\r\n$ ")
    screen.catch_up(len(log.data), log.read, log.scanner)
    assert screen.snapshot() == full_feed(6, 40, bytes(log.data)).snapshot()

"""The marker protocol's pure parts: quoting, the typed line, and the split-safe scanner."""

from __future__ import annotations

import random
import subprocess

import pytest

from sandbox.shell.markers import (
    MARKER_PREFIX,
    RC_MARKER_PREFIX,
    MarkerScanner,
    ansi_c_quote,
    command_line,
    shell_rc,
)


@pytest.mark.parametrize(
    "command",
    [
        "echo hi",
        'it\'s a "test" with \\ backslash',
        "line1\nline2\n\ttabbed",
        "emoji 🎉 and 日本語",
        "control \x01\x1b[31m chars",
        "$HOME `date` $(echo x)",
    ],
)
def test_ansi_c_quote_round_trips_through_bash(command: str) -> None:
    quoted = ansi_c_quote(command)
    assert all(0x20 <= ord(ch) < 0x7F for ch in quoted)
    out = subprocess.run(
        ["bash", "-c", f"printf %s {quoted}"], capture_output=True, check=True
    ).stdout
    assert out == command.encode()


def test_command_line_is_one_printable_line_without_a_literal_marker() -> None:
    line = command_line("cat <<EOF\nx\nEOF", "abcd")
    assert line.endswith(b"\r")
    assert line.startswith(b"\x05\x15")  # clears whatever readline holds
    assert b"\n" not in line
    assert b"\x1b" not in line
    assert b"abcd" in line


def _stream() -> bytes:
    return (
        b"\x1b]777;sb;ready;42\x07prompt$ \x1b]777;sb;P\x07 __sb_s n1; eval ...\r\n"
        b"\x1b]777;sb;n1;S\x07hello\r\n\x1b]777;sb;n1;E;7\x07"
        b"\x1b]777;sb;P\x07"
    )


def test_scanner_finds_every_marker_with_offsets() -> None:
    data = _stream()
    found = MarkerScanner().scan(data, 100)
    kinds = [(m.kind, m.nonce, m.status) for m in found]
    assert kinds == [
        ("ready", "42", None),
        ("prompt", "", None),
        ("start", "n1", None),
        ("end", "n1", 7),
        ("prompt", "", None),
    ]
    start = next(m for m in found if m.kind == "start")
    end = next(m for m in found if m.kind == "end")
    assert data[start.end - 100 : end.start - 100] == b"hello\r\n"


@pytest.mark.parametrize("seed", range(20))
def test_scanner_handles_markers_split_across_reads(seed: int) -> None:
    data = _stream() * 3
    rng = random.Random(seed)
    cuts = sorted(rng.sample(range(1, len(data)), 25))
    scanner = MarkerScanner()
    found = []
    prev = 0
    for cut in [*cuts, len(data)]:
        found += scanner.scan(data[prev:cut], prev)
        prev = cut
    whole = MarkerScanner().scan(data, 0)
    assert found == whole


def test_scanner_ignores_garbage_and_unterminated_prefixes() -> None:
    scanner = MarkerScanner()
    junk = b"\x1b]777;sb;" + b"x" * 200 + b"\x07 \x1b]777;sb;bogus;Q\x07"
    assert scanner.scan(junk, 0) == []
    assert scanner.scan(b"\x1b]777;sb;n;E;1\x07", len(junk))[0].status == 1


def test_a_split_marker_prefix_after_another_escape_sequence_is_kept() -> None:
    # the chunk ends in an unrelated sequence and then the first bytes of a marker
    first = b"output\x1b[m\x1b]7"
    second = b"77;sb;n1;E;3\x07"
    scanner = MarkerScanner()
    found = scanner.scan(first, 0) + scanner.scan(second, len(first))
    assert [(m.kind, m.status, m.start) for m in found] == [("end", 3, 9)]


def test_foreground_parse_tells_waiting_from_working() -> None:
    from sandbox.shell.foreground import parse_foreground

    waiting = parse_foreground("tpgid 14\nargs cat\nproc 14 S wait_woken\n", 7)
    assert waiting is not None
    assert waiting.waiting
    assert not waiting.is_shell
    repl = "tpgid 20\nargs python3\nproc 20 S poll_schedule_timeout.constprop.0\n"
    assert parse_foreground(repl, 7).waiting  # type: ignore[union-attr]
    working = parse_foreground("tpgid 30\nargs make\nproc 30 S do_wait\nproc 31 R 0\n", 7)
    assert working is not None
    assert not working.waiting
    sleeping = parse_foreground("tpgid 40\nargs sleep 100\nproc 40 S hrtimer_nanosleep\n", 7)
    assert sleeping is not None
    assert not sleeping.waiting
    builtin = parse_foreground("tpgid 7\nargs bash\nproc 7 S wait_woken\n", 7)
    assert builtin is not None
    assert builtin.is_shell
    assert parse_foreground("tpgid 7\n", 7) is None


def test_the_rc_file_spells_the_marker_prefix_only_as_the_scanner_knows_it() -> None:
    rc = shell_rc("c0ffee")
    assert rc.count(RC_MARKER_PREFIX) >= 5  # start, end, exit, prompt, ready
    assert "777" not in rc.replace(RC_MARKER_PREFIX, "")
    printed = subprocess.run(
        ["bash", "-c", f"printf '{RC_MARKER_PREFIX}P\\007'"], capture_output=True, check=True
    ).stdout
    assert printed == MARKER_PREFIX + b"P\x07"
    assert [m.kind for m in MarkerScanner().scan(printed, 0)] == ["prompt"]

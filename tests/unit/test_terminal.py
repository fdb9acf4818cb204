"""The terminal output pipeline: transcript cleaner, screen model, stream scanner, lazy screen."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from sandbox.terminal.stream import (
    DA1_REPLY,
    DA2_REPLY,
    LazyScreen,
    ScreenModel,
    StreamScanner,
    TerminalScreen,
    clean_transcript,
    complete_prefix,
)

CAPTURED = Path(__file__).parent / "captured"
ESC = b"\x1b"


def screen_of(data: bytes, rows: int = 6, cols: int = 20) -> ScreenModel:
    model = ScreenModel(rows, cols)
    model.feed(data)
    assert model.parse_errors == 0
    return model


def lines_of(data: bytes, rows: int = 6, cols: int = 20) -> list[str]:
    return screen_of(data, rows, cols).snapshot().lines


# -- clean_transcript ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "text"),
    [
        (b"abc\rX", "Xbc"),
        (b"10%\r20%\r100%", "100%"),
        (b"one\r\ntwo\r\n", "one\ntwo\n"),
        (b"abc\r\nx\r", "abc\nx"),
        (b"abc\r\r\n", "abc\n"),
        (b"ab\bc", "ac"),
        (b"\b\bab", "ab"),
        (b"downloading 50%\r\x1b[Kdone\r\n", "done\n"),
        (b"old text\x1b[2K\rnew\r\n", "new\n"),
        (b"tab\tkept\x00\x07\x7f\x01", "tab\tkept"),
    ],
)
def test_clean_transcript_replays_carriage_returns_and_backspaces(raw: bytes, text: str) -> None:
    assert clean_transcript(raw) == text


def test_clean_transcript_removes_osc_titles_clipboard_and_markers() -> None:
    raw = (
        b"a\x1b]0;window title\x07b\x1b]2;other\x1b\\c"
        b"\x1b]52;c;c2VjcmV0IGNsaXBib2FyZA==\x07d"
        b"\x1b]777;sb;n0nce;E;0\x07e\x1b]8;;https://x.example\x1b\\link\x1b]8;;\x1b\\f"
    )
    assert clean_transcript(raw) == "abcdelinkf"
    assert clean_transcript(raw, strip_ansi=False) == "abcdelinkf"


def test_clean_transcript_removes_dcs_apc_pm_sos_payloads() -> None:
    raw = b"1\x1bPq#0;2;0;0;0#1~\x1b\\2\x1b_hidden apc\x1b\\3\x1b^pm\x1b\\4\x1bXsos\x1b\\5"
    assert clean_transcript(raw) == "12345"
    assert clean_transcript(raw, strip_ansi=False) == "12345"


def test_clean_transcript_keeps_only_sgr_when_not_stripping_ansi() -> None:
    raw = b"\x1b[?1049h\x1b[H\x1b[2J\x1b[1;31mred\x1b[0m \x1b[38;5;208mor\x1b[m\x1b(B\x1b=\x1b[5H!"
    assert clean_transcript(raw) == "red or!"
    assert clean_transcript(raw, strip_ansi=False) == "\x1b[1;31mred\x1b[0m \x1b[38;5;208mor\x1b[m!"


def test_clean_transcript_keeps_sgr_through_carriage_return_overwrites() -> None:
    raw = b"\x1b[32m 10%\x1b[0m\r\x1b[32m100%\x1b[0m\r\n"
    # SGR is zero-width: each rides on the next character written, in stream order
    assert clean_transcript(raw, strip_ansi=False) == "\x1b[0m\x1b[32m100%\x1b[0m\n"


def test_clean_transcript_keeps_wide_characters_and_emoji() -> None:
    text = "中文 😀 👨\u200d👩\u200d👧 e\u0301 ❤\ufe0f"
    assert clean_transcript(text.encode() + b"\r\n") == text + "\n"


def test_clean_transcript_replaces_invalid_utf8() -> None:
    assert clean_transcript(b"a\xffb\xc3(c") == "a\ufffdb\ufffd(c"


def test_clean_transcript_drops_characters_cut_by_the_slice() -> None:
    data = "中文".encode()
    assert clean_transcript(data[1:]) == "文"
    assert clean_transcript(data[:-1]) == "中"


def test_clean_transcript_drops_unterminated_sequences_at_the_end() -> None:
    assert clean_transcript(b"hello\x1b[3") == "hello"
    assert clean_transcript(b"hello\x1b") == "hello"
    assert clean_transcript(b"hello\x1b]52;c;c2VjcmV0") == "hello"
    assert clean_transcript(b"hello\x1bPq#0;2", strip_ansi=False) == "hello"


def test_clean_transcript_drops_string_tails_when_sliced_mid_sequence() -> None:
    assert clean_transcript(b"7;sb;n0nce;E;0\x07$ ls\r\n") == "$ ls\n"
    assert clean_transcript(b"2;c2VjcmV0IGNsaXBib2FyZA==\x1b\\after") == "after"
    assert clean_transcript(b"m some text") == "m some text"  # a CSI tail is just text
    assert clean_transcript(b";5Hx\x1b[0m") == ";5Hx"


def test_clean_transcript_survives_binary_input() -> None:
    data = random.Random(7).randbytes(1 << 20)
    text = clean_transcript(data)
    assert isinstance(text, str)
    assert not set(text) & (set(map(chr, range(0x20))) - {"\t", "\n"})
    assert clean_transcript(data, strip_ansi=False).count("\x1b") <= data.count(ESC)


def test_complete_prefix_stops_before_unfinished_sequences() -> None:
    assert complete_prefix(b"abc") == 3
    assert complete_prefix(b"abc\x1b") == 3
    assert complete_prefix(b"abc\x1b[1;") == 3
    assert complete_prefix(b"abc\x1b[1;2H") == 9
    assert complete_prefix(b"abc\x1b]0;tit") == 3
    assert complete_prefix(b"abc\x1b]0;title\x07") == 13
    assert complete_prefix("ab中".encode()[:-1]) == 2


# -- TerminalScreen / ScreenModel ------------------------------------------------------------


@pytest.mark.parametrize("mode", [b"1049", b"47", b"1047"])
def test_alternate_screen_restores_main_screen_contents(mode: bytes) -> None:
    model = screen_of(b"first line\r\nsecond \x1b[1mline\x1b[m\r\n$ ")
    before = model.snapshot()
    model.feed(b"\x1b[?" + mode + b"h\x1b[H\x1b[2Jfull screen app\x1b[4;3Hxx")
    inside = model.snapshot()
    assert inside.alternate_screen
    assert inside.lines[0] == "full screen app"
    assert "first line" not in inside.content
    model.feed(b"\x1b[?" + mode + b"l")
    after = model.snapshot()
    assert not after.alternate_screen
    assert after.lines == before.lines
    if mode == b"1049":  # 1049 also restores the cursor; 47/1047 leave it (as xterm does)
        assert (after.cursor_row, after.cursor_col) == (before.cursor_row, before.cursor_col)


def test_alternate_screen_survives_resize_and_reset() -> None:
    model = screen_of(b"main\r\n\x1b[?1049hALT")
    model.resize(4, 10)
    model.feed(b"\x1b[?1049l")
    assert model.snapshot().lines[0] == "main"
    model.feed(b"\x1b[?1049h\x1bc")  # RIS leaves the alternate screen
    assert not model.snapshot().alternate_screen


def test_set_alternate_switches_mode_for_mid_stream_replay() -> None:
    model = ScreenModel(4, 10)
    model.set_alternate(True)
    model.feed(b"app")
    assert model.snapshot().alternate_screen
    model.feed(b"\x1b[?1049l")
    assert model.snapshot() == ScreenModel(4, 10).snapshot()


def test_wide_characters_take_two_cells_and_appear_once() -> None:
    model = screen_of("中文😀x".encode())
    snap = model.snapshot()
    assert snap.lines[0] == "中文😀x"
    assert snap.cursor_col == 7


def test_wide_character_wraps_when_one_column_is_left() -> None:
    assert lines_of(b"x" * 19 + "中y".encode())[:2] == ["x" * 19, "中y"]


def test_overwriting_half_a_wide_character_blanks_the_other_half() -> None:
    assert lines_of("中文".encode() + b"\x1b[1;2Hab")[0] == " ab"


def test_zero_width_characters_do_not_drop_the_rest_of_the_run() -> None:
    text = "e\u0301t\u00e9 👨\u200d👩 ❤\ufe0f and more"
    assert lines_of(text.encode(), cols=40)[0] == text


def test_combining_mark_after_a_wide_character_joins_it() -> None:
    assert lines_of("中\u0301a".encode())[0] == "中\u0301a"


def test_title_comes_from_osc_0_and_2_only() -> None:
    model = screen_of(b"\x1b]0;first\x07")
    assert model.snapshot().title == "first"
    model.feed(b"\x1b]2;second\x1b\\\x1b]777;sb;x;P\x07\x1b]1;icon\x07\x1b]22;pointer\x07")
    assert model.snapshot().title == "second"
    model.feed(b"\x1b[22;0t\x1b]2;vim\x07")
    assert model.snapshot().title == "vim"
    model.feed(b"\x1b[23;0t")
    assert model.snapshot().title == "second"


def test_string_payloads_never_reach_the_screen() -> None:
    data = (
        b"a\x1bPq#0;2;0;0;0#1!10~-\x1b\\b\x1b_Gf=100;payload\x1b\\c"
        b"\x1b^pm text\x1b\\d\x1bXsos\x1b\\e\x1b]52;c;c2VjcmV0\x07f\x1b]777;sb;n;S\x07g"
    )
    assert lines_of(data)[0] == "abcdefg"


def test_sequences_pyte_misparses_leave_no_text_behind() -> None:
    data = (
        b"\x1b[>4;1m\x1b[!p\x1b[4:3m\x1b[<u\x1b[=1u\x1b[?u\x1b[1;2;3A\x1b[ q\x1b%G"
        b"\x1b[?6n\x1b[?0m\x1b[5J\x1b[7K\x1b[?3h\x1b[22;0;0t\x1b F\x1b*0\xc2\x9dok\x1b[2;10s"
    )
    model = screen_of(data, cols=40)
    assert model.snapshot().lines[0] == "ok"
    assert model.snapshot().cols == 40  # DECCOLM is ignored


def test_queries_are_never_answered_by_the_screen() -> None:
    model = ScreenModel(4, 10)
    calls: list[str] = []
    model.screen.write_process_input = calls.append  # type: ignore[method-assign]
    model.feed(b"\x1b[6n\x1b[5n\x1b[c\x1b[>c\x1b[?6h\x1b[5d\x1b[6n")
    assert calls == []
    assert model.parse_errors == 0


def test_terminal_screen_write_process_input_is_a_no_op() -> None:
    assert TerminalScreen(10, 4).write_process_input("\x1b[1;1R") is None


@pytest.mark.parametrize("size", [1, 2, 3, 7])
def test_sequences_split_across_feeds_are_handled(size: int) -> None:
    data = (
        "x\x1b[1;31mred\x1b[0m\x1b]0;a title\x07\x1bPpayload\x1b\\中文\r\n"
        "\x1b[?1049h\x1b[2;3Halt\x1b[?1049l\x1b_apc\x1b\\e\u0301 done\x1b[2D!"
    ).encode()
    model = ScreenModel(6, 20)
    for i in range(0, len(data), size):
        model.feed(data[i : i + size])
    assert model.snapshot() == screen_of(data).snapshot()
    assert model.snapshot().lines[:2] == ["xred中文", "e\u0301 do!e"]


def test_dec_line_drawing_charset_is_honoured() -> None:
    assert lines_of(b"\x1b(0lqqk\x1b(B x")[0] == "┌──┐ x"


def test_repeat_and_scroll_sequences_pyte_lacks() -> None:
    assert lines_of(b"-\x1b[4b|")[0] == "-----|"
    assert lines_of(b"1\r\n2\r\n3\x1b[1S")[:3] == ["2", "3", ""]
    assert lines_of(b"1\r\n2\x1b[1T")[:3] == ["", "1", "2"]
    assert lines_of(b"ab\x1b[sxy\x1b[uZ")[0] == "abZy"


def test_resize_keeps_the_cursor_line_visible() -> None:
    model = screen_of(b"".join(b"line %d\r\n" % i for i in range(6)) + b"$ ", rows=8)
    model.resize(3, 10)
    snap = model.snapshot()
    assert snap.lines == ["line 4", "line 5", "$"]
    assert (snap.cursor_row, snap.cursor_col, snap.rows, snap.cols) == (2, 2, 3, 10)


def test_snapshot_content_and_cursor_report() -> None:
    model = screen_of(b"a  \r\n\r\nb\x1b[2;5H")
    snap = model.snapshot()
    assert snap.lines == ["a", "", "b", "", "", ""]
    assert snap.content == "a\n\nb"
    assert model.cursor_report() == b"\x1b[2;5R"
    model.feed(b"\x1b[1;1H" + b"x" * 20)  # waiting to wrap: reported in the last column
    assert model.cursor_report() == b"\x1b[1;20R"


def test_application_cursor_mode_is_exposed() -> None:
    model = screen_of(b"\x1b[?1h\x1b=")
    assert model.application_cursor
    model.feed(b"\x1b[?1l")
    assert not model.application_cursor


def test_screen_model_survives_random_bytes_and_sequences() -> None:
    rng = random.Random(3)
    pieces = [b"\x1b[", b"\x1b]", b"\x1bP", b"\x1b", b";", b"?", b">", b"\x07", b"\x9c", b"\r"]
    pieces += [bytes([c]) for c in b"0123456789ABCDEFGHJKLMPSTXZ@`abcdfghlmnrstu[]()#%\\"]
    pieces += ["中".encode(), "\u0301".encode(), b"\xc2\x9b", b"\xff", b"\n", b"\x0e", b"\x0f"]
    model = ScreenModel(10, 30)
    for _ in range(200):
        chunk = b"".join(rng.choice(pieces) for _ in range(rng.randrange(1, 300)))
        model.feed(chunk + rng.randbytes(rng.randrange(0, 50)))
    model.resize(5, 12)
    model.feed(rng.randbytes(5000))
    snap = model.snapshot()
    assert model.parse_errors == 0
    assert len(snap.lines) == 5
    assert all(len(line) <= 12 * 17 for line in snap.lines)


# -- golden streams ----------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(p.stem for p in CAPTURED.glob("*.input")))
def test_golden_stream_matches_reference_terminal(name: str) -> None:
    """Recorded with tests/unit/captured/record.py; tmux's screen is the reference."""
    expected = json.loads((CAPTURED / f"{name}.expected").read_text())
    model = ScreenModel(expected["rows"], expected["cols"])
    model.feed((CAPTURED / f"{name}.input").read_bytes())
    snap = model.snapshot()
    assert snap.lines == expected["lines"]
    assert [snap.cursor_row, snap.cursor_col] == expected["cursor"]
    assert snap.alternate_screen == expected["alternate_screen"]
    assert model.parse_errors == 0


def test_there_are_golden_streams() -> None:
    assert len(list(CAPTURED.glob("*.input"))) >= 2


# -- StreamScanner ---------------------------------------------------------------------------


def test_scanner_finds_queries() -> None:
    scanner = StreamScanner()
    chunk = b"a\x1b[6nb\x1b[?6n\x1b[c\x1b[0c\x1b[>c\x1b[>0c\x1b[5n\x1b[16n\x1b[?62c"
    assert scanner.scan(chunk, 0).queries == ["cpr", "cpr", "da1", "da1", "da2", "da2"]
    assert DA1_REPLY == b"\x1b[?62;22c"
    assert DA2_REPLY == b"\x1b[>0;10;1c"


def test_scanner_finds_queries_split_across_chunks_exactly_once() -> None:
    data = b"x" * 50 + b"\x1b[6n" + b"y" * 30 + b"\x1b[>0c" + b"z" * 10
    for cut in range(1, len(data)):
        for second in range(cut + 1, len(data) + 1, 7):
            scanner = StreamScanner()
            parts = [data[:cut], data[cut:second], data[second:]]
            found: list[str] = []
            offset = 0
            for part in parts:
                found += scanner.scan(part, offset).queries
                offset += len(part)
            assert found == ["cpr", "da2"], (cut, second)


def test_scanner_records_restart_points_and_mode() -> None:
    scanner = StreamScanner()
    first = b"hello\r\n\x1b[?1049h"
    assert scanner.scan(first, 100).queries == []
    assert (scanner.restart_offset, scanner.restart_alternate) == (100 + len(first), True)
    assert scanner.alternate
    scanner.scan(b"\x1b[H\x1b[2Jdraw", 100 + len(first))
    assert scanner.restart_offset == 100 + len(first) + 7
    assert scanner.restart_alternate
    scanner.scan(b"\x1b[?1", 200)
    scanner.scan(b"049l$ ", 204)
    assert (scanner.restart_offset, scanner.alternate) == (208, False)
    scanner.scan(b"\x1b[?47h", 300)
    assert scanner.alternate
    scanner.scan(b"\x1bc", 306)
    assert (scanner.restart_offset, scanner.restart_alternate, scanner.alternate) == (
        308,
        False,
        False,
    )
    assert scanner.alternate_at(205) is True
    assert scanner.alternate_at(250) is False


def test_scanner_tracks_title_and_application_cursor() -> None:
    scanner = StreamScanner()
    scanner.scan(b"\x1b]0;user@box: ~\x07\x1b[?1h\x1b=", 0)
    assert scanner.title == "user@box: ~"
    assert scanner.application_cursor
    scanner.scan(b"\x1b[?1l\x1b[22;0t\x1b]2;vim\x07", 40)
    assert not scanner.application_cursor
    assert scanner.title == "vim"
    scanner.scan(b"\x1b[23;0t", 80)
    assert scanner.title == "user@box: ~"


def test_scanner_drops_its_carry_when_offsets_jump() -> None:
    scanner = StreamScanner()
    scanner.scan(b"abc\x1b[6", 0)
    assert scanner.scan(b"n", 1000).queries == []


# -- LazyScreen --------------------------------------------------------------------------------


class Log:
    """A growing byte log with a scanner fed as the reader thread would, and read accounting."""

    def __init__(self) -> None:
        self.data = bytearray()
        self.scanner = StreamScanner()
        self.read_bytes = 0

    def append(self, chunk: bytes, size: int = 65536) -> None:
        for i in range(0, len(chunk), size):
            piece = chunk[i : i + size]
            self.scanner.scan(piece, len(self.data))
            self.data += piece

    def read(self, start: int, stop: int) -> bytes:
        self.read_bytes += max(0, stop - start)
        return bytes(self.data[start:stop])

    def catch_up(self, screen: LazyScreen) -> None:
        screen.catch_up(len(self.data), self.read, self.scanner)


def numbered_lines(count: int, start: int = 0) -> bytes:
    return b"".join(b"output line %08d with some padding text\r\n" % i for i in range(start, count))


def test_lazy_screen_parses_nothing_until_asked() -> None:
    log = Log()
    screen = LazyScreen(24, 80)
    log.append(b"$ echo hi\r\nhi\r\n$ ")
    assert screen.fed_upto == 0
    log.catch_up(screen)
    assert screen.fed_upto == len(log.data)
    assert screen.snapshot().lines[:3] == ["$ echo hi", "hi", "$"]
    assert screen.cursor_report() == b"\x1b[3;3R"


def test_lazy_screen_after_10mb_then_alternate_redraw_shows_the_redraw() -> None:
    log = Log()
    screen = LazyScreen(24, 80)
    log.append(numbered_lines(10 * 1024 * 1024 // 48))
    redraw = b"\x1b[?1049h\x1b[H\x1b[2J" + b"".join(
        b"\x1b[%d;1Hrow %02d of the full screen app" % (r + 1, r) for r in range(24)
    )
    log.append(redraw)
    log.catch_up(screen)
    snap = screen.snapshot()
    assert snap.alternate_screen
    assert snap.lines == [f"row {r:02d} of the full screen app" for r in range(24)]
    assert log.read_bytes <= screen.backlog_limit


def test_lazy_screen_replays_only_the_tail_from_a_line_start() -> None:
    log = Log()
    data = numbered_lines(200_000)
    log.append(data)
    screen = LazyScreen(10, 60, backlog_limit=8192)
    log.catch_up(screen)
    full = ScreenModel(10, 60)
    full.feed(data[-20_000:])
    assert screen.snapshot() == full.snapshot()
    assert log.read_bytes <= 8192


def test_lazy_screen_skips_alternate_sessions_and_restores_the_main_screen() -> None:
    log = Log()
    screen = LazyScreen(6, 40, backlog_limit=4096)
    log.append(numbered_lines(1000) + b"$ vim\r\n")
    log.append(b"\x1b[?1049h\x1b[H\x1b[2J" + b"~ lots of editing\r\n" * 100_000)
    log.append(b"\x1b[?1049l$ echo done\r\ndone\r\n$ ")
    log.catch_up(screen)
    snap = screen.snapshot()
    assert not snap.alternate_screen
    assert snap.lines == [
        "output line 00000999 with some padding t",
        "ext",
        "$ vim",
        "$ echo done",
        "done",
        "$",
    ]
    assert log.read_bytes <= 4096


def test_lazy_screen_keeps_title_and_cursor_keys_across_a_replay() -> None:
    log = Log()
    screen = LazyScreen(4, 40, backlog_limit=1024)
    log.append(b"\x1b]2;my window\x07\x1b[?1h" + numbered_lines(2000))
    log.catch_up(screen)
    assert screen.snapshot().title == "my window"
    assert screen.application_cursor


def test_lazy_screen_feeds_incrementally_when_close_behind() -> None:
    log = Log()
    screen = LazyScreen(4, 40)
    for i in range(50):
        log.append(b"tick %d\r\n" % i)
        log.catch_up(screen)
    assert screen.snapshot().lines[-2] == "tick 49"
    assert log.read_bytes == len(log.data)


def test_lazy_screen_resize_delegates() -> None:
    screen = LazyScreen(4, 40)
    screen.resize(10, 100)
    snap = screen.snapshot()
    assert (snap.rows, snap.cols) == (10, 100)

"""The marker tracker alone: golden byte streams a real shell printed, replayed in chunks of
every size, give the same events and the same command boundaries; and the cases a recording
cannot show on demand (a forged ready marker, a lost protocol, an adopted shell)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from sandbox.shell.markers import MARKER_PREFIX
from sandbox.shell.tracker import (
    CommandEnded,
    CommandStarted,
    CommandTracker,
    PromptDrawn,
    ShellEvent,
    ShellExited,
    ShellReady,
    unfinished_command,
)

CAPTURED = Path(__file__).parent / "captured" / "markers"
BEL = b"\x07"


def marker(body: str) -> bytes:
    return MARKER_PREFIX + body.encode() + BEL


def as_json(event: ShellEvent) -> dict[str, Any]:
    fields = {
        k: v.decode("utf-8", "replace") if isinstance(v, bytes) else v
        for k, v in dataclasses.asdict(event).items()
    }
    return {"type": type(event).__name__, **fields}


def replay(name: str, chunk: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    data = (CAPTURED / f"{name}.input").read_bytes()
    expected = json.loads((CAPTURED / f"{name}.expected").read_text())
    tracker = CommandTracker()
    tracker.new_shell(expected["token"], adopted=None)
    events: list[ShellEvent] = []

    def feed(start: int, stop: int) -> None:
        for at in range(start, stop, chunk):
            events.extend(tracker.feed(data[at : min(at + chunk, stop)], at))

    typed = expected["typed"]
    feed(0, typed[0]["offset"])
    commands = []
    for t, stop in zip(typed, [u["offset"] for u in typed[1:]] + [len(data)], strict=True):
        p = tracker.begin(t["nonce"], sent_offset=t["offset"], display=t["display"].encode())
        feed(t["offset"], stop)
        fields = ("start", "end", "exit_code", "newlines")
        commands.append({f: getattr(p, f) for f in fields})
    return [as_json(e) for e in events], commands


@pytest.mark.parametrize("chunk", [1, 2, 5, 13, 64, 4096, 1 << 20])
def test_a_recorded_shell_stream_gives_the_same_events_in_chunks_of_any_size(chunk: int) -> None:
    expected = json.loads((CAPTURED / "shell_markers.expected").read_text())
    events, commands = replay("shell_markers", chunk)
    assert events == expected["events"]
    assert commands == expected["commands"]


def test_the_recorded_stream_shows_exit_codes_an_interrupt_and_the_shells_own_exit() -> None:
    events, commands = replay("shell_markers", 4096)
    ended = [e["status"] for e in events if e["type"] == "CommandEnded"]
    assert ended == [0, 1, 0, 3, 130, 0]  # the forged end marker (status 5) was ignored
    exits = [e["status"] for e in events if e["type"] == "ShellExited"]
    assert exits == [4]  # the forged exit marker (9, a wrong token) was ignored
    assert commands[-1]["end"] is None  # `exit 4` never ended as a command


def test_a_ready_or_exit_marker_without_the_shells_token_is_a_forgery() -> None:
    tracker = CommandTracker()
    tracker.new_shell("cafe", adopted=None)
    assert tracker.feed(marker("ready;666;beef") + marker("exit;3;beef"), 0) == []
    assert tracker.shell_pid is None
    assert tracker.exit_marker is None
    assert tracker.feed(marker("ready;42;cafe"), 100) == [ShellReady(42)]
    assert tracker.feed(marker("ready;43;cafe"), 200) == []  # only the first counts
    assert tracker.shell_pid == 42


def test_output_and_its_newlines_are_bounded_by_the_commands_own_markers() -> None:
    now = [10.0]
    tracker = CommandTracker(clock=lambda: now[0])
    p = tracker.begin("n1", sent_offset=0, display=b"ls\r\n")
    echo = b" __sb_s n1; eval $'ls'\r\n"
    started = marker("n1;S;77")
    out = b"a\r\nb\r\n"
    data = echo + started + out + marker("zz;E;9") + marker("n1;E;2") + marker("P")
    events = tracker.feed(data, 0)
    start = len(echo) + len(started)
    end = start + len(out) + len(marker("zz;E;9"))
    assert events == [
        CommandStarted(0, len(echo), b"ls\r\n"),
        CommandEnded(2, end),
        PromptDrawn(len(data)),
    ]
    assert (p.start, p.end, p.exit_code, p.newlines) == (start, end, 2, 2)
    assert p.prompt_end == len(data)
    assert tracker.start_pid_of(p) == 77
    assert tracker.last_exit_code == 2
    assert not tracker.running


def test_a_prompt_without_the_end_marker_marks_the_protocol_lost_at_its_offset() -> None:
    now = [5.0]
    tracker = CommandTracker(clock=lambda: now[0])
    tracker.begin("n1", sent_offset=100, display=b"exec >/dev/null\r\n")
    tracker.feed(b"x" * 10 + marker("P"), 100)
    assert (tracker.lost_since, tracker.lost_prompt) == (5.0, 110)
    assert tracker.running


def test_output_while_no_command_runs_is_counted_once() -> None:
    tracker = CommandTracker()
    tracker.feed(b"x" * 3000, 0)
    tracker.feed(b"y" * 2000, 3000)
    assert tracker.take_idle_bytes() == 5000
    assert tracker.take_idle_bytes() == 0


def test_an_adopted_shell_resumes_the_command_the_log_left_unfinished() -> None:
    log = marker("a1;S;5") + b"done\r\n" + marker("a1;E;0") + marker("b2;S;9") + b"first\r\nsecond"
    p = unfinished_command(log, 1000, sent_at=0.0)
    assert p is not None
    assert p.nonce == "b2"
    assert (p.start, p.newlines) == (1000 + log.index(b"first"), 1)
    tracker = CommandTracker()
    tracker.new_shell(None, adopted=(321, p))
    assert tracker.shell_pid == 321
    assert tracker.running
    tail = b"\r\n" + marker("b2;E;0")
    assert tracker.feed(tail, 1000 + len(log))[-1] == CommandEnded(0, 1000 + len(log) + 2)
    assert unfinished_command(log[: log.index(marker("b2;S;9"))], 0, sent_at=0.0) is None


def test_a_shell_exit_marker_with_the_token_is_reported() -> None:
    tracker = CommandTracker()
    tracker.new_shell("cafe", adopted=None)
    assert tracker.feed(marker("exit;4;cafe"), 0) == [ShellExited(4)]
    assert tracker.exit_marker == 4

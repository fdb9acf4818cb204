"""The asciicast recorder: every output event is the line ``json.dumps`` would write, whether
the chunk took the plain-ASCII path or the decoder's, and the events joined are the output
decoded, also when a UTF-8 character or an escape is split across chunks."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from sandbox.terminal.recording import CastRecorder

CHUNKS = [
    b"plain base64 line QUJD/+==\r\n",
    b'quotes " and backslash \\ and tab \t and bell \x07',
    b"\x1b[1;31mred\x1b[0m\r\n",
    "caf\u00e9 \u2603 \U0001f600\r\n".encode(),
    b"\x7f del and \x00 nul",
    b"bad \xff\xfe bytes",
]


def _events(path: Path) -> list[list[object]]:
    lines = path.read_text(encoding="utf-8").splitlines()
    assert json.loads(lines[0])["version"] == 2
    return [json.loads(line) for line in lines[1:]]


def _record(tmp_path: Path, chunks: list[bytes]) -> Path:
    path = tmp_path / "s.cast"
    rec = CastRecorder(path, rows=24, cols=80, max_bytes=1 << 30)
    for chunk in chunks:
        rec.output(chunk)
    rec.close()
    return path


@pytest.mark.parametrize("chunk", CHUNKS)
def test_each_event_line_is_what_json_dumps_writes(tmp_path: Path, chunk: bytes) -> None:
    path = _record(tmp_path, [chunk])
    for line in path.read_text(encoding="utf-8").splitlines()[1:]:
        t, kind, text = json.loads(line)
        assert line == json.dumps([t, kind, text])


def test_output_split_anywhere_joins_to_the_decoded_bytes(tmp_path: Path) -> None:
    data = b"".join(CHUNKS * 20)
    rnd = random.Random(7)
    cuts = sorted(rnd.sample(range(1, len(data)), 150))
    chunks = [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True)]
    events = _events(_record(tmp_path, chunks))
    assert all(kind == "o" for _, kind, _ in events)
    assert "".join(str(text) for _, _, text in events) == data.decode("utf-8", "replace")


def test_a_plain_chunk_after_a_partial_character_goes_through_the_decoder(
    tmp_path: Path,
) -> None:
    snowman = "\u2603".encode()
    chunks = [b"a" + snowman[:2], b"plain", b"b" + snowman[:1], snowman[1:], b"end"]
    events = _events(_record(tmp_path, chunks))
    assert "".join(str(text) for _, _, text in events) == b"".join(chunks).decode(
        "utf-8", "replace"
    )


def test_resize_events_keep_their_form(tmp_path: Path) -> None:
    path = tmp_path / "s.cast"
    rec = CastRecorder(path, rows=24, cols=80, max_bytes=1 << 30)
    rec.resize(40, 120)
    rec.close()
    (event,) = _events(path)
    assert event[1:] == ["r", "120x40"]

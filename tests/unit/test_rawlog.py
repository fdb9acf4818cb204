"""The raw log: offsets, tail reads, file reads, reopening, and the size cap."""

from __future__ import annotations

from pathlib import Path

from sandbox.terminal.rawlog import DROPPED_NOTICE, RawLog


def test_offsets_and_reads_from_tail_and_file(tmp_path: Path) -> None:
    log = RawLog(tmp_path / "raw.log", max_bytes=10**9, tail_bytes=1000)
    chunks = [bytes([65 + i % 26]) * 300 for i in range(20)]
    offsets = [log.append(c) for c in chunks]
    assert offsets == [300 * i for i in range(20)]
    assert log.size == 6000
    assert log.read(0, 300) == chunks[0]  # from the file
    assert log.read(5700, 6000) == chunks[-1]  # from the tail
    assert log.read(290, 310) == chunks[0][-10:] + chunks[1][:10]
    assert log.read(5990, 10**6) == chunks[-1][-10:]
    log.close()


def test_reopened_log_continues_at_its_end(tmp_path: Path) -> None:
    path = tmp_path / "raw.log"
    log = RawLog(path, max_bytes=10**9)
    log.append(b"hello ")
    log.close()
    again = RawLog(path, max_bytes=10**9)
    assert again.append(b"world") == 6
    assert again.read(0, 100) == b"hello world"


def test_cap_stops_the_file_but_offsets_keep_counting(tmp_path: Path) -> None:
    log = RawLog(tmp_path / "raw.log", max_bytes=1000, tail_bytes=100)
    for _ in range(30):
        log.append(b"x" * 100)
    assert log.size == 3000
    assert (tmp_path / "raw.log").stat().st_size == 1000 + len(DROPPED_NOTICE)
    assert log.read(2900, 3000) == b"x" * 100


def test_any_range_reads_exactly_what_was_written(tmp_path: Path) -> None:
    import random

    rng = random.Random(7)
    log = RawLog(tmp_path / "raw.log", max_bytes=10**9, tail_bytes=4096)
    written = b""
    for _ in range(300):
        chunk = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 200)))
        log.append(chunk)
        written += chunk
    for _ in range(2000):
        a = rng.randrange(len(written) + 5)
        b = rng.randrange(a, len(written) + 50)
        assert log.read(a, b) == written[a:b], (a, b)
    log.close()

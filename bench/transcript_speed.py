"""Speed of the terminal output pipeline's pure parts on typical terminal output.

Run: ``.venv/bin/python bench/transcript_speed.py``. Prints MB/s of ``clean_transcript`` per input
kind (target for plain text with ``\\r\\n`` line endings, what a TTY delivers: >= 50 MB/s), of
``StreamScanner.scan`` over 64 KiB chunks (it runs in every reader thread; compare with the
13-21 MB/s a TTY exec socket delivers), and the time of a ``LazyScreen`` snapshot right after
10 MB of output (target < 100 ms).
"""

from __future__ import annotations

import os
import time

from sandbox.terminal.stream import LazyScreen, StreamScanner
from sandbox.terminal.transcript import clean_transcript


def _rate(data: bytes, *, strip_ansi: bool = True, repeat: int = 5) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        clean_transcript(data, strip_ansi=strip_ansi)
        best = min(best, time.perf_counter() - start)
    return len(data) / best / 1e6


def main() -> None:
    line = b"2024-05-01 12:00:00 INFO worker-3 processed request id=12345 in 3.2 ms\r\n"
    plain = line * (16 * 1024 * 1024 // len(line))
    colour = (b"\x1b[01;34mdir\x1b[0m  \x1b[01;32mscript.sh\x1b[0m  file.txt\r\n") * (
        8 * 1024 * 1024 // 44
    )
    progress = b"".join(
        b"\rdownloading %3d%% [%-50s]" % (i % 101, b"#" * (i % 51)) for i in range(50_000)
    )
    binary = os.urandom(1024 * 1024)
    cases = [
        ("plain ascii, \\r\\n lines (target >= 50 MB/s)", plain, True),
        ("ls --color style, strip_ansi=True", colour, True),
        ("ls --color style, strip_ansi=False", colour, False),
        ("one long \\r progress line", progress, True),
        ("1 MiB of /dev/urandom", binary, True),
    ]
    for name, data, strip in cases:
        print(f"{_rate(data, strip_ansi=strip):8.1f} MB/s  {name} ({len(data) / 1e6:.1f} MB)")
    for name, data in [("plain", plain), ("ls --color style", colour), ("urandom", binary)]:
        scanner = StreamScanner()
        start = time.perf_counter()
        for offset in range(0, len(data), 65536):
            scanner.scan(data[offset : offset + 65536], offset)
        rate = len(data) / (time.perf_counter() - start) / 1e6
        print(f"{rate:8.1f} MB/s  StreamScanner.scan, 64 KiB chunks, {name}")
    log = plain[: 10 * 1024 * 1024] + b"\x1b[?1049h\x1b[H\x1b[2J" + colour[:20000]
    scanner = StreamScanner()
    for offset in range(0, len(log), 65536):
        scanner.scan(log[offset : offset + 65536], offset)
    screen = LazyScreen(24, 80)
    start = time.perf_counter()
    screen.catch_up(len(log), lambda a, b: log[a:b], scanner)
    screen.snapshot()
    elapsed = (time.perf_counter() - start) * 1000
    print(f"{elapsed:8.1f} ms    LazyScreen catch_up + snapshot after 10 MB (target < 100 ms)")
    log = plain[: 10 * 1024 * 1024]
    screen = LazyScreen(24, 80)
    start = time.perf_counter()
    screen.catch_up(len(log), lambda a, b: log[a:b], StreamScanner())
    screen.snapshot()
    elapsed = (time.perf_counter() - start) * 1000
    print(f"{elapsed:8.1f} ms    same, 10 MB of lines with no restart point")


if __name__ == "__main__":
    main()

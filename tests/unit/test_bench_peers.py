"""The bench's peer column and the peers' wire protocol, without Docker.

The protocol test runs a real driver-side ``serve`` loop in a subprocess (this interpreter,
not a peer's venv) and talks to it the way ``PeerProcess`` does.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

from bench.peers.install import HERE
from bench.stats import Row, best_peer, table


def _rows() -> list[Row]:
    ours = Row("peers", "`true` round trip (ours)", "ms", samples=[1.0, 1.2])
    return [
        ours,
        Row("peers", "`true` round trip: A", "ms", role="peer", samples=[9.0], peer_of=ours.name),
        Row("peers", "`true` round trip: B", "ms", role="peer", samples=[4.0], peer_of=ours.name),
        Row("peers", "unrelated: C", "ms", role="peer", samples=[0.5]),
    ]


def test_best_peer_is_the_fastest_peer_measured_against_the_row() -> None:
    rows = _rows()
    best = best_peer(rows[0], rows)
    assert best is not None
    assert best.name == "`true` round trip: B"
    assert best_peer(rows[1], rows) is None


def test_the_table_gains_a_best_peer_column_only_when_peers_were_measured() -> None:
    rows = _rows()
    text = table(rows)
    assert "best peer" in text.splitlines()[0]
    ours_line = next(ln for ln in text.splitlines() if ln.startswith("peers") and "(ours)" in ln)
    assert ours_line.rstrip().endswith("B 4.00 ms")
    assert "best peer" not in table(rows[:1])


def test_peer_rows_carry_what_they_are_measured_against_in_the_json() -> None:
    rows = _rows()
    assert rows[1].to_json()["peer_of"] == rows[0].name
    assert rows[0].to_json()["peer_of"] is None


DRIVER = """
    import sys
    sys.path.insert(0, {here!r})
    from protocol import serve
    serve(lambda: None, {{"true": lambda r: 1.5, "repl": lambda r: "no prompt here",
                          "bad": lambda r: 1 / 0}}, lambda: print("stopped"))
"""


def test_a_driver_answers_times_skips_and_errors_one_line_each(tmp_path: Path) -> None:
    script = tmp_path / "driver.py"
    script.write_text(textwrap.dedent(DRIVER.format(here=str(HERE))))
    requests = [{"op": op} for op in ("true", "repl", "bad", "screen")]
    proc = subprocess.run(
        [sys.executable, str(script)],
        input="".join(json.dumps(r) + "\n" for r in requests),
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    replies = [json.loads(line) for line in proc.stdout.splitlines()]
    assert replies[0] == {"ready": True}
    assert replies[1] == {"ms": 1.5}
    assert replies[2] == {"skip": "no prompt here"}
    assert replies[3]["error"].startswith("ZeroDivisionError")
    assert replies[4] == {"skip": "no screen in this peer"}
    assert "stopped" in proc.stderr  # the peer's own prints never reach the protocol

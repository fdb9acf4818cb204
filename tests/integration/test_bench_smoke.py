"""``python -m bench --smoke`` runs every figure against a real engine, so the bench cannot rot.

It checks only that the run succeeds and reports every figure: never a time (speed is judged by
the full bench, on a quiet machine, as ratios to floors measured in the same run).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench.figures import FIGURES
from sandbox.config import LABEL_MANAGED

pytestmark = pytest.mark.docker

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(240)
def test_bench_smoke_runs_every_figure_and_cleans_up(docker_client: object, tmp_path: Path) -> None:
    out = tmp_path / "smoke.json"
    proc = subprocess.run(
        [sys.executable, "-m", "bench", "--smoke", "--json", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=200,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["mode"] == "smoke"
    assert set(report["figures"]) == set(FIGURES)
    for name, figure in report["figures"].items():
        # mcp may be skipped (with its reason) while the server is being written
        assert figure["status"] in ("ok", "skipped"), (name, figure["error"])
        assert figure["rows"], name
        if figure["status"] == "ok":
            assert any(r["role"] == "result" and r["n"] > 0 for r in figure["rows"]), name
        else:
            assert figure["error"], name
    assert all(r["met"] is None for f in report["figures"].values() for r in f["rows"])
    owner = report["owner"]
    import docker

    assert isinstance(docker_client, docker.DockerClient)
    left = docker_client.containers.list(
        all=True, filters={"label": [f"{LABEL_MANAGED}=true", f"sandbox.owner={owner}"]}
    )
    assert left == []


@pytest.mark.timeout(240)
def test_bench_smoke_peers_measures_the_references_and_says_why_any_peer_is_missing(
    docker_client: object, tmp_path: Path
) -> None:
    from bench.figures.peers import FIGURES, RUNS

    out = tmp_path / "peers.json"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench",
            "--smoke",
            "--only",
            "execute",
            "--peers",
            "--json",
            str(out),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=200,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    figure = json.loads(out.read_text())["figures"]["peers"]
    assert figure["status"] == "ok", figure["error"]
    assert set(figure["params"]["peers"]) == {label for label, _, _ in RUNS}
    assert all(reason for reason in figure["params"]["peers"].values())
    ours = {r["name"] for r in figure["rows"] if r["role"] == "result"}
    assert len(ours) == len(FIGURES)
    # the bulk rows are measured against the same command into a pty on the host
    floors = {r["name"] for r in figure["rows"] if r["role"] == "floor"}
    bulk = [r for r in figure["rows"] if r["role"] == "result" and "base64," in r["name"]]
    bulk += [r for r in figure["rows"] if r["role"] == "result" and "base64 -w0" in r["name"]]
    assert len(bulk) == 2
    assert all(r["floor"] in floors and "host pty" in r["floor"] for r in bulk)
    peers = [r for r in figure["rows"] if r["role"] == "peer"]
    assert {r["peer_of"] for r in peers} <= ours
    assert any(r["name"].endswith("docker-py exec_run") for r in peers)
    assert "best peer" in proc.stdout

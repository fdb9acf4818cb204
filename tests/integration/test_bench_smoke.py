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

"""What the egress proxy costs: the same downloads through the proxy and on the full network.

"The outside" is local: a web server container (the session image running Python's
http.server) on a network of its own, under the alias ``big.test``, serving a file of
``size_mb`` MB. Two sessions download it with curl, samples interleaved so the machine's drift
hits both alike:

- ``full``: a session with ``network: true`` on that network (the floor);
- ``proxy``: a session with ``network: ["big.test"]`` behind the egress proxy (squid), by
  plain HTTP (squid forwards the request) and through a CONNECT tunnel (as HTTPS goes).

Figures: the download's rate (MB/s), a small request's round trip (ms: a new connection, the
proxy's authentication and allow-list check), and the proxy container's host memory.
"""

from __future__ import annotations

import secrets
import time
from typing import Any

from bench.context import Context, FigureSkipped
from bench.figures.common import open_session
from bench.figures.gvisor import host_rss_mib
from bench.stats import Row, compare
from sandbox.egress import names
from sandbox.session.session import Session

HOST = "big.test"


def run(ctx: Context) -> None:
    size_mb = ctx.size(100, 4)
    downloads = ctx.size(3, 1)
    trips = ctx.size(30, 3)
    ctx.params.update(size_mb=size_mb, downloads=downloads, round_trips=trips)
    env = ctx.env
    network, server = _outside(env, size_mb)
    try:
        with env.manager(network=network.name, egress_network=network.name) as manager:
            project = env.project("egress")
            if manager.backend.networks is None:
                raise FigureSkipped("this engine gives no egress allow-lists (Podman: not yet)")
            sessions = {
                "full": open_session(manager, project, network=True),
                "proxy": open_session(manager, project, network=[HOST]),
            }
            samples: dict[tuple[str, str], list[float]] = {}
            ctx.log(f"{size_mb} MB download x{downloads} per path")
            for _ in range(downloads):
                for path, session in sessions.items():
                    rate = size_mb / _curl(session, f"http://{HOST}/big", size_mb)
                    samples.setdefault(("download", path), []).append(rate)
                # CONNECT, as HTTPS goes: the proxy only relays the bytes
                tunnel = _curl(sessions["proxy"], f"-p http://{HOST}/big", size_mb)
                samples.setdefault(("download", "tunnel"), []).append(size_mb / tunnel)
            ctx.log(f"small request x{trips} per path")
            for _ in range(trips):
                for path, session in sessions.items():
                    ms = _curl(session, f"http://{HOST}/small", 0) * 1000
                    samples.setdefault(("request", path), []).append(ms)
            proxy = env.client.containers.get(names.proxy_name(env.owner))
            proxy_rss = host_rss_mib(proxy.id)
    finally:
        server.remove(force=True)
        network.remove()
    labels = {"download": (f"{size_mb} MB download", "MB/s"), "request": ("small request", "ms")}
    for what, (label, unit) in labels.items():
        floor = ctx.add(
            Row(
                ctx.figure,
                f"{label} (full network)",
                unit,
                role="floor",
                samples=samples[(what, "full")],
            )
        )
        row = ctx.add(
            Row(ctx.figure, f"{label} (egress proxy)", unit, samples=samples[(what, "proxy")])
        )
        compare(row, floor, higher_is_better=unit == "MB/s")
        if what == "download":
            tunnel = ctx.add(
                Row(
                    ctx.figure,
                    f"{label} (egress proxy, CONNECT tunnel)",
                    unit,
                    samples=samples[("download", "tunnel")],
                )
            )
            compare(tunnel, floor, higher_is_better=True)
    ctx.add(Row(ctx.figure, "egress proxy host memory", "MiB", role="info", samples=[proxy_rss]))


def _outside(env: Any, size_mb: int) -> tuple[Any, Any]:
    name = f"sandbox-bench-outside-{secrets.token_hex(3)}"
    network = env.client.networks.create(name, driver="bridge", labels=env.labels)
    script = (
        f"head -c {size_mb * 1024 * 1024} /dev/zero > /tmp/big && echo ok > /tmp/small "
        "&& cd /tmp && exec python3 -m http.server 80"
    )
    server = env.client.containers.create(
        "sandbox-session:latest",
        ["sh", "-c", script],
        name=name,
        labels=env.labels,
        user="0:0",
        network=name,
    )
    network.disconnect(server)
    network.connect(server, aliases=[HOST])
    server.start()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        probe = server.exec_run(["python3", "-c", _PROBE])
        if probe.exit_code == 0:
            return network, server
        time.sleep(0.2)
    server.remove(force=True)
    network.remove()
    raise RuntimeError("the bench's web server did not start")


_PROBE = "import urllib.request as u; u.urlopen('http://127.0.0.1/small')"


def _curl(session: Session, url: str, size_mb: int) -> float:
    """Seconds curl took to fetch ``url`` (checked to be ``size_mb`` MB when not 0)."""
    command = f"curl -sS -o /dev/null -w '%{{time_total}} %{{size_download}}' {url}"
    result = session.execute(command, timeout_s=300)
    if result.exit_code != 0 or result.timed_out:
        raise RuntimeError(f"{command!r} returned {result.model_dump()}")
    seconds, size = result.output.split()
    if size_mb and int(size) != size_mb * 1024 * 1024:
        raise RuntimeError(f"{url}: {size} bytes, not {size_mb} MB")
    return float(seconds)

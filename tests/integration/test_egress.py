"""Egress allow-lists against a real engine, with "the outside" made local (tests/outside.py).

A session allowed ``allowed.test`` reaches it with curl, Python's urllib and pip (through the
proxy its variables name), and over HTTPS sees the server's own certificate (the proxy only
tunnels TLS); everything else fails: ``denied.test`` (refused, with a message and
a log entry), the web server's address directly, any port, UDP, outside names. Two sessions
each get only their own hosts, a list changes live, and a proxy killed from outside comes back
without ever being bypassed.

docker_only: the Podman tier has not run these yet (its networks use netavark/aardvark-dns,
whose internal networks and DNS were not tried here); they stay Docker's until it has.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pip
import pytest

from sandbox.cli.doctor import run_checks
from sandbox.cli.inventory import print_egress_log
from sandbox.egress import names
from sandbox.errors import InvalidArgumentError
from sandbox.models import CreateRequest
from sandbox.session.manager import SessionManager
from tests.conftest import make_project
from tests.integration.conftest import RUN_OWNER, make_config
from tests.outside import PAGE, Outside, start_outside

pytestmark = [pytest.mark.docker, pytest.mark.docker_only]

CURL = "curl -sS -m 5"


# Owners of the tests that run their own servers: whatever a failing one leaves is removed.
OWNERS = {suffix: f"{RUN_OWNER}-{suffix}" for suffix in ("solo", "run", "gc", "durable")}


@pytest.fixture(scope="module")
def outside(docker_client: Any, allowed_root: Path) -> Iterator[Outside]:
    name = f"sandbox-test-outside-{secrets.token_hex(3)}"
    site = start_outside(docker_client, RUN_OWNER, allowed_root / name, name)
    yield site
    for owner in OWNERS.values():
        mine = {"label": [f"sandbox.owner={owner}"]}
        for container in docker_client.containers.list(all=True, filters=mine):
            container.remove(force=True, v=True)
        for network in docker_client.networks.list(filters=mine):
            network.remove()
        for volume in docker_client.volumes.list(filters=mine):
            volume.remove(force=True)
    site.close()


@pytest.fixture(scope="module")
def egress_manager(outside: Outside, allowed_root: Path) -> Iterator[SessionManager]:
    mgr = SessionManager(make_config(allowed_root, egress_network=outside.network))
    yield mgr
    mgr.close()


def create(manager: SessionManager, network: Any, project: Path | None = None) -> str:
    path = project or make_project("egress")
    return manager.create(CreateRequest(project_path=str(path), network=network)).session_id


def run(manager: SessionManager, sid: str, command: str, timeout_s: float = 30) -> Any:
    return manager.execute(command, session_id=sid, timeout_s=timeout_s)


@pytest.fixture(scope="module")
def allowed(egress_manager: SessionManager) -> str:
    return create(egress_manager, ["allowed.test"])


def test_the_allowed_host_answers_curl_urllib_and_pip(
    egress_manager: SessionManager, allowed: str
) -> None:
    project = Path(egress_manager.get(allowed).spec.project_path)
    shutil.copytree(Path(pip.__file__).parent, project / "piplib" / "pip")
    assert run(egress_manager, allowed, f"{CURL} http://allowed.test/").output == PAGE
    tunnel = run(egress_manager, allowed, f"{CURL} --proxytunnel http://allowed.test/")
    assert tunnel.output == PAGE  # CONNECT, as for HTTPS
    urllib = run(
        egress_manager,
        allowed,
        'python3 -c "import urllib.request as u; '
        "print(u.urlopen('http://allowed.test/').read().decode(), end='')\"",
    )
    assert urllib.output == PAGE
    download = run(
        egress_manager,
        allowed,
        "PYTHONPATH=/workspace/piplib python3 -m pip download --no-cache-dir "
        "--disable-pip-version-check -q --trusted-host allowed.test "
        "--index-url http://allowed.test/simple/ demo-pkg -d /tmp/dl "
        "&& ls /tmp/dl",
        timeout_s=120,
    )
    assert download.exit_code == 0, download.output
    assert "demo_pkg-1.0-py3-none-any.whl" in download.output


_PEER_CERT = """
import base64, hashlib, http.client, os, ssl, urllib.parse
proxy = urllib.parse.urlsplit(os.environ["HTTPS_PROXY"])
unverified = ssl._create_unverified_context()
conn = http.client.HTTPSConnection(proxy.hostname, proxy.port, context=unverified)
auth = base64.b64encode(f"{proxy.username}:{proxy.password}".encode()).decode()
conn.set_tunnel("allowed.test", 443, {"Proxy-Authorization": "Basic " + auth})
conn.request("GET", "/")
seen = hashlib.sha256(conn.sock.getpeercert(binary_form=True)).hexdigest()
print(seen, conn.getresponse().read().decode(), end="")
"""


def test_https_goes_through_a_tunnel_the_proxy_never_decrypts(
    egress_manager: SessionManager, allowed: str, outside: Outside
) -> None:
    project = Path(egress_manager.get(allowed).spec.project_path)
    (project / "peer_cert.py").write_text(_PEER_CERT)
    assert run(egress_manager, allowed, f"{CURL} -k https://allowed.test/").output == PAGE
    seen = run(egress_manager, allowed, "python3 /workspace/peer_cert.py")
    assert seen.exit_code == 0, seen.output
    fingerprint, body = seen.output.split(" ", 1)
    assert body == PAGE
    assert fingerprint == outside.certificate_sha256()  # the server's own certificate
    refused = run(egress_manager, allowed, f"{CURL} -k https://denied.test/")
    assert refused.exit_code != 0
    assert "403" in refused.output


def test_a_denied_host_is_refused_with_its_name_and_how_to_ask_and_logged(
    egress_manager: SessionManager, allowed: str
) -> None:
    assert run(egress_manager, allowed, f"{CURL} http://allowed.test/").output == PAGE
    page = run(egress_manager, allowed, f"{CURL} http://denied.test/")
    assert "denied.test" in page.output
    assert "not on this session's allow-list" in page.output
    assert "session_update" in page.output
    tunnel = run(egress_manager, allowed, f"{CURL} --proxytunnel http://denied.test:443/")
    assert tunnel.exit_code != 0
    assert "403" in tunnel.output
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        info = egress_manager.info(allowed)
        assert info.egress is not None
        refused = [d for d in info.egress.recent if not d.allowed and d.host == "denied.test"]
        if len(refused) >= 2:
            break
        time.sleep(0.1)
    assert {d.port for d in refused} >= {80, 443}
    assert all(d.status == 403 for d in refused)
    assert info.egress_allow == ["allowed.test"]
    # each refusal is told once, in the first execute that ends after the proxy logged it
    notices = page.notices + tunnel.notices + run(egress_manager, allowed, "true").notices
    for port in (80, 443):
        told = [n for n in notices if f"denied.test:{port}" in n and "session_update" in n]
        assert len(told) == 1, notices
    assert not run(egress_manager, allowed, "true").notices
    logged = egress_manager.session_dir(allowed) / "egress.jsonl"
    lines = [json.loads(line) for line in logged.read_text().splitlines()]
    assert any(e["host"] == "denied.test" and not e["allowed"] for e in lines)
    assert any(e["host"] == "allowed.test" and e["allowed"] and e["bytes_in"] > 0 for e in lines)


def test_direct_addresses_other_ports_udp_and_outside_names_all_fail(
    egress_manager: SessionManager, allowed: str, outside: Outside
) -> None:
    ip = outside.ip
    for url in (f"http://{ip}/", f"http://{ip}:8080/", "http://allowed.test/"):
        direct = run(egress_manager, allowed, f"{CURL} --noproxy '*' {url}")
        assert direct.exit_code != 0, (url, direct.output)
    via_proxy = run(
        egress_manager, allowed, f"{CURL} -o /dev/null -w '%{{http_code}}' http://{ip}/"
    )
    assert via_proxy.output == "403"
    other_port = run(
        egress_manager,
        allowed,
        f"{CURL} -o /dev/null -w '%{{http_code}}' http://allowed.test:8080/",
    )
    assert other_port.output == "403"
    udp = run(
        egress_manager,
        allowed,
        'python3 -c "import socket; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); '
        f"s.settimeout(2); s.sendto(b'x', ('{ip}', 9999)); print(s.recv(10))\"",
    )
    assert udp.exit_code != 0
    for name in ("allowed.test", "denied.test", "example.org"):
        resolved = run(egress_manager, allowed, f"getent hosts {name}", timeout_s=20)
        assert resolved.exit_code != 0, resolved.output


def test_no_network_is_still_loopback_only_and_full_network_still_routes(
    egress_manager: SessionManager,
) -> None:
    none = create(egress_manager, False)
    assert run(egress_manager, none, "ls /sys/class/net").output.split() == ["lo"]
    assert "HTTP_PROXY" not in run(egress_manager, none, "env").output
    full = create(egress_manager, True)
    routes = run(egress_manager, full, "cat /proc/net/route").output
    assert any(line.split()[1:2] == ["00000000"] for line in routes.splitlines()[1:])
    assert egress_manager.get(full).spec.egress is None


def test_two_sessions_each_reach_only_their_own_hosts(egress_manager: SessionManager) -> None:
    one = create(egress_manager, ["allowed.test"])
    two = create(egress_manager, ["denied.test"])
    code = f"{CURL} -o /dev/null -w '%{{http_code}}'"
    assert run(egress_manager, one, f"{code} http://allowed.test/").output == "200"
    assert run(egress_manager, one, f"{code} http://denied.test/").output == "403"
    assert run(egress_manager, two, f"{code} http://denied.test/").output == "200"
    assert run(egress_manager, two, f"{code} http://allowed.test/").output == "403"
    # one session's credentials are its own: another's id with a wrong secret gets nothing
    forged = run(
        egress_manager,
        two,
        f"{code} -x http://{one}:wrong@{names.proxy_name(egress_manager.config.owner)}:3128 "
        "http://allowed.test/",
    )
    assert forged.output == "407"


def test_a_live_session_list_changes_without_a_restart(egress_manager: SessionManager) -> None:
    sid = create(egress_manager, ["allowed.test"])
    code = f"{CURL} -o /dev/null -w '%{{http_code}}'"
    run(egress_manager, sid, "export MARK=kept")
    assert run(egress_manager, sid, f"{code} http://denied.test/").output == "403"
    changed = egress_manager.update_network(sid, ["*.nowhere.test", "denied.test"])
    assert sorted(changed) == ["*.nowhere.test", "denied.test"]
    assert run(egress_manager, sid, f"{code} http://denied.test/").output == "200"
    assert run(egress_manager, sid, f"{code} http://allowed.test/").output == "403"
    assert run(egress_manager, sid, "echo $MARK").output == "kept\n"
    assert egress_manager.info(sid).egress_allow == changed


def test_an_update_of_a_session_without_a_list_is_refused(egress_manager: SessionManager) -> None:
    sid = create(egress_manager, False)
    with pytest.raises(InvalidArgumentError, match="no egress allow-list"):
        egress_manager.update_network(sid, ["allowed.test"])


def test_a_killed_proxy_comes_back_and_is_never_bypassed(
    egress_manager: SessionManager, allowed: str, docker_client: Any
) -> None:
    proxy = docker_client.containers.get(names.proxy_name(egress_manager.config.owner))
    proxy.kill()
    code = f"{CURL} -o /dev/null -w '%{{http_code}}' http://allowed.test/"
    outcomes = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        outcomes.append(run(egress_manager, allowed, code).output[-3:])
        if outcomes[-1] == "200":
            break
    assert outcomes[-1] == "200", outcomes
    assert set(outcomes[:-1]) <= {"000", "403", "407"}  # down: refused, never around it
    assert egress_manager.server_info().egress is not None
    assert egress_manager.server_info().egress.running  # type: ignore[union-attr]


def test_the_proxy_and_its_network_go_with_the_last_server(
    outside: Outside, allowed_root: Path, docker_client: Any
) -> None:
    owner = OWNERS["solo"]
    mgr = SessionManager(make_config(allowed_root, owner=owner, egress_network=outside.network))
    try:
        sid = create(mgr, ["allowed.test"])
        assert run(mgr, sid, f"{CURL} http://allowed.test/").output == PAGE
        info = mgr.server_info().egress
        assert info is not None
        assert info.running
        assert info.sessions == 1
        labels = docker_client.containers.get(names.proxy_name(owner)).labels
        assert labels["sandbox.managed"] == "true"
        assert labels["sandbox.owner"] == owner
        assert labels["sandbox.role"] == names.ROLE_PROXY
    finally:
        mgr.close()
    managed = {"label": [f"sandbox.owner={owner}"]}
    assert docker_client.containers.list(all=True, filters=managed) == []
    assert docker_client.networks.list(filters=managed) == []


def test_sandbox_logs_egress_prints_each_decision(
    egress_manager: SessionManager, allowed: str, capsys: pytest.CaptureFixture[str]
) -> None:
    run(egress_manager, allowed, f"{CURL} http://allowed.test/ http://denied.test/")
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        info = egress_manager.info(allowed).egress
        assert info is not None
        if any(d.host == "denied.test" for d in info.recent[-2:]):
            break
        time.sleep(0.1)
    print_egress_log(egress_manager.config, allowed)
    table = capsys.readouterr().out
    assert "allowed.test:80" in table
    assert "DENIED" in table
    assert "denied.test:80" in table


def test_sandbox_run_allow_reaches_only_that_host(outside: Outside, allowed_root: Path) -> None:
    owner = OWNERS["run"]
    env = {
        **os.environ,
        "SANDBOX_OWNER": owner,
        "SANDBOX_STATE_DIR": str(allowed_root / ".state-run"),
        "SANDBOX_EGRESS_NETWORK": outside.network,
    }
    command = f"{CURL} http://allowed.test/ && {CURL} -o /dev/null -w '%{{http_code}}' http://denied.test/"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "sandbox",
            "run",
            "--project",
            str(make_project("run")),
            "--allow",
            "allowed.test",
            "--",
            "sh",
            "-c",
            command,
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == PAGE + "403"


def test_gc_removes_a_proxy_no_session_uses_and_its_network(
    outside: Outside, allowed_root: Path, docker_client: Any
) -> None:
    owner = OWNERS["gc"]
    config = make_config(allowed_root, owner=owner, egress_network=outside.network)
    first = SessionManager(config)
    sid = create(first, ["allowed.test"])
    docker_client.containers.get(first.get(sid).container_id).remove(force=True)
    second = SessionManager(config)
    try:
        found = second.gc(dry_run=True, owner=owner)
        assert [s.name for s in found] == [names.proxy_name(owner)]
        second.gc(owner=owner)
        managed = {"label": [f"sandbox.owner={owner}"]}
        assert docker_client.containers.list(all=True, filters=managed) == []
        assert docker_client.networks.list(filters=managed) == []
    finally:
        second.close()
        first.close()


def test_doctor_reports_the_proxy_and_a_missing_outside_network(outside: Outside) -> None:
    env = {
        **os.environ,
        "SANDBOX_EGRESS_ALLOW": "allowed.test",
        "SANDBOX_EGRESS_NETWORK": "sandbox-test-no-such-network",
    }
    checks = {c.name: c for c in run_checks(env)}
    assert checks["egress network"].status == "FAIL"
    assert "docker network create" in checks["egress network"].fix
    assert checks["egress proxy"].status == "ok"
    assert "allowed.test" in checks["egress proxy"].detail


def test_a_durable_sessions_proxy_survives_a_server_restart(
    outside: Outside, allowed_root: Path, docker_client: Any
) -> None:
    owner = OWNERS["durable"]
    config = make_config(allowed_root, owner=owner, egress_network=outside.network)
    first = SessionManager(config)
    try:
        created = first.create(
            CreateRequest(
                project_path=str(make_project("durable")), network=["allowed.test"], durable=True
            )
        )
        sid = created.session_id
        assert run(first, sid, f"{CURL} http://allowed.test/").output == PAGE
        first.update_network(sid, ["allowed.test", "*.later.test"])  # kept across the restart
    finally:
        first.close()
    assert docker_client.containers.get(names.proxy_name(owner)).status == "running"
    between = docker_client.containers.get(created.container_id).exec_run(
        ["sh", "-c", f"{CURL} -o /dev/null -w '%{{http_code}}' http://allowed.test/"],
        user="1000",
    )  # a person's `docker exec` gets the proxy variables too
    assert between.output.decode() == "200", between.output  # between servers: still works
    second = SessionManager(config)
    try:
        assert second.adopt_durable() == [sid]
        assert sorted(second.info(sid).egress_allow or []) == ["*.later.test", "allowed.test"]
        assert run(second, sid, f"{CURL} http://allowed.test/").output == PAGE
        code = f"{CURL} -o /dev/null -w '%{{http_code}}' http://denied.test/"
        assert run(second, sid, code).output == "403"
        second.destroy(sid, force=True)
    finally:
        second.close()
    managed = {"label": [f"sandbox.owner={owner}"]}
    assert docker_client.containers.list(all=True, filters=managed) == []
    assert docker_client.networks.list(filters=managed) == []

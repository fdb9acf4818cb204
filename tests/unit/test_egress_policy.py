"""Egress allow-lists without an engine: what a pattern allows, the server's ceiling, what a
session gets, and how the proxy's log lines read."""

from __future__ import annotations

from pathlib import Path

import pytest

from sandbox.config import SandboxConfig
from sandbox.egress.journal import EgressJournal, parse_line
from sandbox.egress.names import proxy_env
from sandbox.egress.policy import (
    allows,
    canonical,
    check_client,
    compile_allow,
    parse_pattern,
    session_network,
)
from sandbox.errors import InvalidArgumentError
from sandbox.models import CreateRequest
from sandbox.session.profile import blueprint, container_spec, session_spec


def config(**values: object) -> SandboxConfig:
    return SandboxConfig.from_env({}, **values)


@pytest.mark.parametrize(
    ("pattern", "host", "port", "expected"),
    [
        ("pkg.test", "pkg.test", 443, True),
        ("pkg.test", "pkg.test", 80, True),
        ("pkg.test", "Pkg.TEST.", 443, True),
        ("pkg.test", "pkg.test", 8080, False),
        ("pkg.test", "files.pkg.test", 443, False),
        ("pkg.test", "pkg.test.evil.com", 443, False),
        ("pkg.test", "evilpkg.test", 443, False),
        ("*.github.com", "api.github.com", 443, True),
        ("*.github.com", "a.b.github.com", 443, True),
        ("*.github.com", "github.com", 443, False),
        ("*.github.com", "evilgithub.com", 443, False),
        ("*.github.com", "github.com.evil.org", 443, False),
        ("example.com:8443", "example.com", 8443, True),
        ("example.com:8443", "example.com", 443, False),
        ("10.1.2.3", "10.1.2.3", 80, True),
        ("10.1.2.3", "10.1.2.4", 80, False),
    ],
)
def test_a_pattern_allows_exactly_its_hosts_and_ports(
    pattern: str, host: str, port: int, expected: bool
) -> None:
    assert allows([pattern], host, port) is expected


def test_dots_in_a_pattern_are_literal_in_the_proxy_regex() -> None:
    assert not allows(["pkg.test"], "pkgxtest", 443)
    assert compile_allow([]) == r"(?!)"
    assert not allows([], "pkg.test", 443)


@pytest.mark.parametrize(
    "bad",
    [
        "*",
        "*.com",
        "pkg.*",
        "a*.github.com",
        "pkg.test:0",
        "pkg.test:99999",
        "pkg.test:x",
        "::1",
        "-bad-.org",
        "has space.org",
        "",
        "1.2.3",
        "*.10.1.2.3",
    ],
)
def test_a_bad_pattern_is_invalid_argument_with_the_accepted_forms(bad: str) -> None:
    with pytest.raises(InvalidArgumentError) as caught:
        parse_pattern(bad)
    assert caught.value.code == "INVALID_ARGUMENT"
    assert "*.github.com" in caught.value.hint


def test_lists_are_canonical_lower_case_deduplicated_and_sorted() -> None:
    assert canonical(["Pkg.Test", "pkg.test.", "*.GitHub.com:443"]) == [
        "*.github.com:443",
        "pkg.test",
    ]


def test_what_a_session_gets_from_its_request_and_the_server() -> None:
    plain = config()
    assert session_network(plain, None).enabled is False
    assert session_network(plain, True).allow is None
    assert session_network(plain, ["pkg.test"]).allow == ("pkg.test",)
    assert session_network(plain, []).enabled is False
    listed = config(egress_allow="pkg.test,*.github.com")
    default = session_network(listed, None)
    assert default.enabled
    assert default.allow == ("*.github.com", "pkg.test")
    assert session_network(listed, False).enabled is False


def test_with_a_server_list_a_client_may_narrow_it_but_not_widen_it() -> None:
    listed = config(egress_allow="pkg.test,*.github.com")
    assert not listed.clients_may_widen
    check_client(listed, ["api.github.com", "pkg.test:443"])
    check_client(listed, ["*.github.com"])
    check_client(listed, False)
    check_client(listed, None)
    for wider in (["github.com"], ["pkg.test:8080"], ["evil.org"], True):
        with pytest.raises(InvalidArgumentError) as caught:
            check_client(listed, wider)
        assert "pkg.test" in caught.value.hint
        assert "SANDBOX_EGRESS_ALLOW" in caught.value.hint


def test_the_operator_may_let_clients_widen_the_list() -> None:
    check_client(config(egress_allow="pkg.test", client_network=True), ["evil.org"])
    check_client(config(), True)  # no list: today's default, clients may turn it on
    with pytest.raises(InvalidArgumentError, match="full network"):
        check_client(config(client_network=False), True)
    with pytest.raises(InvalidArgumentError, match="beyond"):
        check_client(config(client_network=False), ["pkg.test"])


def test_an_allow_list_under_gvisor_is_a_clear_error(tmp_path: Path) -> None:
    gvisor = config(allowed_roots=str(tmp_path), allowed_runtimes="runsc")
    request = CreateRequest(project_path=str(tmp_path), runtime="runsc", network=["pkg.test"])
    with pytest.raises(InvalidArgumentError) as caught:
        blueprint(gvisor, request)
    assert "runsc" in caught.value.message
    assert "network=false" in caught.value.hint


def test_an_allow_list_session_gets_the_proxy_variables_and_the_internal_network(
    tmp_path: Path,
) -> None:
    cfg = config(allowed_roots=str(tmp_path), owner="alice")
    bp = blueprint(cfg, CreateRequest(project_path=str(tmp_path), network=["pkg.test"]))
    spec = session_spec(bp, "abc123", 24, 80, cfg.owner)
    assert spec.egress == ["pkg.test"]
    assert len(spec.egress_secret) == 32
    env = proxy_env("alice", "abc123", spec.egress_secret)
    for name in ("HTTP_PROXY", "https_proxy", "NO_PROXY"):
        assert spec.env[name] == env[name]
    assert spec.env["HTTPS_PROXY"].startswith(f"http://abc123:{spec.egress_secret}@")
    container = container_spec(cfg, "server", spec)
    assert container.network.startswith("sandbox-egress-")
    assert container.env["HTTP_PROXY"] == env["HTTP_PROXY"]
    plain = session_spec(blueprint(cfg, CreateRequest(project_path=str(tmp_path))), "x", 24, 80)
    assert "HTTP_PROXY" not in plain.env
    assert container_spec(cfg, "s", plain).network == "none"


def test_the_proxy_log_reads_as_decisions_and_counts_per_session(tmp_path: Path) -> None:
    journal = EgressJournal(lambda sid: tmp_path / sid)
    journal.track("s1")
    lines = [
        "egress 1795587558.823 s1 172.18.0.3 GET allowed.test 80 200 TCP_MISS 296 162",
        "egress 1795587558.834 s1 172.18.0.3 CONNECT denied.test 443 403 TCP_DENIED 768 160",
        "egress 1795587558.900 s2 172.18.0.4 GET other.test 80 200 TCP_MISS 10 10",
        "2026/11/25 06:17:16| pinger: ICMP socket opened.",
        "egress 1795587558.950 - 172.18.0.4 GET nobody.test 80 407 TCP_DENIED 10 10",
    ]
    entries = [e for e in map(parse_line, lines) if e is not None]
    assert [e.session_id for e in entries] == ["s1", "s1", "s2"]
    assert [journal.record(e) for e in entries] == [True, True, False]
    assert journal.counts("s1") == (1, 1)
    first, second = journal.recent("s1")
    assert first.allowed
    assert first.bytes_in == 296
    assert first.time.endswith("Z")
    assert not second.allowed
    assert (second.host, second.port, second.method) == (
        "denied.test",
        443,
        "CONNECT",
    )
    assert [d.host for d in journal.take_denials("s1")] == ["denied.test"]
    assert journal.take_denials("s1") == []
    assert len((tmp_path / "s1" / "egress.jsonl").read_text().splitlines()) == 2

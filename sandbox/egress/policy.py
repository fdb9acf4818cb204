"""Host patterns of an egress allow-list, what a session gets, and the server's ceiling.

A pattern is a host name (``pkg.test``), a wildcard over its subdomains (``*.github.com``:
``api.github.com`` and ``a.b.github.com``, not ``github.com`` itself) or an IPv4 address,
optionally with a port (``pkg.test:443``). Without a port it allows 80 and 443 (HTTP and
HTTPS). The proxy's helper only applies a regex: this module compiles it (``compile_allow``),
so the meaning of a pattern lives here alone.

``network`` in a request is ``False`` (none), ``True`` (the full network) or a list of
patterns. ``SANDBOX_EGRESS_ALLOW`` is the server's default for sessions that ask none and the
ceiling of what a client may ask (``check_client``): a client narrows it, never widens it,
unless ``SANDBOX_CLIENT_NETWORK=1`` lets it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from sandbox.config import SandboxConfig, env_var
from sandbox.errors import InvalidArgumentError

DEFAULT_PORTS = (80, 443)
MAX_PATTERNS = 256
_LABEL = r"[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?"
_HOST = re.compile(rf"^{_LABEL}(?:\.{_LABEL})*$")
_IPV4 = re.compile(r"^(?:(?:25[0-5]|2[0-4]\d|1?\d?\d)\.){3}(?:25[0-5]|2[0-4]\d|1?\d?\d)$")
_FORMS = "pkg.test, *.github.com or pkg.test:443"


@dataclass(frozen=True, order=True)
class HostPattern:
    """One allowed host (or subdomains of it), on one port or on 80 and 443."""

    host: str
    wildcard: bool = False
    port: int | None = None

    def __str__(self) -> str:
        name = f"*.{self.host}" if self.wildcard else self.host
        return name if self.port is None else f"{name}:{self.port}"

    @property
    def ports(self) -> tuple[int, ...]:
        return DEFAULT_PORTS if self.port is None else (self.port,)

    def covers(self, other: HostPattern) -> bool:
        """Whether everything ``other`` allows is allowed by this pattern too."""
        if not set(other.ports) <= set(self.ports):
            return False
        if not self.wildcard:
            return not other.wildcard and other.host == self.host
        return other.host.endswith("." + self.host) or (other.wildcard and other.host == self.host)

    def regex(self) -> str:
        host = re.escape(self.host)
        if self.wildcard:
            host = rf"(?:{_LABEL}\.)+{host}"
        return rf"{host}:(?:{'|'.join(str(p) for p in self.ports)})"


def parse_pattern(text: str) -> HostPattern:
    """``text`` as a pattern; a bad one is an ``InvalidArgumentError`` that says the forms."""
    raw = text.strip().lower()
    name, port = raw, None
    if raw.count(":") == 1:
        name, _, port_text = raw.partition(":")
        if not port_text.isdigit() or not 0 < int(port_text) < 65536:
            raise _bad(text, "the port must be a number from 1 to 65535")
        port = int(port_text)
    elif ":" in raw:
        raise _bad(text, "IPv6 addresses are not supported")
    name = name.rstrip(".")
    wildcard = name.startswith("*.")
    host = name[2:] if wildcard else name
    if "*" in host or not host or len(host) > 253:
        raise _bad(text, "a wildcard is allowed only as the whole first label, as in *.github.com")
    if wildcard and ("." not in host or _IPV4.match(host)):
        raise _bad(text, "a wildcard must stand for subdomains of a domain, not a top level")
    if not (_IPV4.match(host) or (_HOST.match(host) and not host.replace(".", "").isdigit())):
        raise _bad(text, "it is not a host name")
    return HostPattern(host=host, wildcard=wildcard, port=port)


def parse_allow(patterns: Iterable[str]) -> tuple[HostPattern, ...]:
    """Patterns parsed, deduplicated and sorted (the canonical allow-list)."""
    parsed = sorted({parse_pattern(p) for p in patterns})
    if len(parsed) > MAX_PATTERNS:
        raise InvalidArgumentError(
            f"{len(parsed)} host patterns is too many", hint=f"Allow at most {MAX_PATTERNS}."
        )
    return tuple(parsed)


def canonical(patterns: Iterable[str]) -> list[str]:
    """The allow-list as strings, in its canonical form."""
    return [str(p) for p in parse_allow(patterns)]


def compile_allow(patterns: Iterable[str]) -> str:
    """One regex over ``host:port`` that matches exactly what ``patterns`` allow (the proxy
    applies it with ``fullmatch``); an empty list matches nothing."""
    parsed = parse_allow(patterns)
    if not parsed:
        return r"(?!)"
    return "|".join(f"(?:{p.regex()})" for p in parsed)


def allows(patterns: Iterable[str], host: str, port: int) -> bool:
    """Whether ``host:port`` is allowed (what the proxy decides, for tests and messages)."""
    return re.fullmatch(compile_allow(patterns), f"{host.lower().rstrip('.')}:{port}") is not None


NetworkAsk = bool | Sequence[str] | None


@dataclass(frozen=True)
class SessionNetwork:
    """What a session gets: no network, the full one, or an allow-list through the proxy."""

    enabled: bool
    allow: tuple[str, ...] | None = None  # None: not through the proxy

    @property
    def restricted(self) -> bool:
        return self.allow is not None


def session_network(config: SandboxConfig, asked: NetworkAsk) -> SessionNetwork:
    """The network of a session that asked ``asked`` (None: the server's default)."""
    if asked is None:
        if config.egress_allow:
            return SessionNetwork(True, tuple(canonical(config.egress_allow)))
        return SessionNetwork(config.network_enabled)
    if isinstance(asked, bool):
        return SessionNetwork(asked)
    allow = tuple(canonical(asked))
    return SessionNetwork(True, allow) if allow else SessionNetwork(False)


def check_client(config: SandboxConfig, asked: NetworkAsk) -> None:
    """Refuse what a client (an MCP caller) may not ask: more than the server's allow-list,
    unless the server lets clients widen it (``SANDBOX_CLIENT_NETWORK``)."""
    if asked is None or asked is False or config.clients_may_widen:
        return
    ceiling = parse_allow(config.egress_allow)
    within = ", ".join(str(p) for p in ceiling)
    if asked is True:
        raise InvalidArgumentError(
            "this server does not let clients turn the full network on",
            hint=(f"Ask for a list of hosts within: {within}" if ceiling else "Omit network")
            + f" (the operator sets {env_var('client_network')} and "
            f"{env_var('egress_allow')}).",
        )
    outside = [str(p) for p in parse_allow(asked) if not any(c.covers(p) for c in ceiling)]
    if outside:
        raise InvalidArgumentError(
            f"network asks for hosts beyond this server's allow-list: {', '.join(outside)}",
            hint=(f"Ask only for hosts within: {within}" if ceiling else "Omit network")
            + f" (the operator sets {env_var('egress_allow')}).",
        )


def _bad(text: str, why: str) -> InvalidArgumentError:
    return InvalidArgumentError(
        f"bad host pattern {text!r} in network: {why}",
        hint=f"Use host names like {_FORMS}.",
    )

"""What ``sandbox doctor`` says about egress: the proxy's image, its outside network, and the
owner's proxy (running or not). Each finding carries its fix."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from sandbox.backends.base import Backend
from sandbox.config import SandboxConfig, env_var
from sandbox.egress import names
from sandbox.egress.policy import canonical
from sandbox.errors import SandboxError


@dataclass(frozen=True)
class Finding:
    name: str
    status: Literal["ok", "FAIL", "warn", "info"]
    detail: str
    fix: str = ""
    required: bool = False


def egress_health(backend: Backend, config: SandboxConfig) -> list[Finding]:
    """Findings that are failures only when the server gives sessions an allow-list."""
    needed = bool(config.egress_allow)
    control = backend.networks
    if control is None:
        return [
            Finding(
                "egress proxy",
                "info",
                "this engine gives no allow-lists (Docker does; Podman not yet)",
            )
        ]
    found = []
    try:
        present = backend.image_exists(names.IMAGE)
        outside = control.network(config.egress_network)
        proxy = [
            s
            for s in backend.list_containers(names.labels(config.owner, names.ROLE_PROXY))
            if s.name == names.proxy_name(config.owner)
        ]
    except SandboxError as exc:
        return [Finding("egress proxy", "FAIL", exc.message, exc.hint, needed)]
    found.append(
        Finding("egress image", "ok", f"{names.IMAGE} is present")
        if present
        else Finding(
            "egress image",
            "warn" if needed else "info",
            f"{names.IMAGE} is not built yet (it is built on first use, about a minute)",
            "Run `sandbox image build --egress`.",
        )
    )
    found.append(
        Finding("egress network", "ok", f"the proxy reaches out through {config.egress_network}")
        if outside is not None or config.egress_network in ("bridge", "host")
        else Finding(
            "egress network",
            "FAIL",
            f"{env_var('egress_network')}={config.egress_network}: no such network",
            f"Create it (docker network create {config.egress_network}) or unset "
            f"{env_var('egress_network')}.",
            needed,
        )
    )
    allow = ", ".join(canonical(config.egress_allow)) or "none (clients may ask for hosts)"
    state = f"{proxy[0].name} is {proxy[0].status}" if proxy else "no proxy runs (none needed yet)"
    found.append(Finding("egress proxy", "ok", f"{state}; server allow-list: {allow}"))
    return found

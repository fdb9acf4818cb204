"""What the egress proxy, its network and a session's proxy variables are called.

One proxy per owner (``SANDBOX_OWNER``): every server of an owner shares it, each with its
own policy file in it, so durable sessions keep their proxy across a server restart.
"""

from __future__ import annotations

import hashlib

from sandbox.config import LABEL_MANAGED, LABEL_OWNER, LABEL_ROLE, LABEL_SESSION
from sandbox.version import __version__

IMAGE = "sandbox-egress:latest"
PORT = 3128
ROLE_PROXY = "egress-proxy"
ROLE_NETWORK = "egress-network"
PROXY_UID = 13  # Debian's "proxy" user in the image
HELPER = "/usr/lib/sandbox-egress/helper.py"
#: Never sent to the proxy: the session's own loopback.
NO_PROXY = "localhost,127.0.0.1,::1"


def image_tags() -> list[str]:
    return [IMAGE, f"sandbox-egress:{__version__}"]


def owner_key(owner: str) -> str:
    return hashlib.sha256(owner.encode()).hexdigest()[:12]


def proxy_name(owner: str) -> str:
    """The proxy container's name, which is also its host name on the internal network."""
    return f"sandbox-egress-{owner_key(owner)}"


def network_name(owner: str) -> str:
    """The internal network of the owner's allow-list sessions and its proxy."""
    return f"sandbox-egress-{owner_key(owner)}"


def labels(owner: str, role: str) -> dict[str, str]:
    return {LABEL_MANAGED: "true", LABEL_OWNER: owner, LABEL_ROLE: role, LABEL_SESSION: role}


def proxy_env(owner: str, session_id: str, secret: str) -> dict[str, str]:
    """The variables that send a session's HTTP(S) through its proxy, with its credentials
    (both spellings: curl reads the lower-case ones, many tools the upper-case ones)."""
    url = f"http://{session_id}:{secret}@{proxy_name(owner)}:{PORT}"
    env = {}
    for name in ("http_proxy", "https_proxy"):
        env[name] = env[name.upper()] = url
    env["no_proxy"] = env["NO_PROXY"] = NO_PROXY
    return env


PROXY_ENV_NAMES = tuple(proxy_env("-", "-", "-"))

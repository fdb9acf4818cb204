"""Who calls the MCP server, and what each caller may see and hold.

Over HTTP each bearer token is a client (``client_of``): it may hold at most
``SandboxConfig.token_quota`` sessions at once (``SESSION_LIMIT`` beyond), and it sees and
drives only its own sessions (``ClientLedger``). On stdio there is one local client and only
the server's ``max_sessions`` applies.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from mcp.server.mcpserver import Context

from sandbox.config import SandboxConfig
from sandbox.egress.policy import check_client
from sandbox.errors import SessionLimitError
from sandbox.mcp.http_auth import bearer_token
from sandbox.models import CreateRequest, SessionCreated

if TYPE_CHECKING:
    from sandbox.session.manager import SessionManager

LOCAL_CLIENT = "local"  # stdio, in-memory: the one client of this server
ANONYMOUS_CLIENT = "anonymous"  # HTTP without a configured token (loopback only)


def client_of(headers: Mapping[str, str] | None, tokens: Sequence[str]) -> str:
    """Who is calling: a token's client id over HTTP (the guard already checked the token),
    ``"anonymous"`` over HTTP without tokens, ``"local"`` on stdio."""
    if headers is None:
        return LOCAL_CLIENT
    given = bearer_token(headers.get("authorization"))
    if given and given in tokens:
        return "token-" + hashlib.sha256(given.encode()).hexdigest()[:12]
    return ANONYMOUS_CLIENT


def headers_of(ctx: Context[Any, Any] | None) -> Mapping[str, str] | None:
    if ctx is None:  # the stdio fast path: the local client
        return None
    try:
        return ctx.headers
    except ValueError:  # outside a request
        return None


class ClientLedger:
    """Which client created which session, and each token's quota of live sessions."""

    def __init__(self, config: SandboxConfig, manager: SessionManager) -> None:
        self.config = config
        self.manager = manager
        self._owners: dict[str, str] = {}  # session id -> client that created it
        self._reserved: dict[str, int] = {}  # client -> creations in flight
        self._lock = threading.Lock()

    def visible(self, client: str, session_id: str) -> bool:
        owner = self._owners.get(session_id)
        return client == LOCAL_CLIENT or owner is None or owner == client

    def create(self, client: str, request: CreateRequest) -> SessionCreated:
        """Create a session within the client's quota (tokens only)."""
        check_client(self.config, request.network)
        self._reserve(client)
        try:
            created = self.manager.create(request)
            with self._lock:
                self._owners[created.session_id] = client
            return created
        finally:
            with self._lock:
                self._reserved[client] -= 1

    def _reserve(self, client: str) -> None:
        quota = self.config.token_quota
        with self._lock:
            live = {s.id for s in self.manager.sessions()}
            for sid in [sid for sid in self._owners if sid not in live]:
                del self._owners[sid]
            if client != LOCAL_CLIENT:
                held = sum(1 for owner in self._owners.values() if owner == client)
                if held + self._reserved.get(client, 0) >= quota:
                    raise SessionLimitError(
                        f"this client holds {held} sessions; its quota is {quota}",
                        hint="Destroy a session you no longer need (session_list shows yours); "
                        "the operator sets SANDBOX_MAX_SESSIONS_PER_TOKEN.",
                    )
            self._reserved[client] = self._reserved.get(client, 0) + 1

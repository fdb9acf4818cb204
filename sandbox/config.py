"""Server configuration: limits, timeouts and defaults, read from ``SANDBOX_*`` variables.

``SandboxConfig.from_env()`` is the only reader of the environment; a bad value is a
``InvalidArgumentError`` that names the variable. CLI flags override it with ``model_copy``.
"""

from __future__ import annotations

import os
import secrets
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import platformdirs
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from sandbox.errors import InvalidArgumentError


class SandboxConfig(BaseModel):
    """Everything a server needs to know; frozen so sessions can hold it safely."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    image: str = Field(default="sandbox-session:latest", description="Default session image.")
    state_dir: Path = Field(default_factory=lambda: default_state_dir())
    max_sessions: int = Field(default=32, ge=1, le=10_000)
    # Per-session defaults and the maxima a client may ask for.
    memory_mb: int = Field(default=1024, ge=32)
    max_memory_mb: int = Field(default=8192, ge=32)
    cpus: float = Field(default=1.0, gt=0)
    max_cpus: float = Field(default=4.0, gt=0)
    pids: int = Field(default=256, ge=16)
    max_pids: int = Field(default=4096, ge=16)
    default_timeout_s: float = Field(default=30.0, gt=0)
    max_timeout_s: float = Field(default=600.0, gt=0)
    allowed_roots: tuple[Path, ...] = Field(default_factory=lambda: default_allowed_roots())
    token: str | None = None
    allowed_hosts: tuple[str, ...] = Field(
        default=(), description="Extra Host names the HTTP server answers (name, name:port)."
    )
    network: str = Field(default="none", description="Docker network of sessions that ask none.")
    tmp_mb: int = Field(default=512, ge=1, description="Size of the /tmp tmpfs.")
    home_mb: int = Field(default=256, ge=1, description="Size of the home tmpfs.")
    fsize_mb: int = Field(default=4096, ge=1, description="Largest file a process may write.")
    max_lifetime_s: int = Field(default=24 * 3600, ge=60, description="Containers end by then.")
    log_max_bytes: int = Field(
        default=2 * 1024**3, ge=1024**2, description="Raw log cap per session."
    )
    execute_max_bytes: int = Field(
        default=1024**2, ge=4096, description="Output bytes kept per execute."
    )
    unattended_rate_kib: int = Field(
        default=256,
        ge=0,
        description="KiB/s a session's output is drained while nobody waits on it, after a "
        "1 MiB burst (0: unlimited). The program waits on its writes meanwhile; nothing is lost.",
    )
    owner: str = Field(default_factory=lambda: default_owner())
    allowed_images: tuple[str, ...] = Field(
        default=(), description="Images a client may pick (the default image always)."
    )
    runtime: str | None = Field(
        default=None, description="OCI runtime of sessions, e.g. runsc (gVisor)."
    )
    allowed_runtimes: tuple[str, ...] = Field(
        default=(), description="Runtimes a client may pick (the default one always)."
    )
    warm_pool: int = Field(
        default=0, ge=0, le=64, description="Sessions kept started ahead per kind of request."
    )
    durable: bool = Field(default=False, description="Sessions are durable unless asked not.")
    idle_ttl_s: int = Field(
        default=2 * 3600, ge=0, description="Stop sessions idle this long (0: never)."
    )
    record: bool = Field(default=True, description="Record each session as an asciicast file.")
    root_shell: bool = Field(
        default=True,
        description="Run the shell as root, without any capability, when the project is "
        "root's, so it can write it (0: as uid 1000, which cannot).",
    )
    client_network: bool = Field(
        default=True,
        description="MCP clients may turn the network on for their sessions (network=true).",
    )
    # HTTP hardening (``sandbox serve``).
    tokens: tuple[str, ...] = Field(
        default=(),
        description="More bearer tokens, comma-separated: each is a separate client with its "
        "own session quota and sessions (SANDBOX_TOKEN is one more).",
    )
    max_sessions_per_token: int | None = Field(
        default=None,
        ge=1,
        description="Sessions one token may hold at once (default: max_sessions shared evenly "
        "among the tokens).",
    )
    http_max_body_bytes: int = Field(
        default=4 * 1024 * 1024, ge=1024, description="Largest HTTP request body (413 above)."
    )
    http_max_clients: int = Field(
        default=100, ge=1, description="Open MCP connections (streamable HTTP sessions) at once."
    )
    http_max_connections: int = Field(
        default=256, ge=4, description="Concurrent HTTP connections (503 above)."
    )
    http_client_idle_s: int = Field(
        default=1800, ge=10, description="An MCP connection idle this long is closed."
    )

    @field_validator("allowed_roots", mode="before")
    @classmethod
    def _split_roots(cls, value: Any) -> Any:
        if isinstance(value, str):
            return tuple(Path(p) for p in value.split(os.pathsep) if p)
        return value

    @field_validator("allowed_images", "allowed_runtimes", "tokens", "allowed_hosts", mode="before")
    @classmethod
    def _split_names(cls, value: Any) -> Any:
        if isinstance(value, str):
            return tuple(h.strip() for h in value.split(",") if h.strip())
        return value

    @property
    def network_enabled(self) -> bool:
        return self.network != "none"

    @property
    def all_tokens(self) -> tuple[str, ...]:
        """Every accepted bearer token: SANDBOX_TOKEN, then SANDBOX_TOKENS."""
        return tuple(dict.fromkeys(t for t in (self.token, *self.tokens) if t))

    @property
    def token_quota(self) -> int:
        """Sessions one token may hold at once."""
        if self.max_sessions_per_token is not None:
            return min(self.max_sessions_per_token, self.max_sessions)
        return max(1, self.max_sessions // max(1, len(self.all_tokens)))

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: Any) -> SandboxConfig:
        """Read ``SANDBOX_*`` variables; ``overrides`` (CLI flags) win over them."""
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        for field, var in ENV_VARS.items():
            raw = env.get(var)
            if raw is not None and raw.strip() != "":
                values[field] = raw.strip()
        values.update({k: v for k, v in overrides.items() if v is not None})
        try:
            return cls(**values)
        except ValidationError as exc:
            err = exc.errors()[0]
            field = str(err["loc"][0]) if err["loc"] else "?"
            var = ENV_VARS.get(field, field)
            raise InvalidArgumentError(
                f"bad value for {var}: {err['msg']} (got {values.get(field)!r})",
                hint=f"Fix or unset {var}.",
            ) from exc


def default_state_dir() -> Path:
    return Path(platformdirs.user_state_dir("sandbox", appauthor=False))


def default_allowed_roots() -> tuple[Path, ...]:
    roots = {Path.home(), Path(tempfile.gettempdir())}
    return tuple(sorted(roots))


def default_owner() -> str:
    """A name for this user's servers on this machine; durable sessions are found by it."""
    try:
        user = os.getlogin()
    except OSError:
        user = str(os.getuid()) if hasattr(os, "getuid") else "user"
    return f"{user}"


def new_instance_id() -> str:
    return secrets.token_hex(6)


ENV_VARS: dict[str, str] = {
    "image": "SANDBOX_IMAGE",
    "state_dir": "SANDBOX_STATE_DIR",
    "max_sessions": "SANDBOX_MAX_SESSIONS",
    "memory_mb": "SANDBOX_MEMORY_MB",
    "max_memory_mb": "SANDBOX_MAX_MEMORY_MB",
    "cpus": "SANDBOX_CPUS",
    "max_cpus": "SANDBOX_MAX_CPUS",
    "pids": "SANDBOX_PIDS",
    "max_pids": "SANDBOX_MAX_PIDS",
    "default_timeout_s": "SANDBOX_DEFAULT_TIMEOUT_S",
    "max_timeout_s": "SANDBOX_MAX_TIMEOUT_S",
    "allowed_roots": "SANDBOX_ALLOWED_ROOTS",
    "token": "SANDBOX_TOKEN",
    "allowed_hosts": "SANDBOX_ALLOWED_HOSTS",
    "network": "SANDBOX_NETWORK",
    "tmp_mb": "SANDBOX_TMP_MB",
    "home_mb": "SANDBOX_HOME_MB",
    "fsize_mb": "SANDBOX_FSIZE_MB",
    "max_lifetime_s": "SANDBOX_MAX_LIFETIME_S",
    "log_max_bytes": "SANDBOX_LOG_MAX_BYTES",
    "unattended_rate_kib": "SANDBOX_UNATTENDED_RATE_KIB",
    "owner": "SANDBOX_OWNER",
    "root_shell": "SANDBOX_ROOT_SHELL",
    "durable": "SANDBOX_DURABLE",
    "warm_pool": "SANDBOX_WARM_POOL",
    "allowed_images": "SANDBOX_ALLOWED_IMAGES",
    "runtime": "SANDBOX_RUNTIME",
    "allowed_runtimes": "SANDBOX_ALLOWED_RUNTIMES",
    "idle_ttl_s": "SANDBOX_IDLE_TTL_S",
    "record": "SANDBOX_RECORD",
    "client_network": "SANDBOX_CLIENT_NETWORK",
    "tokens": "SANDBOX_TOKENS",
    "max_sessions_per_token": "SANDBOX_MAX_SESSIONS_PER_TOKEN",
    "http_max_body_bytes": "SANDBOX_HTTP_MAX_BODY_BYTES",
    "http_max_clients": "SANDBOX_HTTP_MAX_CLIENTS",
    "http_max_connections": "SANDBOX_HTTP_MAX_CONNECTIONS",
    "http_client_idle_s": "SANDBOX_HTTP_CLIENT_IDLE_S",
}

# Labels every managed container carries (CONTRACT.md "Names").
LABEL_MANAGED = "sandbox.managed"
LABEL_SESSION = "sandbox.session"
LABEL_OWNER = "sandbox.owner"
LABEL_SERVER = "sandbox.server"
LABEL_PROJECT = "sandbox.project"
LABEL_NAME = "sandbox.name"
LABEL_DURABLE = "sandbox.durable"
LABEL_CREATED = "sandbox.created_at"
LABEL_VERSION = "sandbox.version"
LABEL_SPEC = "sandbox.spec"

SESSION_HOME = "/home/sandbox"
WORKSPACE = "/workspace"
SANDBOX_UID = 1000
KEEPALIVE_UID = 65534

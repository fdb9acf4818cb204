"""Server configuration: limits, timeouts and defaults, read from ``SANDBOX_*`` variables.

``SandboxConfig`` is a pydantic-settings model with ``env_prefix="SANDBOX_"``: each field is
read from ``SANDBOX_<FIELD>`` (``env_var``), and this module is the only reader of those
variables. ``SandboxConfig.from_env()`` turns a bad value into an ``InvalidArgumentError`` that
names the variable; CLI flags override it (``from_env(**overrides)``, ``model_copy``).
Comma-separated settings (and ``os.pathsep``-separated roots) arrive as raw strings and are
split by the model's validators; a blank variable counts as unset.
"""

from __future__ import annotations

import contextvars
import os
import secrets
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import platformdirs
from pydantic import Field, ValidationError, field_validator
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from sandbox.errors import InvalidArgumentError

ENV_PREFIX = "SANDBOX_"
#: The image sessions run unless a request or ``SANDBOX_IMAGE`` names another.
DEFAULT_IMAGE = "sandbox-session:latest"

# The mapping ``from_env(environ)`` reads instead of ``os.environ`` (tests, ``doctor``).
_ENVIRON: contextvars.ContextVar[Mapping[str, str] | None] = contextvars.ContextVar(
    "sandbox_environ", default=None
)


def env_var(field: str) -> str:
    """The environment variable of a ``SandboxConfig`` field: ``SANDBOX_<FIELD>``."""
    return ENV_PREFIX + field.upper()


class _Environment(PydanticBaseSettingsSource):
    """``SANDBOX_<FIELD>`` variables as raw strings (stripped; blank ones are unset): the
    model's validators parse them, so a value means the same from a variable and a flag."""

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        environ = _ENVIRON.get()
        raw = (os.environ if environ is None else environ).get(env_var(field_name))
        value = raw.strip() if raw is not None and raw.strip() else None
        return value, field_name, False

    def __call__(self) -> dict[str, Any]:
        values: dict[str, Any] = {}
        for name, field in self.settings_cls.model_fields.items():
            value, _, _ = self.get_field_value(field, name)
            if value is not None:
                values[name] = value
        return values


class SandboxConfig(BaseSettings):
    """Everything a server needs to know; frozen so sessions can hold it safely.

    Constructing one reads ``SANDBOX_*`` variables for the fields not passed explicitly."""

    model_config = SettingsConfigDict(frozen=True, extra="forbid", env_prefix=ENV_PREFIX)

    image: str = Field(default=DEFAULT_IMAGE, description="Default session image.")
    state_dir: Path = Field(
        default_factory=lambda: default_state_dir(),
        description="Logs, recordings and server locks (default: the user's state dir).",
    )
    max_sessions: int = Field(default=32, ge=1, le=10_000, description="Sessions per server.")
    # Per-session defaults and the maxima a client may ask for.
    memory_mb: int = Field(default=1024, ge=32, description="Memory of a session (MiB).")
    max_memory_mb: int = Field(default=8192, ge=32, description="Most a client may ask (MiB).")
    cpus: float = Field(default=1.0, gt=0, description="CPUs of a session.")
    max_cpus: float = Field(default=4.0, gt=0, description="Most CPUs a client may ask.")
    pids: int = Field(default=256, ge=16, description="Processes of a session.")
    max_pids: int = Field(default=4096, ge=16, description="Most processes a client may ask.")
    default_timeout_s: float = Field(default=30.0, gt=0, description="execute's timeout.")
    max_timeout_s: float = Field(default=600.0, gt=0, description="Longest timeout asked.")
    allowed_roots: tuple[Path, ...] = Field(
        default_factory=lambda: default_allowed_roots(),
        description="Project paths must lie under these (os.pathsep-separated).",
    )
    token: str | None = Field(default=None, description="HTTP bearer token.")
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
    owner: str = Field(
        default_factory=lambda: default_owner(),
        description="Owner label: which server adopts which durable sessions.",
    )
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
    client_network: bool | None = Field(
        default=None,
        description="MCP clients may turn the network on for their sessions (network=true) or "
        "ask for hosts beyond egress_allow (default: yes, unless egress_allow is set).",
    )
    egress_allow: tuple[str, ...] = Field(
        default=(),
        description="Hosts sessions may reach through the egress proxy (comma-separated "
        "patterns: pkg.test, *.github.com, host:port): the default network of sessions that "
        "ask none, and the most a client may ask.",
    )
    egress_network: str = Field(
        default="bridge",
        description="The engine network through which the egress proxy reaches the outside.",
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
    web: bool = Field(default=False, description="`sandbox serve` also serves the web view at /ui.")

    @field_validator("allowed_roots", mode="before")
    @classmethod
    def _split_roots(cls, value: Any) -> Any:
        if isinstance(value, str):
            return tuple(Path(p) for p in value.split(os.pathsep) if p)
        return value

    @field_validator(
        "allowed_images",
        "allowed_runtimes",
        "tokens",
        "allowed_hosts",
        "egress_allow",
        mode="before",
    )
    @classmethod
    def _split_names(cls, value: Any) -> Any:
        if isinstance(value, str):
            return tuple(h.strip() for h in value.split(",") if h.strip())
        return value

    @property
    def network_enabled(self) -> bool:
        return self.network != "none"

    @property
    def clients_may_widen(self) -> bool:
        """Whether clients may ask for more network than the server's allow-list."""
        if self.client_network is None:
            return not self.egress_allow
        return self.client_network

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
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Explicit values (flags), then ``SANDBOX_*`` variables; no dotenv, no secret dirs."""
        return init_settings, _Environment(settings_cls)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: Any) -> SandboxConfig:
        """Read ``SANDBOX_*`` variables (of ``environ``, else the process's); ``overrides``
        (CLI flags; None: not given) win over them. A bad value names its variable."""
        given = {k: v for k, v in overrides.items() if v is not None}
        token = _ENVIRON.set(environ)
        try:
            return cls(**given)
        except ValidationError as exc:
            err = exc.errors()[0]
            field = str(err["loc"][0]) if err["loc"] else "?"
            var = env_var(field) if field in cls.model_fields else field
            got = err.get("input")
            raise InvalidArgumentError(
                f"bad value for {var}: {err['msg']} (got {got!r})",
                hint=f"Fix or unset {var}.",
            ) from exc
        finally:
            _ENVIRON.reset(token)

    @classmethod
    def defaults(cls) -> SandboxConfig:
        """The configuration with every variable unset."""
        return cls.from_env({})


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
LABEL_ROLE = "sandbox.role"  # what a container or network is for, when it is not a session

SESSION_HOME = "/home/sandbox"
WORKSPACE = "/workspace"
SANDBOX_UID = 1000
KEEPALIVE_UID = 65534

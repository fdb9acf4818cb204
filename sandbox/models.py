"""Requests and results of the engine, shaped exactly like the contract's MCP tools.

The MCP layer uses these as its input and output schemas, so field names here *are* the public
surface (CONTRACT.md "MCP tools"). Add optional fields freely; never rename one.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

View = Literal["new", "screen", "scrollback"]
SignalName = Literal["INT", "TERM", "KILL", "HUP", "QUIT", "TSTP", "CONT", "USR1", "USR2"]
Status = Literal["running", "exited"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Limits(_Model):
    memory_mb: int
    cpus: float
    pids: int


class CreateRequest(_Model):
    """Input of ``session_create``."""

    project_path: str = Field(description="Absolute path of the host project directory.")
    name: str | None = Field(default=None, max_length=64)
    image: str | None = None
    command: list[str] | None = Field(
        default=None, description='argv to run instead of the shell, e.g. ["python3"].'
    )
    env: dict[str, str] = Field(default_factory=dict)
    workdir: str = "/workspace"
    network: bool | list[str] | None = Field(
        default=None,
        description="false: none; true: the full network (where allowed); a list of host "
        'patterns ("pkg.test", "*.github.com", "host:443"): those hosts only, through the '
        "egress proxy.",
    )
    read_only_project: bool = False
    rows: int = Field(default=24, ge=2, le=1000)
    cols: int = Field(default=80, ge=10, le=1000)
    memory_mb: int | None = Field(default=None, ge=32)
    cpus: float | None = Field(default=None, gt=0)
    pids: int | None = Field(default=None, ge=16)
    durable: bool | None = None
    runtime: str | None = Field(
        default=None,
        description='OCI runtime, e.g. "runsc" (gVisor), within what the server allows.',
    )


class _SessionIdentity(_Model):
    session_id: str
    name: str


class _ContainerRef(_SessionIdentity):
    container_id: str


class SessionFields(_SessionIdentity):
    """The create fields of the contract, fixed for a session's life: ``SessionCreated`` (the
    public result) and ``sandbox.session.spec.SessionSpec`` (the server's own record) both
    derive from this one list."""

    image: str
    project_path: str
    workdir: str
    rows: int
    cols: int
    network: bool
    durable: bool
    limits: Limits
    created_at: str
    read_only_project: bool = False
    command: list[str] | None = None
    runtime: str | None = None


# The bases' order is the schema's property order (pydantic follows the reversed MRO):
# session_id, name (_SessionIdentity), container_id, then the create fields, as the contract has
# them; tests/unit/test_output_schemas.py holds it there.
class SessionCreated(SessionFields, _ContainerRef):
    """Output of ``session_create``."""

    egress_allow: list[str] | None = Field(
        default=None,
        description="The hosts the session may reach through the egress proxy (network is "
        "true then, but limited to these); null: no allow-list (network is none or full).",
    )
    project_writable: bool = Field(
        default=True,
        description="The shell can create files in the project; when false, `notices` says "
        "why and how to fix it (unless read_only_project was asked for).",
    )
    notices: list[str] = Field(
        default_factory=list,
        description="Things the agent should know before it starts, each with its fix.",
    )


class EgressDecision(_Model):
    """One connection the egress proxy allowed or refused."""

    time: str
    method: str
    host: str
    port: int
    allowed: bool
    status: int = Field(description="The proxy's HTTP status (403: refused by the allow-list).")
    bytes_in: int = Field(description="Bytes sent to the session.")
    bytes_out: int = Field(description="Bytes the session sent.")


class EgressSummary(_Model):
    """A session's egress: its allow-list, its proxy and what the proxy decided."""

    allow: list[str]
    proxy: str = Field(
        description="The proxy's address (the session's HTTP(S)_PROXY, less its credentials)."
    )
    allowed: int = 0
    denied: int = 0
    recent: list[EgressDecision] = Field(default_factory=list)


class SessionUpdated(_Model):
    """Output of ``session_update``."""

    session_id: str
    egress_allow: list[str] | None


class SessionSummary(_Model):
    session_id: str
    name: str
    project_path: str
    status: Status
    busy: bool
    durable: bool
    created_at: str
    last_activity_at: str


class SessionList(_Model):
    sessions: list[SessionSummary]
    count: int


class Cursor(_Model):
    row: int
    col: int


class Usage(_Model):
    memory_mb: float | None = None
    cpu_percent: float | None = None
    pids: int | None = None
    pids_max: int | None = None


class SessionInfo(SessionCreated):
    """Output of ``session_info``: the create fields plus live state."""

    status: Status
    busy: bool
    exit_code: int | None = None
    oom_killed: bool = False
    cursor: Cursor
    foreground: str | None = None
    cwd: str | None = None
    usage: Usage
    log_bytes: int
    attach_command: str
    last_activity_at: str
    resets: int = Field(default=0, description="Times the container was reset (pids limit).")
    shell_restarts: int = Field(
        default=0, description="Times a shell that stopped answering was replaced."
    )
    egress: EgressSummary | None = Field(
        default=None, description="The allow-list session's egress (null without one)."
    )


class Destroyed(_Model):
    destroyed: bool
    exit_code: int | None = None


class LogRange(_Model):
    from_byte: int
    to_byte: int


class ExecResult(_Model):
    """Output of ``execute``. A failing or timed-out command is data here, never an error."""

    session_id: str
    output: str
    exit_code: int | None
    timed_out: bool = False
    interrupted: bool = False
    signals_sent: list[str] = Field(default_factory=list)
    still_running: bool = False
    truncated: bool = False
    total_lines: int = 0
    log_range: LogRange
    duration_ms: int
    oom_killed: bool = False
    idle: bool = Field(
        default=False,
        description="Returned early (idle_timeout_s or background): the program waits for "
        "input, or printed nothing for idle_timeout_s.",
    )
    waiting_for_input: bool = Field(
        default=False,
        description="Returned as soon as the program waited for terminal input (the kernel "
        "says so: it sleeps reading the terminal), e.g. a REPL's prompt: type into it with send.",
    )
    session_reset: bool = Field(
        default=False, description="The container had to be reset to stop the command."
    )
    shell_exited: bool = Field(
        default=False,
        description="The shell itself exited (`exit`, `set -e`, `exec`): exit_code is its "
        "status. A login-shell session lives on: the next execute starts a fresh shell in the "
        "same container (see notices).",
    )
    shell_restarted: bool = Field(
        default=False,
        description="The shell stopped answering (its output redirected, its functions unset, "
        "or it was killed) and was replaced by a fresh one in the same container: the "
        "directory, variables and functions are back to their defaults.",
    )
    stray_processes_killed: int = Field(
        default=0,
        description="Processes the timed-out command had started outside its process group "
        "(setsid, nohup, double forks), killed after the timeout.",
    )
    notices: list[str] = Field(
        default_factory=list,
        description="What the session did on its own to run this command, or what the agent "
        "should know about the result (a fresh shell, a cleared pids limit, a program put in "
        "the background), each in a sentence.",
    )


class ReadResult(_Model):
    """Output of ``read`` (and of ``send`` with ``wait_ms``)."""

    content: str
    lines: int
    cursor: Cursor
    rows: int
    cols: int
    alternate_screen: bool
    title: str
    matched: bool | None = None
    idle: bool = False
    exited: bool = False
    exit_code: int | None = None
    has_more: bool = False
    busy: bool = False
    notices: list[str] = Field(
        default_factory=list,
        description="What the agent should know: e.g. that a person typed into the terminal.",
    )


class SendResult(_Model):
    """Output of ``send``: ``bytes_sent``, plus the read result's fields when ``wait_ms`` > 0."""

    bytes_sent: int
    content: str | None = None
    lines: int | None = None
    cursor: Cursor | None = None
    rows: int | None = None
    cols: int | None = None
    alternate_screen: bool | None = None
    title: str | None = None
    matched: bool | None = None
    idle: bool | None = None
    exited: bool | None = None
    exit_code: int | None = None
    has_more: bool | None = None
    busy: bool | None = None
    notices: list[str] | None = None


class SignalResult(_Model):
    stopped: bool
    signals_sent: list[str]
    foreground_before: str | None
    foreground_after: str | None
    session_reset: bool = False


class ResizeResult(_Model):
    rows: int
    cols: int


class LogChunk(_Model):
    chunk: str
    from_byte: int
    next_byte: int
    eof: bool
    total_bytes: int


class EngineInfo(_Model):
    name: str
    version: str
    api_version: str
    runtimes: list[str]


class Defaults(_Model):
    image: str
    memory_mb: int
    cpus: float
    pids: int
    timeout_s: float
    network: bool


class EgressStatus(_Model):
    """The egress proxy as the server sees it."""

    allow: list[str] = Field(description="SANDBOX_EGRESS_ALLOW: the default and the ceiling.")
    clients_may_widen: bool
    proxy: str | None = Field(description="The proxy container's name (null: none yet).")
    running: bool
    sessions: int = Field(description="This server's sessions behind the proxy.")


class ServerInfo(_Model):
    version: str
    engine: EngineInfo
    defaults: Defaults
    max_sessions: int
    session_count: int
    max_timeout_s: float = 600.0
    egress: EgressStatus | None = None

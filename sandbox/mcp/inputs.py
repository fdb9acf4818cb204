"""The MCP tools' input models: strict where it matters, forgiving where it is safe.

Models (and the clients that relay them) often send ``"30"`` for 30, ``"true"`` for true,
``null`` for "use the default", ``"ctrl+c"`` for ``["ctrl+c"]`` or a JSON-encoded list where a
list belongs. These models accept all of that; paths and the text typed into a terminal are
taken verbatim. Unknown arguments are refused, so a misspelt one is reported rather than
silently ignored. ``validation_error`` turns a pydantic error into the contract's
``INVALID_ARGUMENT`` with a hint that names the field.
"""

from __future__ import annotations

import json
import shlex
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from sandbox.errors import InvalidArgumentError, SandboxError
from sandbox.models import CreateRequest, SignalName, View
from sandbox.shell.ladder import SIGNAL_NUMBERS
from sandbox.terminal.keys import parse_paste

_SCALARS = (bool, int, float, bool | None, int | None, float | None)
_SIGNAL_BY_NUMBER = {number: name for name, number in SIGNAL_NUMBERS.items()}

SESSION_ID = Field(description="The session_id returned by session_create (or session_list).")


def _forgive(model: type[BaseModel], data: Any) -> Any:
    """Drop nulls (= the default) and surrounding blanks of scalar values given as strings."""
    if not isinstance(data, dict):
        return data
    fields = model.model_fields
    out: dict[str, Any] = {}
    for key, value in data.items():
        if value is None:
            continue
        field = fields.get(key)
        if isinstance(value, str) and field is not None and field.annotation in _SCALARS:
            value = value.strip()
        out[key] = value
    return out


def _json_or(value: Any, kind: type) -> Any:
    """``value`` decoded from JSON when it is a string holding a ``kind`` (list or dict)."""
    if isinstance(value, str) and value.strip()[:1] in ("[", "{"):
        try:
            decoded = json.loads(value)
        except ValueError:
            return value
        if isinstance(decoded, kind):
            return decoded
    return value


class ToolInput(BaseModel):
    """Base of every tool's arguments."""

    model_config = ConfigDict(extra="forbid")

    @model_validator(mode="before")
    @classmethod
    def _forgiving(cls, data: Any) -> Any:
        return _forgive(cls, data)


class NoInput(ToolInput):
    """A tool without arguments."""


class SessionInput(ToolInput):
    session_id: str = SESSION_ID


class SessionCreateInput(CreateRequest):
    """``session_create``: the engine's ``CreateRequest``, described, parsed forgivingly."""

    project_path: str = Field(
        description="Absolute path of the host project directory; mounted at workdir."
    )
    name: str | None = Field(
        default=None,
        max_length=64,
        description="A name to find the session by (letters, digits, . _ -); default: the "
        "project directory's name.",
    )
    image: str | None = Field(
        default=None, description="Container image; default: the server's session image."
    )
    command: list[str] | None = Field(
        default=None,
        description='argv to run instead of the login shell, e.g. ["python3"] (then use send '
        "and read; execute needs the shell).",
    )
    env: dict[str, str] = Field(
        default_factory=dict, description='Environment variables, e.g. {"DEBUG": "1"}.'
    )
    workdir: str = Field(
        default="/workspace", description="Where the project is mounted and the shell starts."
    )
    network: bool | list[str] | None = Field(
        default=None,
        description="false: no network (the default unless the server sets one); true: the "
        'full network, where the server allows it; a list of hosts, e.g. ["pkg.test", '
        '"*.github.com", "example.com:8443"]: only those, through the egress proxy (HTTP and '
        "HTTPS via HTTP(S)_PROXY; ports 80 and 443 unless one is given).",
    )
    read_only_project: bool = Field(default=False, description="Mount the project read-only.")
    rows: int = Field(default=24, ge=2, le=1000, description="Terminal rows.")
    cols: int = Field(default=80, ge=10, le=1000, description="Terminal columns.")
    memory_mb: int | None = Field(
        default=None, ge=32, description="Memory limit in MiB (within the server's maximum)."
    )
    cpus: float | None = Field(default=None, gt=0, description="CPU limit, e.g. 0.5 or 2.")
    pids: int | None = Field(default=None, ge=16, description="Process-count limit.")
    durable: bool | None = Field(
        default=None,
        description="Keep the shell in tmux so it and its processes survive a server restart "
        "and a person can attach (default: the server's setting, normally false).",
    )

    @model_validator(mode="before")
    @classmethod
    def _forgiving(cls, data: Any) -> Any:
        return _forgive(cls, data)

    @field_validator("network", mode="before")
    @classmethod
    def _network(cls, value: Any) -> Any:
        return _hosts(value)

    @field_validator("command", mode="before")
    @classmethod
    def _argv(cls, value: Any) -> Any:
        value = _json_or(value, list)
        if isinstance(value, str):  # "python3 -q" -> ["python3", "-q"]
            try:
                return shlex.split(value)
            except ValueError as exc:
                raise ValueError(f"cannot split command {value!r}: {exc}") from exc
        return value

    @field_validator("env", mode="before")
    @classmethod
    def _env(cls, value: Any) -> Any:
        value = _json_or(value, dict)
        if isinstance(value, dict):
            return {str(k): v if isinstance(v, str) else json.dumps(v) for k, v in value.items()}
        return value


def _hosts(value: Any) -> Any:
    """A list of hosts given as JSON text or as one comma-separated string."""
    value = _json_or(value, list)
    if isinstance(value, str) and value.strip().lower() not in _BOOL_WORDS:
        return [h.strip() for h in value.split(",") if h.strip()]
    return value


_BOOL_WORDS = {"true", "false", "1", "0", "yes", "no", "on", "off"}


class SessionUpdateInput(SessionInput):
    network: list[str] = Field(
        description='The session\'s new allow-list, e.g. ["pkg.test", "*.github.com"] (within '
        "what the server allows); it replaces the old one at once, without a restart."
    )

    @field_validator("network", mode="before")
    @classmethod
    def _network(cls, value: Any) -> Any:
        return _hosts(value)


class SessionDestroyInput(SessionInput):
    force: bool = Field(
        default=False, description="Destroy even while a command is running in the session."
    )


class ExecuteInput(ToolInput):
    session_id: str | None = Field(
        default=None, description="Session to run in. Omit it and pass project_path instead."
    )
    project_path: str | None = Field(
        default=None,
        description="Absolute host path of a project: reuses that project's session, or creates "
        "one. Use instead of session_id.",
    )
    name: str | None = Field(
        default=None, description="With project_path: which of the project's sessions (by name)."
    )
    command: str = Field(
        description="Shell command line(s) for bash; may be multi-line, with quotes and heredocs."
    )
    timeout_s: float | None = Field(
        default=None,
        gt=0,
        description="Seconds before the command is stopped (INT, TERM, KILL). Default 30; "
        "with background, how long to wait for first output (default 5).",
    )
    idle_timeout_s: float | None = Field(
        default=None,
        gt=0,
        description="Return early once the command printed nothing for this long, or as soon "
        "as it waits for terminal input (waiting_for_input); it keeps running.",
    )
    background: bool = Field(
        default=False,
        description="Start the command and return while it keeps running (after its first "
        "output goes quiet for a second, or at once when it waits for input, e.g. a REPL's "
        "prompt); follow it with read or send.",
    )
    max_lines: int = Field(
        default=200, ge=0, description="Keep only the last N lines of output (0: none)."
    )
    strip_ansi: bool = Field(default=True, description="Remove colours and escape sequences.")


class SendInput(SessionInput):
    text: str | None = Field(
        default=None, description='Text typed as is; end with "\\n" to press Enter.'
    )
    keys: list[str] | None = Field(
        default=None,
        description='Keys pressed after the text, e.g. ["ctrl+c"], ["up", "enter"], ["escape"], '
        '["^D"], ["[F1]"].',
    )
    paste: bool | Literal["auto"] = Field(
        default="auto",
        description='Send text as a bracketed paste: true, false, or "auto" (when multi-line).',
    )
    wait_ms: int = Field(
        default=0,
        ge=0,
        description="Then wait up to this many ms for output to settle and return it (as read).",
    )
    view: View = Field(default="new", description="What to return with wait_ms: as in read.")

    @field_validator("keys", mode="before")
    @classmethod
    def _keys(cls, value: Any) -> Any:
        value = _json_or(value, list)
        return [value] if isinstance(value, str) else value

    @field_validator("paste", mode="before")
    @classmethod
    def _paste(cls, value: Any) -> Any:
        return parse_paste(value)

    @field_validator("view", mode="before")
    @classmethod
    def _view(cls, value: Any) -> Any:
        return value.strip().lower() if isinstance(value, str) else value


class ReadInput(SessionInput):
    view: View = Field(
        default="new",
        description='"new": output since the last read/execute; "screen": the visible screen '
        '(full-screen programs); "scrollback": history lines, paged with offset/limit.',
    )
    strip_ansi: bool = Field(default=True, description="Remove colours and escape sequences.")
    wait_for: str | None = Field(
        default=None,
        description="Regex (Python syntax): wait until the content matches, up to timeout_ms.",
    )
    timeout_ms: int = Field(
        default=0, ge=0, description="How long to wait for wait_for / idle_ms (0: don't wait)."
    )
    idle_ms: int | None = Field(
        default=None, ge=0, description="Return once there was no output for this many ms."
    )
    offset: int = Field(
        default=0, ge=0, description="scrollback: skip this many lines from the end."
    )
    limit: int | None = Field(
        default=None, ge=0, description="scrollback: at most this many lines (default 100)."
    )

    @field_validator("view", mode="before")
    @classmethod
    def _view(cls, value: Any) -> Any:
        return value.strip().lower() if isinstance(value, str) else value


class SignalInput(SessionInput):
    signal: SignalName = Field(
        default="INT", description="INT (default), TERM, KILL, HUP, QUIT, TSTP, CONT, USR1, USR2."
    )
    escalate: bool = Field(
        default=True,
        description="INT/TERM: go on to TERM and KILL until the foreground job is gone.",
    )

    @field_validator("signal", mode="before")
    @classmethod
    def _signal(cls, value: Any) -> Any:
        if isinstance(value, int) and not isinstance(value, bool):
            return _SIGNAL_BY_NUMBER.get(value, value)
        if isinstance(value, str):
            word = value.strip().upper().removeprefix("SIG")
            if word.isdigit():
                return _SIGNAL_BY_NUMBER.get(int(word), value)
            return word
        return value


class ResizeInput(SessionInput):
    rows: int = Field(ge=2, le=1000, description="Terminal rows (2-1000).")
    cols: int = Field(ge=10, le=1000, description="Terminal columns (10-1000).")


class ReadLogInput(SessionInput):
    from_byte: int = Field(
        default=0,
        description="Byte offset in the session's raw log; negative counts from the end. Use an "
        "execute result's log_range.from_byte, then each answer's next_byte.",
    )
    max_bytes: int = Field(
        default=65536, ge=1, le=1024 * 1024, description="Bytes per page (at most 1 MiB)."
    )
    strip_ansi: bool = Field(
        default=False, description="Clean the chunk (colours, escapes, \\r overwrites) for reading."
    )


def validation_error(tool: str, model: type[BaseModel], exc: ValidationError) -> SandboxError:
    """The contract's ``INVALID_ARGUMENT`` for a pydantic error, naming the first bad field."""
    errors = exc.errors(include_url=False)
    first = errors[0] if errors else None
    if first is None:
        return InvalidArgumentError(f"{tool}: invalid arguments")
    loc = ".".join(str(part) for part in first["loc"]) or "arguments"
    field_name = str(first["loc"][0]) if first["loc"] else ""
    cause = (first.get("ctx") or {}).get("error")
    if isinstance(cause, SandboxError):  # raised by one of our parsers (e.g. paste)
        return InvalidArgumentError(f"{tool}: {loc}: {cause.message}", hint=cause.hint)
    kind = first["type"]
    fields = model.model_fields
    if kind == "extra_forbidden":
        valid = ", ".join(fields) or "none"
        return InvalidArgumentError(
            f"{tool}: unknown argument {field_name!r}",
            hint=f"{tool} takes these arguments: {valid}.",
        )
    info = fields.get(field_name)
    about = info.description if info is not None and info.description else ""
    if kind == "missing":
        return InvalidArgumentError(
            f"{tool}: {loc} is required", hint=f"Pass {field_name}. {about}".strip()
        )
    shown = repr(first.get("input"))
    if len(shown) > 80:
        shown = shown[:77] + "..."
    more = f" (and {len(errors) - 1} more problem(s))" if len(errors) > 1 else ""
    return InvalidArgumentError(
        f"{tool}: {loc}: {first['msg']} (got {shown}){more}",
        hint=f"Fix {field_name}. {about}".strip(),
    )

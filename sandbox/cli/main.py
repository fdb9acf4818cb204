"""The ``sandbox`` command: the only place that parses argv and configures logging (stderr).

Exit codes: 0 ok, 1 error, 2 usage; ``run`` and ``shell`` exit with the command's own code
(124 on ``--timeout``, 128+N after signal N). An error is one line on stderr with a hint; the
traceback only with ``--debug``. The verbs live in one module per group: ``box`` (run, shell,
attach), ``upkeep`` (ls, logs, kill, gc, doctor, image), ``serve`` (mcp, serve); the work they
do in ``run``, ``attach``, ``inventory`` and ``doctor``.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import traceback
from collections.abc import Callable, Sequence
from types import FrameType
from typing import NoReturn

from sandbox.cli import box as box_verbs
from sandbox.cli import serve as serve_verbs
from sandbox.cli import upkeep as upkeep_verbs
from sandbox.cli.console import error_line, usage_exit
from sandbox.config import SandboxConfig
from sandbox.errors import SandboxError
from sandbox.version import __version__

log = logging.getLogger("sandbox")

EXAMPLES = {
    "run": "examples:\n  sandbox run -- pytest -q\n"
    "  sandbox run --project ~/src/app --network --timeout 600 -- sh -c 'pip install . && pytest'",
    "shell": "example:\n  sandbox shell --project ~/src/app",
    "attach": "example:\n  sandbox attach 3f2a9c  (a second shell in that session's container)",
    "ls": "examples:\n  sandbox ls\n  sandbox ls --json | jq -r '.[].session_id'",
    "logs": "example:\n  sandbox logs 3f2a9c -f",
    "kill": "example:\n  sandbox kill 3f2a9c",
    "gc": "examples:\n  sandbox gc --dry-run\n  sandbox gc",
    "doctor": "example:\n  sandbox doctor",
    "image": "example:\n  sandbox image build",
    "mcp": "example (Claude Code):\n  claude mcp add sandbox -- sandbox mcp",
    "serve": "example:\n  SANDBOX_TOKEN=$(openssl rand -hex 32) sandbox serve --host 0.0.0.0",
}


class _Parser(argparse.ArgumentParser):
    """argparse with a one-line usage error (exit 2)."""

    def error(self, message: str) -> NoReturn:
        self.exit(
            2,
            f"{self.prog}: usage error: {message}; hint: `{self.prog} --help` shows the options "
            "and an example\n",
        )


class _Terminated(Exception):
    """SIGTERM or SIGHUP arrived: unwind (and clean up) like KeyboardInterrupt."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _positive(
    kind: type[float] | type[int], minimum: float | None = None
) -> Callable[[str], float]:
    """An argparse type: a number > 0, or >= ``minimum`` when given."""

    def parse(text: str) -> float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        if minimum is None and value <= 0:
            raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
        if minimum is not None and value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum:g}, got {text}")
        return value

    return parse


def _env_pair(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected K=V, got {text!r}")
    return key, value


_DEFAULTS = SandboxConfig()


_Add = Callable[..., _Parser]
_FORMAT = argparse.RawDescriptionHelpFormatter


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="sandbox",
        description="The terminal AI agents get when they must not touch the host: throwaway "
        "Docker sessions with a TTY shell.",
        epilog="Run `sandbox COMMAND --help` for one command's options and an example.",
        formatter_class=_FORMAT,
    )
    parser.add_argument("--version", action="version", version=f"sandbox {__version__}")
    parser.add_argument("--debug", action="store_true", help="verbose logs and tracebacks")
    common = _Parser(add_help=False)
    common.add_argument(
        "--debug", action="store_true", default=argparse.SUPPRESS, help="verbose logs, tracebacks"
    )
    sub = parser.add_subparsers(dest="cmd", metavar="COMMAND", parser_class=_Parser)

    def add(name: str, help_: str, parents: Sequence[_Parser] = ()) -> _Parser:
        p: _Parser = sub.add_parser(
            name,
            help=help_,
            description=help_[0].upper() + help_[1:] + ".",
            epilog=EXAMPLES[name],
            formatter_class=_FORMAT,
            parents=[common, *parents],
        )
        return p

    _add_box_verbs(add)
    _add_upkeep_verbs(add)
    _add_serve_verbs(add)
    return parser


def _box_options() -> _Parser:
    """The options of every verb that creates a box (run, shell)."""
    box = _Parser(add_help=False)
    box.add_argument(
        "--project",
        default=".",
        metavar="DIR",
        help="project directory mounted at /workspace (default: the current directory)",
    )
    box.add_argument(
        "--image",
        default=None,
        help=f"session image (default: SANDBOX_IMAGE, else {_DEFAULTS.image})",
    )
    box.add_argument("--network", action="store_true", help="give the sandbox network access")
    box.add_argument(
        "--allow",
        action="append",
        default=[],
        metavar="HOST",
        help="let the sandbox reach HOST (pkg.test, *.github.com, host:port) through the egress "
        "proxy, and nothing else (repeatable)",
    )
    box.add_argument(
        "--env", action="append", type=_env_pair, default=[], metavar="K=V", help="set a variable"
    )
    box.add_argument(
        "--memory",
        type=_positive(int, 32),
        metavar="MB",
        help=f"memory limit (default: SANDBOX_MEMORY_MB, else {_DEFAULTS.memory_mb})",
    )
    box.add_argument(
        "--cpus",
        type=_positive(float),
        help=f"CPU limit, e.g. 1.5 (default: SANDBOX_CPUS, else {_DEFAULTS.cpus:g})",
    )
    box.add_argument("--read-only-project", action="store_true", help="mount the project read-only")
    return box


def _add_box_verbs(add: _Add) -> None:
    """run, shell, attach (``sandbox.cli.box``)."""
    box = _box_options()
    run = add("run", "run one command in a throwaway sandbox, exit with its code", [box])
    run.add_argument(
        "--timeout",
        type=_positive(float),
        metavar="S",
        help="stop the command after S seconds (default: the container's lifetime, "
        f"SANDBOX_MAX_LIFETIME_S, else {_DEFAULTS.max_lifetime_s} s)",
    )
    run.add_argument("argv", nargs=argparse.REMAINDER, metavar="-- CMD [ARGS...]")
    add("shell", "an interactive sandboxed shell (the container goes when it exits)", [box])
    attach = add("attach", "open a second shell in a running session's container")
    attach.add_argument("id", help="session id (or a unique prefix, or its name)")


def _add_upkeep_verbs(add: _Add) -> None:
    """ls, logs, kill, gc, doctor, image (``sandbox.cli.upkeep``)."""
    ls = add("ls", "list the sandbox sessions of every server on this engine")
    ls.add_argument("--json", action="store_true", help="a JSON list for scripts")
    logs = add("logs", "print a session's terminal log")
    logs.add_argument("id", help="session id (or a unique prefix, or its name)")
    logs.add_argument("-f", "--follow", action="store_true", help="follow until the session ends")
    logs.add_argument("--raw", action="store_true", help="the bytes as recorded, unfiltered")
    logs.add_argument(
        "--cast", action="store_true", help="print the path of its asciicast recording"
    )
    logs.add_argument(
        "--egress", action="store_true", help="the egress proxy's decisions for it instead"
    )
    kill = add("kill", "remove a session's container now")
    kill.add_argument("id", help="session id (or a unique prefix, or its name)")
    gc = add("gc", "remove sandbox containers whose server is gone")
    gc.add_argument("--dry-run", action="store_true", help="list them, remove nothing")
    gc.add_argument(
        "--all-owners", action="store_true", help="not only this owner's (SANDBOX_OWNER)"
    )
    add("doctor", "check the engine, image, limits and permissions (ok/FAIL with the fix)")
    image = add("image", "manage the session image")
    image_sub = image.add_subparsers(dest="image_cmd", metavar="ACTION", parser_class=_Parser)
    build = image_sub.add_parser(
        "build",
        help="build the packaged session image (progress shown)",
        description="Build the packaged session image (progress shown).",
        epilog=EXAMPLES["image"],
        formatter_class=_FORMAT,
    )
    build.add_argument(
        "--egress",
        action="store_true",
        help="build the egress proxy's image instead (built on first use otherwise)",
    )


def _add_serve_verbs(add: _Add) -> None:
    """mcp, serve (``sandbox.cli.serve``)."""
    add("mcp", "MCP server on stdio (what an agent's MCP config launches)")
    serve = add("serve", "MCP server on streamable HTTP at /mcp")
    serve.add_argument("--host", default="127.0.0.1", help="address to bind (default: %(default)s)")
    serve.add_argument("--port", type=int, default=8765, help="port (default: %(default)s)")
    serve.add_argument("--token", default=None, help="bearer token (or SANDBOX_TOKEN)")
    serve.add_argument(
        "--web",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="also serve the web view at /ui (or SANDBOX_WEB)",
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    debug = bool(getattr(args, "debug", False))
    logging.basicConfig(
        level=logging.DEBUG if debug else logging.WARNING,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if args.cmd is None:
        parser.print_help(sys.stderr)
        return 2
    if args.cmd == "image" and args.image_cmd is None:
        usage_exit("image", "choose an action: sandbox image build")
    previous = {}
    if args.cmd not in ("mcp", "serve"):  # those stop on their own signal handling
        previous = {sig: signal.signal(sig, _raise_terminated) for sig in _TERMINATING}
    try:
        return COMMANDS[args.cmd](args, parser)
    except SandboxError as exc:
        if debug:
            traceback.print_exc(file=sys.stderr)
        error_line(f"{exc.message.rstrip('.')}; hint: {exc.hint}")
        return 1
    except KeyboardInterrupt:
        return 130
    except _Terminated as exc:
        return 128 + exc.signum
    except BrokenPipeError:  # e.g. `sandbox ls | head -1`
        from sandbox.cli.console import silence_stdout

        silence_stdout()
        return 141
    except Exception as exc:
        if debug:
            traceback.print_exc(file=sys.stderr)
        error_line(
            f"unexpected error: {type(exc).__name__}: {exc}; hint: run with --debug for the "
            "traceback and report it"
        )
        return 1
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


_TERMINATING = (signal.SIGTERM, signal.SIGHUP)


def _raise_terminated(signum: int, frame: FrameType | None) -> None:
    raise _Terminated(signum)


COMMANDS: dict[str, Callable[[argparse.Namespace, argparse.ArgumentParser], int]] = {
    "run": box_verbs.run_verb,
    "shell": box_verbs.shell_verb,
    "attach": box_verbs.attach_verb,
    "ls": upkeep_verbs.ls_verb,
    "logs": upkeep_verbs.logs_verb,
    "kill": upkeep_verbs.kill_verb,
    "gc": upkeep_verbs.gc_verb,
    "doctor": upkeep_verbs.doctor_verb,
    "image": upkeep_verbs.image_verb,
    "mcp": serve_verbs.mcp_verb,
    "serve": serve_verbs.serve_verb,
}

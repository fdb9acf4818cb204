"""The ``sandbox`` command: the only place that parses argv and configures logging (stderr).

Exit codes: 0 ok, 1 error, 2 usage; ``run`` exits with the command's own code.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from types import FrameType

from sandbox import __version__
from sandbox.config import SandboxConfig
from sandbox.errors import SandboxError
from sandbox.models import CreateRequest
from sandbox.terminal import clean_transcript

log = logging.getLogger("sandbox")

EXAMPLES = {
    "run": "example: sandbox run --project . -- pytest -q",
    "mcp": "example (Claude Code): claude mcp add sandbox -- sandbox mcp",
    "serve": "example: SANDBOX_TOKEN=$(openssl rand -hex 32) sandbox serve --host 0.0.0.0",
    "image": "example: sandbox image build",
    "gc": "example: sandbox gc --dry-run",
}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sandbox",
        description="The terminal AI agents get when they must not touch the host.",
        epilog="Run `sandbox COMMAND --help` for one command's options.",
    )
    parser.add_argument("--version", action="version", version=f"sandbox {__version__}")
    parser.add_argument("--debug", action="store_true", help="verbose logs and tracebacks")
    sub = parser.add_subparsers(dest="cmd", metavar="COMMAND")

    run = sub.add_parser(
        "run", help="run one command in a throwaway sandbox", epilog=EXAMPLES["run"]
    )
    run.add_argument("--project", default=".", help="project directory mounted at /workspace")
    run.add_argument("--image", default=None, help="session image (default sandbox-session)")
    run.add_argument("--network", action="store_true", help="give the sandbox network access")
    run.add_argument("--timeout", type=float, default=None, help="seconds before it is stopped")
    run.add_argument("--env", action="append", default=[], metavar="K=V", help="set a variable")
    run.add_argument("--memory", type=int, default=None, metavar="MB", help="memory limit")
    run.add_argument("--cpus", type=float, default=None, help="CPU limit")
    run.add_argument("--read-only-project", action="store_true", help="mount the project read-only")
    run.add_argument("argv", nargs=argparse.REMAINDER, help="-- CMD [ARGS...]")

    sub.add_parser("mcp", help="MCP server on stdio", epilog=EXAMPLES["mcp"])
    serve = sub.add_parser("serve", help="MCP server on streamable HTTP", epilog=EXAMPLES["serve"])
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8765)
    serve.add_argument("--token", default=None, help="bearer token (or SANDBOX_TOKEN)")

    image = sub.add_parser("image", help="manage the session image", epilog=EXAMPLES["image"])
    image_sub = image.add_subparsers(dest="image_cmd", metavar="ACTION")
    image_sub.add_parser("build", help="build the packaged session image (progress shown)")

    gc = sub.add_parser("gc", help="remove containers whose server is gone", epilog=EXAMPLES["gc"])
    gc.add_argument("--dry-run", action="store_true", help="list them, remove nothing")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.debug else logging.WARNING,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if args.cmd is None:
        parser.print_help(sys.stderr)
        return 2
    try:
        if args.cmd == "run":
            return _run(args, parser)
        if args.cmd == "image":
            return _image(args, parser)
        if args.cmd == "gc":
            return _gc(args)
        if args.cmd == "mcp":
            from sandbox.mcp_server import run_stdio

            run_stdio(SandboxConfig.from_env())
            return 0
        if args.cmd == "serve":
            from sandbox.mcp_server import run_http

            config = SandboxConfig.from_env(token=args.token)
            run_http(config, host=args.host, port=args.port)
            return 0
    except SandboxError as exc:
        if args.debug:
            log.exception("failed")
        print(f"sandbox: {exc.code}: {exc.message}\n  hint: {exc.hint}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    parser.print_help(sys.stderr)
    return 2


def _stderr_line(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _run(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from sandbox.manager import SessionManager

    argv = list(args.argv)
    if argv and argv[0] == "--":
        argv = argv[1:]
    if not argv:
        parser.error("run needs a command: sandbox run [OPTIONS] -- CMD [ARGS...]")
    env: dict[str, str] = {}
    for item in args.env:
        key, sep, value = item.partition("=")
        if not sep:
            parser.error(f"--env expects K=V, got {item!r}")
        env[key] = value
    project = str(Path(args.project).expanduser().absolute())
    config = SandboxConfig.from_env()
    manager = SessionManager(config, on_build_line=_stderr_line)
    cancel = threading.Event()
    interrupts = 0

    def on_sigint(signum: int, frame: FrameType | None) -> None:
        nonlocal interrupts
        interrupts += 1
        cancel.set()

    previous = signal.signal(signal.SIGINT, on_sigint)
    with contextlib.suppress(ValueError):
        signal.signal(signal.SIGTERM, on_sigint)
    tty = sys.stdout.isatty()
    out = sys.stdout.buffer

    def write(data: bytes) -> None:
        if not tty:
            data = clean_transcript(data, strip_ansi=True).encode("utf-8", "replace")
        out.write(data)
        out.flush()

    try:
        created = manager.create(
            CreateRequest(
                project_path=project,
                image=args.image,
                network=True if args.network else None,
                env=env,
                memory_mb=args.memory,
                cpus=args.cpus,
                read_only_project=args.read_only_project,
                cols=os.get_terminal_size().columns if tty else 200,
            )
        )
        import shlex

        result = manager.execute(
            shlex.join(argv),
            session_id=created.session_id,
            timeout_s=args.timeout or config.max_timeout_s,
            max_lines=0,
            cancel=cancel,
            on_output=write,
        )
        if result.timed_out:
            print(f"sandbox: timed out after {args.timeout:g} s", file=sys.stderr)
            return result.exit_code if result.exit_code is not None else 124
        if result.interrupted:
            return 130
        return result.exit_code if result.exit_code is not None else 1
    finally:
        signal.signal(signal.SIGINT, previous)
        manager.close()


def _image(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    if args.image_cmd != "build":
        parser.error("usage: sandbox image build")
    from sandbox.backends.docker import DockerBackend
    from sandbox.image import build_session_image

    build_session_image(DockerBackend(), _stderr_line)
    return 0


def _gc(args: argparse.Namespace) -> int:
    from sandbox.manager import SessionManager

    manager = SessionManager(SandboxConfig.from_env())
    try:
        found = manager.gc(dry_run=args.dry_run)
    finally:
        manager.close()
    verb = "would remove" if args.dry_run else "removed"
    for state in found:
        print(f"{verb} {state.name or state.id[:12]} ({state.status})")
    if not found:
        print("nothing to remove")
    return 0

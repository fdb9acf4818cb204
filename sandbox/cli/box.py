"""The verbs that open a box for a person: ``run`` (one command in a throwaway session),
``shell`` (an interactive shell in one), ``attach`` (a terminal on an agent's session)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from sandbox.cli.console import error_line, stderr_line, usage_exit
from sandbox.config import SandboxConfig
from sandbox.models import CreateRequest


def box_request(args: argparse.Namespace) -> CreateRequest:
    """What the flags of `run` and `shell` ask of the session."""
    return CreateRequest(
        project_path=str(Path(args.project).expanduser().absolute()),
        image=args.image,
        network=list(args.allow) if args.allow else (True if args.network else None),
        env=dict(args.env),
        memory_mb=args.memory,
        cpus=args.cpus,
        read_only_project=args.read_only_project,
    )


def box_config(
    args: argparse.Namespace, config: SandboxConfig, timeout_s: float | None = None
) -> SandboxConfig:
    """``config`` with maxima raised to explicit flags (the CLI's user is the operator).

    The project directory the person named is allowed as a root of its own (system
    directories, ``/`` and engine sockets are still refused by the path checks)."""
    update: dict[str, object] = {}
    project = getattr(args, "project", None)
    if project is not None:
        named = Path(project).expanduser().absolute()
        if named.is_dir():
            update["allowed_roots"] = (*config.allowed_roots, named.resolve())
    if args.memory is not None and args.memory > config.max_memory_mb:
        update["max_memory_mb"] = args.memory
    if args.cpus is not None and args.cpus > config.max_cpus:
        update["max_cpus"] = args.cpus
    if timeout_s is not None and timeout_s > config.max_timeout_s:
        update["max_timeout_s"] = timeout_s
    return config.model_copy(update=update) if update else config


def run_verb(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from sandbox.cli.run import RunOptions, run_command
    from sandbox.session.manager import SessionManager

    argv = list(args.argv)
    if argv and argv[0] == "--":
        argv = argv[1:]
    if not argv:
        usage_exit("run", "run needs a command: sandbox run [OPTIONS] -- CMD [ARGS...]")
    request = box_request(args)
    config = SandboxConfig.from_env()
    timeout = args.timeout if args.timeout is not None else float(config.max_lifetime_s)
    config = box_config(args, config, timeout)
    manager = SessionManager(config, on_build_line=stderr_line)
    return run_command(manager, RunOptions(argv=argv, request=request, timeout_s=timeout))


def shell_verb(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from sandbox.cli.attach import SessionLink, bridge
    from sandbox.cli.console import terminal_size
    from sandbox.cli.run import remove_own_containers
    from sandbox.session.manager import SessionManager

    manager = SessionManager(box_config(args, SandboxConfig.from_env()), on_build_line=stderr_line)
    try:
        rows, cols = terminal_size(sys.stdout.fileno())
        request = box_request(args).model_copy(update={"rows": rows, "cols": cols})
        created = manager.create(request)
        signum = bridge(SessionLink(manager.get(created.session_id)))
        code = manager.destroy(created.session_id, force=True).exit_code
        if signum is not None:
            return 128 + signum
        if code is None:
            error_line("the session ended without an exit code (was its container removed?)")
            return 1
        return code
    finally:
        remove_own_containers(manager)


def attach_verb(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from sandbox.cli.attach import attach

    return attach(args.id)

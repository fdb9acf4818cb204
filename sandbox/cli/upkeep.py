"""The verbs that look after what the engine holds: ``ls``, ``logs``, ``kill``, ``gc``,
and the machine itself: ``doctor``, ``image build``."""

from __future__ import annotations

import argparse
import json
import sys

from sandbox.cli.console import stderr_line
from sandbox.config import SandboxConfig
from sandbox.errors import SandboxError, SessionNotFoundError


def ls_verb(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from sandbox.cli.inventory import rows_table, session_rows
    from sandbox.session.manager import SessionManager

    manager = SessionManager(SandboxConfig.from_env())
    try:
        rows = session_rows(manager, manager.backend)
    finally:
        manager.close()
    if args.json:
        print(json.dumps([r.to_dict() for r in rows], indent=2))
    elif rows:
        print(rows_table(rows))
    else:
        print("no sandbox sessions on this engine", file=sys.stderr)
    return 0


def logs_verb(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from sandbox.cli.inventory import print_log, session_log_path

    config = SandboxConfig.from_env()
    if args.cast:
        from sandbox.backends import connect
        from sandbox.backends.base import Backend

        backend: Backend | None
        try:
            backend = connect()
        except SandboxError:
            backend = None  # the files are on disk anyway
        cast = session_log_path(config.state_dir, backend, args.id).with_name("session.cast")
        if not cast.exists():
            raise SessionNotFoundError(
                f"session {args.id} has no recording",
                hint="Recording is on unless SANDBOX_RECORD=0; play one with `asciinema play`.",
            )
        print(cast)
        return 0
    if args.egress:
        from sandbox.cli.inventory import print_egress_log

        print_egress_log(config, args.id)
        return 0
    print_log(config, args.id, follow=args.follow, raw=args.raw)
    return 0


def kill_verb(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from sandbox.backends import connect
    from sandbox.cli.inventory import find_container
    from sandbox.config import LABEL_NAME, LABEL_SESSION

    backend = connect()
    state = find_container(backend, args.id)
    backend.remove(state.id)
    sid = state.labels.get(LABEL_SESSION, "?")
    print(f"removed session {sid} ({state.labels.get(LABEL_NAME, state.name)})")
    return 0


def gc_verb(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from sandbox.cli.inventory import find_orphans, orphans_table, remove_orphans
    from sandbox.session.manager import SessionManager

    config = SandboxConfig.from_env()
    manager = SessionManager(config)
    try:
        owner = None if args.all_owners else config.owner
        orphans = find_orphans(manager, owner)
        scope = "any owner" if owner is None else f"owner {owner}"
        if not orphans:
            wider = "" if owner is None else "; --all-owners looks at every owner's"
            print(f"nothing to remove: no orphaned sandbox containers of {scope}{wider}")
            return 0
        noun = "container" if len(orphans) == 1 else "containers"
        if args.dry_run:
            print(f"would remove {len(orphans)} orphaned {noun} of {scope}:")
            print(orphans_table(orphans))
            print("run `sandbox gc` to remove them")
            return 0
        removed = remove_orphans(manager, orphans)
        print(orphans_table(removed))
        print(f"removed {len(removed)} orphaned {noun} of {scope}")
        return 0
    finally:
        manager.close()


def doctor_verb(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from sandbox.cli.check import exit_code
    from sandbox.cli.doctor import run_checks

    checks = []
    for check in run_checks():
        print(check.render(), flush=True)
        checks.append(check)
    code = exit_code(checks)
    failed = [c.name for c in checks if not c.passed]
    if failed:
        print(f"\n{len(failed)} check(s) failed: {', '.join(failed)}")
    else:
        print("\nall required checks passed")
    return code


def image_verb(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from sandbox.backends import connect
    from sandbox.session.image import build_session_image

    if getattr(args, "egress", False):
        from sandbox.egress.proxy import build_image

        build_image(connect(), stderr_line)
        return 0
    build_session_image(connect(), stderr_line)
    return 0

"""The verbs that serve MCP: ``mcp`` (stdio, one agent) and ``serve`` (HTTP, a team)."""

from __future__ import annotations

import argparse

from sandbox.config import SandboxConfig


def mcp_verb(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from sandbox.mcp.stdio import serve

    serve(SandboxConfig.from_env())
    return 0


def serve_verb(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from sandbox.mcp.http import serve

    config = SandboxConfig.from_env(token=args.token, web=args.web)
    serve(config, host=args.host, port=args.port)
    return 0

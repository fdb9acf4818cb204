"""The output schemas of the tools that return a session's create fields, against the ones
recorded in ``tests/unit/schemas/``: the MCP output schema is the contract, so a refactor of the
models behind it must leave every property, its order and the ``required`` list as they were."""

from __future__ import annotations

import json
import secrets
from pathlib import Path

import anyio
import pytest
from mcp import Client

from sandbox.backends.fake import FakeBackend
from sandbox.config import SandboxConfig
from sandbox.mcp.server import build_server
from sandbox.session.manager import SessionManager

pytestmark = pytest.mark.anyio

RECORDED = Path(__file__).parent / "schemas"
TOOLS = ("session_create", "session_info")


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.parametrize("tool", TOOLS)
async def test_output_schema_is_the_recorded_one_in_the_same_order(
    tool: str, tmp_path: Path
) -> None:
    config = SandboxConfig(owner=f"schema-{secrets.token_hex(4)}", state_dir=tmp_path)
    manager = SessionManager(config, FakeBackend())
    try:
        with anyio.fail_after(20):
            async with Client(build_server(config, manager)) as client:
                listed = {t.name: t for t in (await client.list_tools()).tools}
    finally:
        manager.close()
    schema = listed[tool].output_schema
    recorded = (RECORDED / f"{tool}.json").read_text()
    assert json.dumps(schema, indent=2) + "\n" == recorded

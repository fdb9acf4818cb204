"""Browser tests of the web view: ``sandbox serve --web`` as a subprocess against the real
engine, driven by Debian's chromium through Playwright (never a downloaded browser), while a
real MCP client over HTTP plays the agent. Screenshots go to ``tests/browser/artifacts``
(gitignored).

Two tokens: ``TOKEN`` (the person's and their agent's) and ``OTHER`` (another team member's).
Every container carries this module's owner label and is removed by it.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import docker
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from sandbox.config import LABEL_OWNER
from tests.integration.conftest import *  # noqa: F403 (the engine fixtures)
from tests.served import Served, start_server, stop_server

pytestmark = pytest.mark.docker

OWNER = f"webtest-{secrets.token_hex(4)}"
TOKEN = secrets.token_hex(16)
OTHER = secrets.token_hex(16)
CHROMIUM = os.environ.get("SANDBOX_TEST_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
ARTIFACTS = Path(__file__).with_name("artifacts")


@pytest.fixture(scope="session")
def engine(docker_client: object) -> Iterator[docker.DockerClient]:
    assert isinstance(docker_client, docker.DockerClient)
    yield docker_client
    for container in docker_client.containers.list(
        all=True, filters={"label": f"{LABEL_OWNER}={OWNER}"}
    ):
        container.remove(force=True)


@pytest.fixture(scope="session")
def served(
    engine: docker.DockerClient, allowed_root: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Served]:
    env = dict(os.environ)
    for name in ("SANDBOX_TOKEN", "SANDBOX_TOKENS", "SANDBOX_ALLOWED_HOSTS"):
        env.pop(name, None)
    env.update(
        SANDBOX_OWNER=OWNER,
        SANDBOX_STATE_DIR=str(tmp_path_factory.mktemp("web-state")),
        SANDBOX_ALLOWED_ROOTS=str(allowed_root),
        SANDBOX_MEMORY_MB="512",
        SANDBOX_TOKEN=TOKEN,
        SANDBOX_TOKENS=OTHER,
        SANDBOX_WEB="1",
    )
    served = start_server(env, quiet=False)
    yield served
    assert stop_server(served) == 0


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    if not Path(CHROMIUM).exists():
        pytest.fail(f"no browser at {CHROMIUM}: apt-get install chromium (scripts/setup.sh does)")
    from playwright.sync_api import sync_playwright

    ARTIFACTS.mkdir(exist_ok=True)
    with sync_playwright() as pw:
        launched = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield launched
        launched.close()


@pytest.fixture
def page(browser: Any, served: Served) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1400, "height": 900}, base_url=served.base)
    opened = context.new_page()
    opened.set_default_timeout(20_000)
    refused: list[str] = []
    opened.on(
        "console",
        lambda m: refused.append(m.text) if "Content Security Policy" in m.text else None,
    )
    yield opened
    context.close()
    assert refused == []  # the page and its libraries live within the CSP


def sign_in(page: Any, token: str = TOKEN) -> None:
    page.goto("/ui")
    page.wait_for_url("**/ui/login")
    page.fill("#token", token)
    page.click("button[type=submit]")
    page.wait_for_url("**/ui/")


def shot(page: Any, name: str) -> Path:
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path


def terminal_text(page: Any) -> str:
    return str(page.inner_text("#terminal .xterm-rows"))


class Agent:
    """An MCP client over HTTP with one token: what the person's agent does."""

    def __init__(self, base: str, token: str) -> None:
        self.url = base + "/mcp"
        self.headers = {"Authorization": f"Bearer {token}"}

    def call(self, tool: str, **arguments: Any) -> dict[str, Any]:
        async def go() -> dict[str, Any]:
            async with (
                httpx2.AsyncClient(headers=self.headers, timeout=httpx2.Timeout(30, read=120)) as h,
                Client(streamable_http_client(self.url, http_client=h)) as client,
            ):
                with anyio.fail_after(90):
                    result = await client.call_tool(tool, arguments)
            text = result.content[0].text  # type: ignore[union-attr]
            data: dict[str, Any] = json.loads(text)
            return data

        # Playwright's sync API runs an event loop in this thread: the client gets its own
        results: list[dict[str, Any]] = []
        worker = threading.Thread(target=lambda: results.append(anyio.run(go)))
        worker.start()
        worker.join()
        assert results, f"{tool} failed (see the thread's exception above)"
        return results[0]


@pytest.fixture(scope="session")
def agent(served: Served) -> Agent:
    return Agent(served.base, TOKEN)


@pytest.fixture(scope="session")
def other_agent(served: Served) -> Agent:
    return Agent(served.base, OTHER)


@pytest.fixture(scope="session")
def web_project(allowed_root: Path) -> Iterator[Path]:
    from tests.conftest import make_project

    path = make_project("web")
    yield path
    shutil.rmtree(path, ignore_errors=True)

"""Browser tests of the web view: ``sandbox serve --web`` as a subprocess against the real
engine, driven by Debian's chromium through Playwright (never a downloaded browser), while a
real MCP client over HTTP plays the agent. Screenshots go to ``tests/browser/artifacts``
(gitignored).

Two tokens: ``TOKEN`` (the person's and their agent's) and ``OTHER`` (another team member's).
Every container carries this module's owner label and is removed by it.
"""

from __future__ import annotations

import os
import secrets
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import pytest

from sandbox.config import LABEL_OWNER
from tests.browser.agent import Agent
from tests.browser.chromium import ARTIFACTS, chromium
from tests.integration.conftest import *  # noqa: F403 (the engine fixtures)
from tests.served import Served, start_server, stop_server

pytestmark = pytest.mark.docker

# Package scope, never session: Playwright's sync API keeps an asyncio loop running in the main
# thread while it is open, and the suites after this one run their own loops there.

OWNER = f"webtest-{secrets.token_hex(4)}"
TOKEN = secrets.token_hex(16)
OTHER = secrets.token_hex(16)


@pytest.fixture(scope="package")
def engine(docker_client: object) -> Iterator[docker.DockerClient]:
    assert isinstance(docker_client, docker.DockerClient)
    yield docker_client
    for container in docker_client.containers.list(
        all=True, filters={"label": f"{LABEL_OWNER}={OWNER}"}
    ):
        container.remove(force=True)


@pytest.fixture(scope="package")
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


@pytest.fixture(scope="package")
def browser() -> Iterator[Any]:
    with chromium() as launched:
        yield launched


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


@pytest.fixture(scope="package")
def agent(served: Served) -> Agent:
    return Agent(served.base, TOKEN)


@pytest.fixture(scope="package")
def other_agent(served: Served) -> Agent:
    return Agent(served.base, OTHER)


@pytest.fixture(scope="package")
def web_project(allowed_root: Path) -> Iterator[Path]:
    from tests.conftest import make_project

    path = make_project("web")
    yield path
    shutil.rmtree(path, ignore_errors=True)

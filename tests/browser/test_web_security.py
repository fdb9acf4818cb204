"""The web view's defences, against the real server: nothing without the sign-in cookie,
another token's sessions invisible, HTML and script in what a session shows rendered as text,
forged Origin and Host refused, the Content-Security-Policy on every response."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.browser.conftest import OTHER, TOKEN, Agent, shot, sign_in, terminal_text
from tests.served import Served

pytestmark = pytest.mark.docker

EVIL = "<img src=x onerror=window.__pwned=1>"


def signed_in_client(served: Served, token: str = TOKEN) -> httpx.Client:
    """An HTTP client holding a sign-in cookie, sending this server's Origin like a browser."""
    client = httpx.Client(base_url=served.base, headers={"Origin": served.base}, timeout=30)
    response = client.post("/ui/login", data={"token": token})
    assert response.status_code == 303
    assert response.headers["location"] == "/ui/"
    return client


@pytest.fixture(scope="module")
def evil_project(allowed_root: Path) -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="web-", dir=allowed_root)) / EVIL
    path.mkdir()
    for p in (path, path.parent):
        p.chmod(0o755)
        if os.geteuid() == 0:
            os.chown(p, 1000, 1000)
    yield path
    shutil.rmtree(path.parent, ignore_errors=True)


def test_without_the_cookie_nothing_opens(served: Served, agent: Agent, web_project: Path) -> None:
    sid = agent.call("session_create", project_path=str(web_project), name="no-cookie")[
        "session_id"
    ]
    try:
        anon = httpx.Client(base_url=served.base, headers={"Origin": served.base}, timeout=30)
        page = anon.get("/ui/")
        assert page.status_code == 303
        assert page.headers["location"] == "/ui/login"
        assert anon.get("/ui/api/sessions").status_code == 401
        assert anon.get(f"/ui/api/sessions/{sid}/stream").status_code == 401
        assert anon.get(f"/ui/api/sessions/{sid}/recording").status_code == 401
        typed = anon.post(f"/ui/api/sessions/{sid}/takeover", json={"hold": True})
        assert typed.status_code == 401
        anon.cookies.set("sandbox_ui", TOKEN)
        assert anon.get("/ui/api/sessions").status_code == 401  # the token is not a cookie
        wrong = anon.post("/ui/login", data={"token": "not-the-token"})
        assert wrong.status_code == 303
        assert wrong.headers["location"] == "/ui/login?failed=1"
        assert "set-cookie" not in wrong.headers
    finally:
        agent.call("session_destroy", session_id=sid)


def test_the_cookie_is_httponly_strict_and_not_the_token(served: Served) -> None:
    response = httpx.post(
        served.base + "/ui/login", data={"token": TOKEN}, headers={"Origin": served.base}
    )
    cookie = response.headers["set-cookie"]
    assert "HttpOnly" in cookie
    assert "SameSite=strict" in cookie
    assert "Path=/ui" in cookie
    assert TOKEN not in cookie
    assert TOKEN not in response.headers["location"]


def test_another_tokens_sessions_are_invisible(
    served: Served, agent: Agent, other_agent: Agent, web_project: Path
) -> None:
    theirs = other_agent.call("session_create", project_path=str(web_project), name="theirs")
    sid = theirs["session_id"]
    try:
        mine = signed_in_client(served)
        listed = mine.get("/ui/api/sessions").json()["sessions"]
        assert sid not in [row["session_id"] for row in listed]
        assert mine.get(f"/ui/api/sessions/{sid}/stream").status_code == 404
        assert mine.get(f"/ui/api/sessions/{sid}/recording").status_code == 404
        assert mine.post(f"/ui/api/sessions/{sid}/takeover", json={"hold": True}).status_code == 404
        assert (
            mine.post(f"/ui/api/sessions/{sid}/signal", json={"signal": "KILL"}).status_code == 404
        )
        owner = signed_in_client(served, OTHER)
        assert sid in [r["session_id"] for r in owner.get("/ui/api/sessions").json()["sessions"]]
    finally:
        other_agent.call("session_destroy", session_id=sid)


def test_forged_origin_and_host_are_refused(
    served: Served, agent: Agent, web_project: Path
) -> None:
    sid = agent.call("session_create", project_path=str(web_project), name="forged")["session_id"]
    try:
        mine = signed_in_client(served)
        evil = {"Origin": "http://evil.example"}
        url = f"/ui/api/sessions/{sid}/takeover"
        assert mine.post(url, json={"hold": True}, headers=evil).status_code == 403
        del mine.headers["Origin"]
        assert mine.post(url, json={"hold": True}).status_code == 403
        mine.headers["Origin"] = served.base
        assert mine.post("/ui/login", data={"token": TOKEN}, headers=evil).status_code == 403
        host = mine.get("/ui/api/sessions", headers={"Host": "evil.example"})
        assert host.status_code == 421
        listed = mine.get("/ui/api/sessions").json()["sessions"]
        assert not next(r for r in listed if r["session_id"] == sid)["held_by_person"]
    finally:
        agent.call("session_destroy", session_id=sid)


def test_every_response_carries_the_content_security_policy(served: Served) -> None:
    mine = signed_in_client(served)
    for path in ("/ui/login", "/ui/", "/ui/static/app.js", "/ui/api/sessions", "/ui/nowhere"):
        csp = mine.get(path).headers.get("content-security-policy", "")
        assert "default-src 'none'" in csp, path
        assert "script-src 'self' 'wasm-unsafe-eval'" in csp, path
        assert "unsafe-inline" not in csp.split("script-src")[1].split(";")[0], path
        assert "frame-ancestors 'none'" in csp, path


def test_html_in_a_session_is_shown_as_text_and_never_runs(
    page: Any, agent: Agent, evil_project: Path
) -> None:
    created = agent.call("session_create", project_path=str(evil_project))
    sid = created["session_id"]
    try:
        sign_in(page)
        row = page.wait_for_selector(f"#sessions tbody tr[data-id='{sid}']")
        assert EVIL in row.inner_text()
        script = "<script>window.__pwned=2</script><b onmouseover=window.__pwned=3>bold</b>"
        agent.call("execute", session_id=sid, command=f"printf '%s\\n' '{script}'")
        row.click()
        page.wait_for_function(
            "() => document.querySelector('#terminal .xterm-rows').innerText.includes('bold</b>')"
        )
        assert script in terminal_text(page)
        page.hover("#terminal")
        assert page.evaluate("window.__pwned") is None
        assert page.query_selector("#sessions img, #terminal img, #terminal b") is None
        shot(page, "5-html-as-text")
    finally:
        agent.call("session_destroy", session_id=sid)

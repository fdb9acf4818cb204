"""A person's journey through the web view, in a real browser, while an MCP client plays the
agent: sign in, see the agent's session appear, watch a loop's output arrive live, see `top`'s
screen, replay the recording, take over and type (the agent's next result says so), stop a
program with a signal button, sign out."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from tests.browser.conftest import Agent, shot, sign_in, terminal_text

pytestmark = pytest.mark.docker

LOOP = "for i in 1 2 3 4 5; do echo line-$i; sleep 0.2; done"
# notes whether the terminal ever showed the loop's first line without its last
PARTIAL_WATCH = """() => {
  window.__partial = false;
  const timer = setInterval(() => {
    const text = document.querySelector('#terminal .xterm-rows').innerText;
    if (text.includes('line-1') && !text.includes('line-5')) {
      window.__partial = true;
      clearInterval(timer);
    }
  }, 10);
}"""


def open_session(page: Any, name: str) -> None:
    page.click(f"#sessions tbody tr:has-text('{name}')")
    page.wait_for_selector("#terminal .xterm-rows")


def test_a_person_signs_in_watches_replays_takes_over_and_signs_out(
    page: Any, agent: Agent, web_project: Path
) -> None:
    sign_in(page)
    created = agent.call("session_create", project_path=str(web_project), name="web-journey")
    sid = created["session_id"]
    page.wait_for_selector("#sessions tbody tr:has-text('web-journey')")
    open_session(page, "web-journey")

    # live: the loop's lines arrive one by one (the page shows line-1 before line-5 exists)
    page.evaluate(PARTIAL_WATCH)
    ran: dict[str, Any] = {}
    worker = threading.Thread(
        target=lambda: ran.update(agent.call("execute", session_id=sid, command=LOOP))
    )
    worker.start()
    page.wait_for_function(
        "() => document.querySelector('#terminal .xterm-rows').innerText.includes('line-5')"
    )
    worker.join(timeout=60)
    assert ran["exit_code"] == 0
    assert page.evaluate("window.__partial") is True
    text = terminal_text(page)
    assert all(f"line-{i}" in text for i in range(1, 6))
    assert "__sb_s" not in text  # the command is shown as typed, not the protocol line
    shot(page, "1-live-loop")

    # a full-screen program: top's screen
    agent.call("execute", session_id=sid, command="top -d 1", background=True, timeout_s=3)
    page.wait_for_function(
        "() => /load average/.test(document.querySelector('#terminal .xterm-rows').innerText)"
    )
    page.wait_for_selector("#sessions tbody tr:has-text('web-journey') .badge.busy")
    shot(page, "2-top")

    # a signal button stops it (the ladder starts at INT)
    page.click("button[data-signal=INT]")
    page.wait_for_function("() => /it stopped/.test(document.getElementById('note').innerText)")
    page.wait_for_selector("#sessions tbody tr:has-text('web-journey') .badge.idle")

    # replay the recording
    page.click("#tab-replay")
    page.wait_for_selector("#player .ap-player")
    page.click("#player .ap-playback-button")
    page.wait_for_function(
        "() => document.querySelector('#player').innerText.includes('line-3')", timeout=30_000
    )
    shot(page, "3-replay")
    page.click("#tab-live")

    # take over: confirm, type a command, see it run; the agent waits, then hears of it
    page.click("#takeover")
    page.click("#confirm-yes")
    page.wait_for_selector("#banner:not([hidden])")
    page.click("#terminal")
    page.keyboard.type("echo typed-by-a-person > person.txt; echo done-$((6*7))\n")
    page.wait_for_function(
        "() => document.querySelector('#terminal .xterm-rows').innerText.includes('done-42')"
    )
    shot(page, "4-taken-over")
    held_size = agent.call("session_info", session_id=sid)
    assert held_size["cols"] > 80  # the terminal took the size of the person's window
    refused = agent.call("execute", session_id=sid, command="true")
    assert refused["error"]["code"] == "SESSION_BUSY"
    assert "person" in refused["error"]["message"]
    page.click("#release")
    page.wait_for_selector("#banner", state="hidden")
    info = agent.call("session_info", session_id=sid)
    assert (info["rows"], info["cols"]) == (24, 80)  # and the agent's size came back
    after = agent.call("execute", session_id=sid, command="cat person.txt")
    assert after["output"].strip() == "typed-by-a-person"
    told = " ".join(after["notices"])
    assert "A person typed into this terminal" in told
    assert "echo typed-by-a-person" in told
    again = agent.call("execute", session_id=sid, command="true")
    assert not any("person" in n for n in again["notices"])  # said once

    # sign out: the cookie no longer opens anything
    page.click("#signout")
    page.wait_for_url("**/ui/login")
    response = page.request.get("/ui/api/sessions")
    assert response.status == 401
    agent.call("session_destroy", session_id=sid)

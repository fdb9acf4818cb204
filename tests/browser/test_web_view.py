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


BUFFER_LINES = """() => {
  const buffer = state.term.buffer.active;
  const lines = [];
  for (let i = 0; i < buffer.length; i++) lines.push(buffer.getLine(i).translateToString(true));
  return lines;
}"""


def wait_for_note(page: Any, start: str) -> None:
    page.wait_for_function(
        "start => document.getElementById('note').innerText.startsWith(start)", arg=start
    )


def test_the_whole_log_is_paged_from_the_server_a_window_at_a_time(
    page: Any, agent: Agent, web_project: Path
) -> None:
    created = agent.call("session_create", project_path=str(web_project), name="web-history")
    sid = created["session_id"]
    try:
        agent.call("execute", session_id=sid, command="seq -f 'row-%g' 1 30000", max_lines=1)
        sign_in(page)
        page.wait_for_selector("#sessions tbody tr:has-text('web-history')")
        open_session(page, "web-history")
        page.wait_for_function("() => state.term.buffer.active.length > 1000")
        page.wait_for_function(f"() => ({BUFFER_LINES})().includes('row-30000')")
        live = set(page.evaluate(BUFFER_LINES))
        assert "row-1" not in live  # the browser holds the end, not the whole log

        page.click("#from-start")
        wait_for_note(page, "History: 0 KiB to 64 KiB")
        first = page.evaluate(BUFFER_LINES)
        assert "row-1" in first
        assert "row-30000" not in first
        assert any("seq -f 'row-%g' 1 30000" in line for line in first)
        shot(page, "6-history")

        page.click("#later")
        wait_for_note(page, "History: 64 KiB to 128 KiB")
        second = page.evaluate(BUFFER_LINES)
        last_of_first = max(int(x[4:]) for x in first if x.startswith("row-"))
        numbers = [int(x[4:]) for x in second if x.startswith("row-")]
        assert min(numbers) == last_of_first + 1  # the windows join up, no line lost

        page.click("#earlier")  # back to the first window, exactly
        wait_for_note(page, "History: 0 KiB to 64 KiB")
        assert page.evaluate(BUFFER_LINES) == first

        page.click("#to-live")
        page.wait_for_function(f"() => ({BUFFER_LINES})().includes('row-30000')")
    finally:
        agent.call("session_destroy", session_id=sid)

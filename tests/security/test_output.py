"""Escape sequences aimed at the agent or at a person reading the logs: what ``execute``,
``read``, ``read_log`` (as an agent gets it over MCP) and ``sandbox logs`` hand on.

The payload sets the clipboard (OSC 52), the title, a hyperlink, hides text, moves the cursor
over earlier lines, asks the terminal to answer (device status, window title report), turns on
mouse reporting, resets the terminal, and carries DCS (DECRQSS, tmux passthrough) and APC
strings. An agent may read the text (it sees what a person would not), never a sequence that
acts on a terminal; a person's log never replays one.
"""

from __future__ import annotations

import base64
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from sandbox.mcp.server import build_server
from sandbox.session.manager import SessionManager
from sandbox.session.session import Session

pytestmark = pytest.mark.docker

CLIP = "Q0xJUEJPQVJELVBBWUxPQUQ="  # base64 of CLIPBOARD-PAYLOAD
PAYLOAD_BYTES = (
    b"A\x1b]52;c;" + CLIP.encode() + b"\x07"
    b"B\x1b]0;TITLE-INJECT\x07"
    b"C\x1b[8mHIDDEN-TEXT\x1b[0m"
    b"D\x1bP1$qm\x1b\\"
    b"E\x1bPtmux;\x1b\x1b]52;c;" + CLIP.encode() + b"\x07\x1b\\"
    b"F\x1b_APC-PAYLOAD\x1b\\"
    b"G\x1b]8;;http://evil.example/\x07LINK\x1b]8;;\x07\n"
    # cursor tricks on a line of their own: erasing it is what a terminal would show
    b"H\x1b[2K\x1b[1AI\x1b[6n\x1b[21t\x1b[>cJ\x1b[?1000h\x1b[?2004hK\x1bc\x1b^PM-PAYLOAD\x1b\\\n"
    # an 8-bit C1 OSC: the control goes, what follows is plain text then
    b"\xc2\x9dC1-TEXT\x07"
    b"L\n"
)
# printed from base64, so the command line (which logs show) does not hold the payload itself
PRINT = f"echo {base64.b64encode(PAYLOAD_BYTES).decode()} | base64 -d"
# What must never come out as an active sequence (regexes over the text handed on).
ACTIVE = [
    r"\x1b\]",  # OSC: clipboard, title, hyperlink, our markers
    r"\x1bP",  # DCS
    r"\x1b[_^X]",  # APC, PM, SOS
    r"\x1b\[[0-9;]*n",  # device status report
    r"\x1b\[[0-9;]*t",  # window ops and reports
    r"\x1b\[[>=]",  # device attributes
    r"\x1b\[\?(?:1000|1002|1003|1006|2004)[hl]",  # mouse and paste modes
    r"\x1bc",  # full reset
    r"\x9d|\x9b|\x90",  # C1 forms of OSC, CSI, DCS
    r"\x1b\[[0-9;]*8[;m]",  # concealed text (SGR 8)
]
HIDDEN_PAYLOADS = [CLIP, "TITLE-INJECT", "APC-PAYLOAD", "PM-PAYLOAD", "evil.example"]


def active_sequences(text: str) -> list[str]:
    return [pattern for pattern in ACTIVE if re.search(pattern, text)]


@pytest.fixture(scope="module")
def printed(shared: Session) -> tuple[Session, int, int]:
    """The payload printed once in the module's session: (session, from_byte, to_byte)."""
    result = shared.execute(PRINT, timeout_s=10)
    assert result.exit_code == 0
    return shared, result.log_range.from_byte, result.log_range.to_byte


def test_the_payload_really_holds_every_sequence(printed: tuple[Session, int, int]) -> None:
    session, start, end = printed
    raw = session.read_log(start, end - start).chunk  # the Python API's raw bytes
    assert len(active_sequences(raw)) >= 8  # so the cases below prove something


def test_execute_output_has_the_text_and_no_sequence(shared: Session) -> None:
    result = shared.execute(PRINT, timeout_s=10)
    assert "\x1b" not in result.output
    assert "HIDDEN-TEXT" in result.output
    assert "LINK" in result.output
    for hidden in HIDDEN_PAYLOADS:
        assert hidden not in result.output


def test_execute_with_colours_keeps_only_colours(shared: Session) -> None:
    result = shared.execute(PRINT, timeout_s=10, strip_ansi=False)
    assert re.sub(r"\x1b\[[0-9;:]*m", "", result.output).count("\x1b") == 0
    for hidden in HIDDEN_PAYLOADS:
        assert hidden not in result.output


@pytest.mark.parametrize("view", ["new", "scrollback", "screen"])
def test_read_views_hand_on_no_sequence(shared: Session, view: str) -> None:
    shared.execute(f"{PRINT}; sleep 0.2", timeout_s=10, background=True)
    read = shared.read(view=view, timeout_ms=2000, wait_for="L")
    assert "\x1b" not in read.content
    for hidden in ("CLIPBOARD", CLIP, "APC-PAYLOAD", "PM-PAYLOAD", "evil.example"):
        assert hidden not in read.content
    assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]", read.title)
    shared.execute("true", timeout_s=10)


def test_read_log_over_mcp_never_hands_on_a_sequence(
    sec_manager: SessionManager, printed: tuple[Session, int, int]
) -> None:
    session, start, end = printed

    async def pages() -> list[dict[str, Any]]:
        out = []
        async with Client(build_server(sec_manager.config, sec_manager)) as client:
            with anyio.fail_after(30):
                for strip in (False, True):
                    offset = start
                    while offset < end:
                        called = await client.call_tool(
                            "read_log",
                            {
                                "session_id": session.id,
                                "from_byte": offset,
                                "max_bytes": 64,  # small pages cut sequences in two
                                "strip_ansi": strip,
                            },
                        )
                        assert not called.is_error, called
                        page = called.structured_content
                        assert page is not None
                        out.append(page)
                        offset = page["next_byte"]
        return out

    chunks = anyio.run(pages)
    text = "".join(p["chunk"] for p in chunks)
    assert active_sequences(text) == [], text
    for hidden in HIDDEN_PAYLOADS:
        assert hidden not in text
    assert "HIDDEN-TEXT" in text


def sandbox_cli(manager: SessionManager, *args: str) -> subprocess.CompletedProcess[bytes]:
    env = {
        **os.environ,
        "SANDBOX_STATE_DIR": str(manager.config.state_dir),
        "SANDBOX_OWNER": manager.config.owner,
    }
    return subprocess.run(
        [sys.executable, "-m", "sandbox", *args], env=env, capture_output=True, timeout=60
    )


def test_sandbox_logs_piped_is_plain_text(
    sec_manager: SessionManager, printed: tuple[Session, int, int]
) -> None:
    session, _, _ = printed
    done = sandbox_cli(sec_manager, "logs", session.id)
    assert done.returncode == 0, done.stderr
    text = done.stdout.decode("utf-8", "replace")
    assert "\x1b" not in text
    assert "HIDDEN-TEXT" in text
    for hidden in HIDDEN_PAYLOADS:
        assert hidden not in text


def test_sandbox_logs_refuses_a_path_as_the_session_id(sec_manager: SessionManager) -> None:
    for ident in ("../../../../etc/passwd", "/etc/passwd", "..", "a/../../b"):
        done = sandbox_cli(sec_manager, "logs", ident)
        assert done.returncode != 0
        assert b"root:" not in done.stdout


def test_sandbox_logs_on_a_terminal_replays_no_clipboard_or_title_write(
    sec_manager: SessionManager, printed: tuple[Session, int, int]
) -> None:
    import pty

    session, _, _ = printed
    env = {**os.environ, "SANDBOX_STATE_DIR": str(sec_manager.config.state_dir)}
    pid, fd = pty.fork()
    if pid == 0:  # the child: `sandbox logs` with a terminal as stdout
        os.execve(sys.executable, [sys.executable, "-m", "sandbox", "logs", session.id], env)
    seen = b""
    while True:
        try:
            data = os.read(fd, 65536)
        except OSError:
            break
        if not data:
            break
        seen += data
    os.waitpid(pid, 0)
    text = seen.decode("utf-8", "replace")
    assert "HIDDEN-TEXT" in text
    assert CLIP not in text
    assert "TITLE-INJECT" not in text


def test_the_session_id_of_another_project_cannot_be_used_to_read_host_files(
    sec_manager: SessionManager, tmp_path: Path
) -> None:
    secret = tmp_path / "secret"
    secret.write_text("HOST-SECRET")
    done = sandbox_cli(sec_manager, "logs", str(secret))
    assert b"HOST-SECRET" not in done.stdout

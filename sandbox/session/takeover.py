"""A person's hold on a session's terminal: the web view's "Take over".

While a person holds the terminal the agent does not type into it: its ``execute`` and ``send``
fail ``SESSION_BUSY`` at once (saying why), its ``read`` still works. What the person typed is
kept (the last few hundred characters) and told to the agent once, as a notice in its next
``execute`` or ``read`` result, so it knows the shell's state may have changed under it.
Releasing gives the agent its turn back; so does a hold that is not renewed for
``HOLD_S`` (the person's page renews it while it is open: a closed laptop never blocks the
agent for long).
"""

from __future__ import annotations

import threading
import time

from sandbox.errors import SessionBusyError

SHOWN_CHARS = 200  # of what a person typed, in the agent's notice
HOLD_S = 90.0  # a hold not renewed (taken again) this long is released


def _printable(typed: str) -> str:
    """What a person typed, as the agent should read it: Enter as a newline, other controls
    by their caret names (``^C``)."""
    out = []
    for ch in typed:
        if ch in "\r\n":
            out.append("\n")
        elif ord(ch) < 32 or ord(ch) == 127:
            out.append("^" + chr((ord(ch) + 64) % 128))
        else:
            out.append(ch)
    return "".join(out)


class Takeover:
    """Who holds a session's terminal, and what a person typed that the agent has not heard."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._holder: str | None = None
        self._renewed = 0.0
        self._typed: list[str] = []
        self._typed_chars = 0

    @property
    def holder(self) -> str | None:
        """The person (a client id) holding the terminal, or None."""
        with self._lock:
            if self._holder is not None and time.monotonic() - self._renewed > HOLD_S:
                self._holder = None
            return self._holder

    def take(self, who: str) -> None:
        """Take the terminal, or renew the hold."""
        with self._lock:
            self._holder = who
            self._renewed = time.monotonic()

    def release(self) -> None:
        with self._lock:
            self._holder = None

    def typed(self, text: str) -> None:
        """Note what a person typed (they hold the terminal, or typed through ``attach``)."""
        with self._lock:
            self._typed.append(text)
            self._typed_chars += len(text)
            while len(self._typed) > 1 and self._typed_chars - len(self._typed[0]) > SHOWN_CHARS:
                self._typed_chars -= len(self._typed.pop(0))

    def check_agent_turn(self, session_id: str) -> None:
        """Refuse the agent's typing while a person holds the terminal."""
        if self.holder is not None:
            raise SessionBusyError(
                f"a person has taken over session {session_id} in the web view",
                hint="Wait for them to release it (read still works and tells you what they "
                "typed), or work in another session.",
            )

    def notices(self) -> list[str]:
        """The notice for the agent's next result, once: what a person typed meanwhile."""
        with self._lock:
            typed = "".join(self._typed)
            self._typed.clear()
            self._typed_chars = 0
        holding = self.holder is not None
        if not typed:
            return []
        shown = _printable(typed)[-SHOWN_CHARS:].strip()
        return [
            "A person typed into this terminal meanwhile (web view take-over): "
            f"{shown!r}. The shell's state (directory, variables, running programs) may have "
            "changed; look before you go on."
            + (
                " They still hold the terminal: you cannot type until they release it."
                if holding
                else ""
            )
        ]

"""The transcript cleaner: raw terminal bytes -> the plain text an agent reads.

``execute`` output and the ``"new"`` / ``"scrollback"`` views are transcripts, not screens, so
they skip pyte (DESIGN.md §2: 30-100x slower than the socket) and go through one fast pass over
the bytes, built from C-speed primitives (``bytes.translate``, compiled regexes, ``str.replace``)
with Python loops only over the few lines that need them:

1. Slicing artefacts go: a UTF-8 character cut at either end, and the tail of a string sequence
   the slice started inside (``7;sb;...BEL`` or anything before a lone ST).
2. Control characters a terminal would not print are deleted (``bytes.translate``).
3. Escape sequences are removed with one regex. OSC, DCS, APC, PM and SOS strings always go:
   titles, clipboard writes (OSC 52), hyperlinks, our ``ESC ]777`` markers, hidden payloads
   must never reach an agent. ``strip_ansi=False`` keeps SGR colour sequences only. Erase-line
   sequences become one-character sentinels so step 4 can honour ``\\r\\x1b[K`` progress bars.
4. Lines that still hold ``\\r``, backspace or an erase sentinel are replayed the way a terminal
   would overwrite them ("10%\\r20%\\r100%" -> "100%", "ab\\bc" -> "ac").

Sequences unterminated at the end of the data are dropped. ``complete_prefix`` tells a caller
reading a growing log how far it can clean now without cutting a sequence or a character.

``sanitize_terminal`` is the other filter: it keeps what a terminal needs to *draw* the output
(colours, cursor movement, erasing, the alternate screen) and removes everything that could act
on the terminal or the machine of whoever replays it, or hide from a person what an agent reads:
OSC strings (titles, the clipboard write OSC 52, hyperlinks, colour queries, our markers), DCS
(including tmux passthrough), APC/PM/SOS, C1 controls, queries a terminal would answer as if
typed (device status, attributes, window reports), window manipulation, mouse and paste modes,
full reset, the bell and charset shifts, and the "concealed" SGR attribute.
"""

from __future__ import annotations

import logging
import re

__all__ = ["clean_transcript", "complete_prefix", "sanitize_terminal"]

log = logging.getLogger(__name__)

# -- tables ----------------------------------------------------------------------------------

_C0_AND_DEL = bytes(range(0x20)) + b"\x7f"
# Deleted when the data has no ESC: every control but the four that move the cursor or lay out.
_DELETE_PLAIN = bytes(c for c in _C0_AND_DEL if c not in b"\b\t\n\r")
# Deleted before escape removal: BEL, CAN and SUB still end string sequences there ...
_DELETE_BEFORE_ESCAPES = bytes(c for c in _C0_AND_DEL if c not in b"\x07\b\t\n\r\x18\x1a\x1b")
# ... and go right after it.
_DELETE_AFTER_ESCAPES = b"\x07\x18\x1a"

# Erase sequences become these sentinels (their own raw bytes were deleted above).
_ERASE_RIGHT = b"\x0b"  # EL 0 (``ESC[K``) and ED 0 (``ESC[J``): cut the line at the cursor
_ERASE_ALL = b"\x0c"  # EL 2: blank the whole line, the cursor stays
_ERASE_LEFT = b"\x0e"  # EL 1: blank from the line start to the cursor
_ERASE_SENTINELS = {
    (b"", b"K"): _ERASE_RIGHT,
    (b"0", b"K"): _ERASE_RIGHT,
    (b"1", b"K"): _ERASE_LEFT,
    (b"2", b"K"): _ERASE_ALL,
    (b"", b"J"): _ERASE_RIGHT,
    (b"0", b"J"): _ERASE_RIGHT,
}

# -- regexes ---------------------------------------------------------------------------------

# Every escape sequence, as a VT parser delimits it. A string (OSC ``]``, DCS ``P``, APC ``_``,
# PM ``^``, SOS ``X``) ends at BEL, ST (``ESC \\``), CAN or SUB, or where another ESC begins.
# Anything unterminated at the end of the data matches to the end and is dropped with it.
_ESCAPE_BODY = (
    rb"\x1b(?:"
    rb"[\]P_^X][^\x07\x18\x1a\x1b]*(?:\x07|\x1b\\|[\x18\x1a])?"
    rb"|\[[\x20-\x3f]*[\x40-\x7e]?"
    rb"|[\x20-\x2f]*[\x30-\x7e]?"
    rb")"
)
_ESCAPE = re.compile(_ESCAPE_BODY)
# Same, but SGR sequences are not matched, so ``sub(b"", ...)`` keeps them (a literal
# replacement keeps ``re.sub`` in C; a group template would call back into Python per match).
_ESCAPE_KEEP_SGR = re.compile(rb"(?!\x1b\[[0-9;:]*m)" + _ESCAPE_BODY)
_ERASE = re.compile(rb"\x1b\[([012]?)([KJ])")
_C1_IN_UTF8 = re.compile(rb"\xc2[\x80-\x9f]")  # U+0080..U+009F: C1 controls, never text
# The tail of an OSC whose ``ESC ]`` was cut off by the slice: "777;sb;...BEL", "0;title BEL".
_LEADING_STRING_TAIL = re.compile(rb"[0-9]{1,4};[^\x07\x1b\n]*(?:\x07|\x1b\\)")

_NEEDS_REPLAY = re.compile("[\r\b\x0b\x0c\x0e]")
_REPLAY_TOKEN = re.compile("(\x1b\\[[0-9;:]*m|[\r\b\x0b\x0c\x0e])")

_INCOMPLETE_CSI = re.compile(rb"\x1b\[[\x20-\x3f]*")
_INCOMPLETE_ESC = re.compile(rb"\x1b[\x20-\x2f]*")
# An unterminated string longer than this is cleaned (dropped) rather than waited for.
_MAX_PENDING_STRING = 64 * 1024


def clean_transcript(data: bytes, *, strip_ansi: bool = True) -> str:
    """Terminal output ``data`` as plain text: escapes removed, ``\\r``/backspace applied.

    With ``strip_ansi=False`` SGR colour sequences (``ESC[...m``) are kept; every other
    sequence is still removed. Never raises on arbitrary bytes.
    """
    data = _trim_cut_utf8(data)
    escapes = b"\x1b" in data
    if escapes:
        if data[:1] != b"\x1b":
            data = _drop_leading_string_tail(data)
        data = data.translate(None, _DELETE_BEFORE_ESCAPES)
        if b"\x1b[" in data:
            data = _ERASE.sub(_erase_sentinel, data)
        data = _ESCAPE.sub(b"", data) if strip_ansi else _ESCAPE_KEEP_SGR.sub(b"", data)
        data = data.translate(None, _DELETE_AFTER_ESCAPES)
    else:
        if b"\x07" in data:
            data = _drop_leading_string_tail(data)
        data = data.translate(None, _DELETE_PLAIN)
    if b"\xc2" in data:
        data = _C1_IN_UTF8.sub(b"", data)
    text = data.decode("utf-8", "replace")
    if "\r" in text:
        text = text.replace("\r\n", "\n")
    if "\r" in text or "\b" in text or (escapes and _NEEDS_REPLAY.search(text) is not None):
        return _replay_lines(text)
    return text


def complete_prefix(data: bytes) -> int:
    """Length of the longest prefix of ``data`` that ends outside any escape sequence and
    UTF-8 character, so a reader of a growing log can clean ``data[:n]`` now and start the next
    read at ``n`` without ever splitting a sequence. (An unterminated string longer than 64 KiB
    counts as complete: the cleaner drops it rather than stalling the reader.)
    """
    end = utf8_complete_end(data)
    esc = data.rfind(b"\x1b")
    if esc == -1:
        return end
    kind = data[esc + 1 : esc + 2]
    if not kind:
        return esc
    if kind in b"]P_^X":
        rest = data[esc + 2 :]
        terminated = b"\x07" in rest or b"\x18" in rest or b"\x1a" in rest
        if not terminated and len(rest) <= _MAX_PENDING_STRING:
            return esc
        return end
    pattern = _INCOMPLETE_CSI if kind == b"[" else _INCOMPLETE_ESC
    if pattern.fullmatch(data, esc) is not None:
        return esc
    return end


# -- helpers ---------------------------------------------------------------------------------


def _trim_cut_utf8(data: bytes) -> bytes:
    """Drop a UTF-8 character cut in two by the slice at either end (not invalid bytes)."""
    start = 0
    while start < 3 and start < len(data) and 0x80 <= data[start] <= 0xBF:
        start += 1
    end = utf8_complete_end(data, start)
    if start == 0 and end == len(data):
        return data
    return data[start:end]


def utf8_complete_end(data: bytes, start: int = 0) -> int:
    """``len(data)``, or the offset of a multi-byte character the data ends inside (so
    ``data[:utf8_complete_end(data)]`` never ends in half a character)."""
    end = len(data)
    for i in range(end - 1, max(start, end - 4) - 1, -1):
        byte = data[i]
        if byte < 0x80:
            break
        if byte >= 0xC0:  # a lead byte: are all its continuation bytes here?
            needed = 2 if byte < 0xE0 else 3 if byte < 0xF0 else 4
            return i if end - i < needed else end
    return end


def _drop_leading_string_tail(data: bytes) -> bytes:
    """Remove the end of a string sequence whose start the slice cut off."""
    first_esc = data.find(b"\x1b")
    if first_esc != -1 and data[first_esc + 1 : first_esc + 2] == b"\\":
        return data[first_esc + 2 :]  # a bare ST can only close a string begun earlier
    match = _LEADING_STRING_TAIL.match(data)
    if match is not None:
        return data[match.end() :]
    return data


def _erase_sentinel(match: re.Match[bytes]) -> bytes:
    return _ERASE_SENTINELS.get((match.group(1), match.group(2)), b"")


def _replay_lines(text: str) -> str:
    """Replay every line that holds ``\\r``, backspace or an erase sentinel; copy the rest."""
    out: list[str] = []
    copied = 0
    pos = 0
    while True:
        match = _NEEDS_REPLAY.search(text, pos)
        if match is None:
            break
        start = text.rfind("\n", 0, match.start()) + 1
        end = text.find("\n", match.end())
        if end == -1:
            end = len(text)
        out.append(text[copied:start])
        out.append(_replay_line(text[start:end]))
        copied = pos = end
    out.append(text[copied:])
    return "".join(out)


def _replay_line(line: str) -> str:
    """Overwrite cells the way a terminal does for one line (no newline inside)."""
    cells: list[str] = []
    col = 0
    pending_sgr = ""  # kept SGR sequences ride on the next character written
    erased = False
    for i, token in enumerate(_REPLAY_TOKEN.split(line)):
        if not token:
            continue
        if i % 2 == 0:  # text
            if pending_sgr:
                token = pending_sgr + token[0] + token[1:]
                chars = [token[: len(pending_sgr) + 1], *token[len(pending_sgr) + 1 :]]
                pending_sgr = ""
            else:
                chars = list(token)
            cells[col : col + len(chars)] = chars
            col += len(chars)
        elif token == "\r":
            col = 0
        elif token == "\b":
            col = max(0, col - 1)
        elif token == "\x0b":
            del cells[col:]
        elif token == "\x0c":
            cells = [" "] * len(cells)
            erased = True
        elif token == "\x0e":
            cells[: col + 1] = [" "] * min(col + 1, len(cells))
            erased = True
        else:
            pending_sgr += token
    result = "".join(cells)
    if erased:
        result = result.rstrip(" ")
    return result + pending_sgr


# -- sanitize_terminal -------------------------------------------------------------------------

# CSI final bytes that only draw: cursor movement and positioning, erase, insert/delete, scroll,
# SGR, save/restore cursor. Anything else (reports, window ops, modes, keyboard) goes.
_DRAW_FINALS = frozenset(b"ABCDEFGHIJKLMPSTX@`abdefmrsu")
# DEC private modes that only draw: cursor visibility, auto-wrap, origin, the alternate screen.
_DRAW_PRIVATE_MODES = frozenset({b"6", b"7", b"25", b"47", b"1047", b"1048", b"1049"})
# Two-byte escapes that only draw: save/restore cursor, index, next line, reverse index, and
# selecting the ASCII or line-drawing character set.
_DRAW_ESCAPES = frozenset({b"\x1b7", b"\x1b8", b"\x1bD", b"\x1bE", b"\x1bM", b"\x1b(B", b"\x1b(0"})
_SANITIZE_DELETE = bytes(c for c in _C0_AND_DEL if c not in b"\b\t\n\r\x1b")
_CSI_PARTS = re.compile(rb"\x1b\[([\x30-\x3f]*)([\x20-\x2f]*)([\x40-\x7e])")


def sanitize_terminal(data: bytes) -> bytes:
    """``data`` with only the escape sequences that draw (see the module docstring).

    Safe to replay on a person's terminal and to hand to an agent as "the output with its
    colours". Never raises on arbitrary bytes; unterminated sequences at the end are dropped.
    """
    if b"\xc2" in data:
        data = _C1_IN_UTF8.sub(b"", data)
    if b"\x1b" not in data:
        return data.translate(None, _SANITIZE_DELETE + b"\x1b")
    # BEL, CAN and SUB end string sequences: delete the other controls first, those after.
    data = data.translate(None, bytes(c for c in _SANITIZE_DELETE if c not in b"\x07\x18\x1a"))
    data = _ESCAPE.sub(_keep_drawing, data)
    return data.translate(None, b"\x07\x18\x1a")


def _keep_drawing(match: re.Match[bytes]) -> bytes:
    seq = match.group(0)
    kind = seq[1:2]
    if kind != b"[":
        return seq if seq in _DRAW_ESCAPES else b""
    parts = _CSI_PARTS.fullmatch(seq)
    if parts is None:
        return b""
    params, inter, final = parts.group(1), parts.group(2), parts.group(3)
    if inter:
        return b""  # DECSCUSR, DECRQM, ...: not drawing
    if params[:1] == b"?":
        if final not in b"hl":
            return b""
        modes = params[1:].split(b";")
        return seq if modes and all(m in _DRAW_PRIVATE_MODES for m in modes) else b""
    if params[:1] in (b">", b"=", b"<") or ord(final) not in _DRAW_FINALS:
        return b""
    if final == b"m":
        return _without_conceal(params)
    return seq


def _without_conceal(params: bytes) -> bytes:
    """An SGR sequence without its "concealed" (8) attribute, colour arguments kept."""
    fields = params.replace(b":", b";").split(b";") if params else [b""]
    kept: list[bytes] = []
    i = 0
    while i < len(fields):
        field = fields[i]
        if field in (b"38", b"48", b"58") and i + 1 < len(fields):
            span = 3 if fields[i + 1] == b"5" else 5 if fields[i + 1] == b"2" else 1
            kept.extend(fields[i : i + span])
            i += span
            continue
        if field.lstrip(b"0") != b"8" or field == b"":
            kept.append(field)
        i += 1
    if not kept:
        return b""
    return b"\x1b[" + b";".join(kept) + b"m"

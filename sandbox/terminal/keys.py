"""Key names and ``^C`` / ``[UP]`` notation to the bytes xterm sends; bracketed paste.

What the ``send`` tool types into a session's TTY. The session runs with
``TERM=xterm-256color``, so every key encodes the way xterm encodes it (modifyOtherKeys off)::

    encode_keys(["ctrl+c"])                      -> b"\\x03"
    encode_keys(["up", "enter"])                 -> b"\\x1b[A\\r"
    encode_keys(["ctrl+up", "shift+tab"])        -> b"\\x1b[1;5A\\x1b[Z"
    encode_keys(["^[", "[F1]", "alt+x"])         -> b"\\x1b\\x1bOP\\x1bx"
    encode_text("a\\nb")                          -> b"\\x1b[200~a\\nb\\x1b[201~"

A key item is a name (``enter``, ``pageup``, ``f5`` ...; case-insensitive, with aliases such as
``return``, ``esc``, ``PgUp``, ``arrow_up``) or one character, optionally prefixed by modifiers
(``ctrl+``, ``alt+``, ``shift+``; also ``Ctrl-C``, ``C-c``, ``M-x``, ``ctrl_c``). The notations
``^C`` (caret + character) and ``[UP]`` / ``<C-c>`` (a key item in brackets) are whole items.

The tables come first; the logic after them only looks things up.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, Literal

from sandbox.errors import InvalidArgumentError

__all__ = ["KEY_NAMES", "encode_keys", "encode_text", "parse_paste"]

ESC: Final = "\x1b"
CSI: Final = ESC + "["
SS3: Final = ESC + "O"

PASTE_START: Final = CSI + "200~"
PASTE_END: Final = CSI + "201~"

# --------------------------------------------------------------------------- tables

# Keys xterm encodes as CSI <letter> (SS3 <letter> in application cursor mode, DECCKM);
# with modifiers CSI 1 ; <mod> <letter>.
CURSOR_KEYS: Final[dict[str, str]] = {
    "up": "A",
    "down": "B",
    "right": "C",
    "left": "D",
    "home": "H",
    "end": "F",
}

# F1-F4 are SS3 <letter>; with modifiers CSI 1 ; <mod> <letter>.
SS3_FUNCTION_KEYS: Final[dict[str, str]] = {"f1": "P", "f2": "Q", "f3": "R", "f4": "S"}

# Keys xterm encodes as CSI <number> ~; with modifiers CSI <number> ; <mod> ~.
TILDE_KEYS: Final[dict[str, int]] = {
    "insert": 2,
    "delete": 3,
    "pageup": 5,
    "pagedown": 6,
    "f5": 15,
    "f6": 17,
    "f7": 18,
    "f8": 19,
    "f9": 20,
    "f10": 21,
    "f11": 23,
    "f12": 24,
}

# Keys that send one control character. Each row: plain, with ctrl, with shift (None: the
# modifier changes nothing, as in xterm). alt always prefixes ESC.
SIMPLE_KEYS: Final[dict[str, tuple[str, str | None, str | None]]] = {
    "enter": ("\r", None, None),
    "tab": ("\t", None, CSI + "Z"),
    "escape": (ESC, None, None),
    "backspace": ("\x7f", "\x08", None),
    "space": (" ", "\x00", None),
}

KEY_NAMES: Final[tuple[str, ...]] = tuple(
    sorted({*CURSOR_KEYS, *SS3_FUNCTION_KEYS, *TILDE_KEYS, *SIMPLE_KEYS})
)

# Other spellings of the canonical names, after lower-casing and dropping "_", "-" and " ".
KEY_ALIASES: Final[dict[str, str]] = {
    "return": "enter",
    "ret": "enter",
    "cr": "enter",
    "esc": "escape",
    "bs": "backspace",
    "bksp": "backspace",
    "backsp": "backspace",
    "del": "delete",
    "ins": "insert",
    "spc": "space",
    "spacebar": "space",
    "pgup": "pageup",
    "prior": "pageup",
    "pgdn": "pagedown",
    "pgdown": "pagedown",
    "next": "pagedown",
    **{f"arrow{d}": d for d in ("up", "down", "left", "right")},
    **{f"{d}arrow": d for d in ("up", "down", "left", "right")},
}

# Modifier spellings. Single letters (emacs: C-c, M-x, S-tab) only count before a "-".
MODIFIER_ALIASES: Final[dict[str, str]] = {
    "ctrl": "ctrl",
    "control": "ctrl",
    "ctl": "ctrl",
    "alt": "alt",
    "meta": "alt",
    "opt": "alt",
    "option": "alt",
    "shift": "shift",
}
EMACS_MODIFIERS: Final[dict[str, str]] = {"c": "ctrl", "m": "alt", "s": "shift"}

# xterm's modifier parameter: 1 + shift(1) + alt(2) + ctrl(4).
MODIFIER_BITS: Final[dict[str, int]] = {"shift": 1, "alt": 2, "ctrl": 4}

# ctrl + character -> control character (xterm, US layout; ctrl+2..8 are the VT220 mappings).
CTRL_CHARS: Final[dict[str, str]] = {
    **{chr(c): chr(c & 0x1F) for c in range(ord("@"), ord("_") + 1)},  # @ A-Z [ \ ] ^ _
    **{chr(c): chr(c & 0x1F) for c in range(ord("a"), ord("z") + 1)},
    "?": "\x7f",
    " ": "\x00",
    "2": "\x00",
    "3": ESC,
    "4": "\x1c",
    "5": "\x1d",
    "6": "\x1e",
    "7": "\x1f",
    "8": "\x7f",
    "/": "\x1f",
}

# shift + character on a US keyboard (letters are upper-cased separately).
SHIFT_CHARS: Final[dict[str, str]] = dict(
    zip("`1234567890-=[]\\;',./", '~!@#$%^&*()_+{}|:"<>?', strict=True)
)

MODIFIER_PREFIX: Final = re.compile(
    r"^(?:(?P<word>ctrl|control|ctl|alt|meta|opt|option|shift)[+\-_ ]"
    r"|(?P<letter>[cms])-)",
    re.IGNORECASE,
)

VALID_KEYS_HINT: Final = (
    "Valid keys: enter tab escape backspace delete insert space up down left right home end "
    "pageup pagedown f1..f12, or a single character; prefixes ctrl+ alt+ shift+ (combinable, "
    "e.g. ctrl+c, ctrl+alt+x, shift+tab); notation ^C, ^[, [UP], [CTRL+C]. "
    "To type literal text, pass it as `text` instead."
)

# --------------------------------------------------------------------------- logic


@dataclass(frozen=True, slots=True)
class _Key:
    """One parsed key item: a canonical key name or a single character, plus modifiers."""

    key: str
    modifiers: frozenset[str]
    is_char: bool


def encode_keys(keys: Sequence[str], *, application_cursor: bool = False) -> bytes:
    """The bytes xterm sends for ``keys``, in order.

    ``application_cursor`` (DECCKM, set by full-screen programs) makes unmodified arrows,
    home and end send ``ESC O <letter>`` instead of ``ESC [ <letter>``.

    Raises ``InvalidArgumentError`` naming the first item that is not a key.
    """
    if isinstance(keys, str):
        raise InvalidArgumentError(
            f"keys must be a list of key names, got the string {keys!r}.",
            hint=f'Wrap it in a list, e.g. ["{keys}"]. {VALID_KEYS_HINT}',
        )
    out: list[str] = []
    for item in keys:
        out.append(_encode(_parse(item), application_cursor=application_cursor, item=item))
    return "".join(out).encode("utf-8")


def encode_text(
    text: str, *, paste: bool | Literal["auto"] = "auto", bracketed_paste_mode: bool = True
) -> bytes:
    """``text`` as UTF-8, wrapped in bracketed paste when ``paste`` is True, or "auto" and
    the text spans several lines while the program has bracketed paste on (DECSET 2004; a
    program that never asked for it would see the delimiters as typed text).

    With "auto", newlines at the very end are not pasted: they follow the paste as Enter, so
    ``"print(1)\n"`` runs like a typed line. When pasting, paste delimiters inside the text are
    removed, so the text cannot end the paste early and have the rest run as typed input.
    """
    trailer = ""
    if paste == "auto":
        body = text.rstrip("\r\n")
        paste = bracketed_paste_mode and ("\n" in body or "\r" in body)
        if paste:
            trailer = "\r" if body != text else ""
            text = body
    if not paste:
        return text.encode("utf-8")
    return (PASTE_START + _strip_paste_markers(text) + PASTE_END + trailer).encode("utf-8")


def parse_paste(value: object) -> bool | Literal["auto"]:
    """The ``paste`` argument from JSON: a bool, None (= "auto"), or "true"/"false"/"auto"
    (any case; also yes/no/on/off/1/0)."""
    if value is None:
        return "auto"
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        word = value.strip().lower()
        if word == "auto":
            return "auto"
        if word in ("true", "yes", "on", "1"):
            return True
        if word in ("false", "no", "off", "0"):
            return False
    raise InvalidArgumentError(
        f'paste must be true, false or "auto", got {value!r}.',
        hint='Pass paste as true, false or "auto" (auto = bracketed paste when multi-line).',
    )


def _strip_paste_markers(text: str) -> str:
    # Loop: removing one marker may join the pieces of another ("\x1b[20\x1b[201~1~").
    while PASTE_END in text or PASTE_START in text:
        text = text.replace(PASTE_END, "").replace(PASTE_START, "")
    return text


def _unknown(item: object, why: str = "not a key name") -> InvalidArgumentError:
    return InvalidArgumentError(f"Unknown key {item!r}: {why}.", hint=VALID_KEYS_HINT)


def _parse(item: object) -> _Key:
    if not isinstance(item, str):
        raise _unknown(item, "key items must be strings")
    if item == "":
        raise _unknown(item, "the item is empty")
    # ^C notation: caret + one character.
    if len(item) == 2 and item[0] == "^":
        return _Key(item[1], frozenset({"ctrl"}), is_char=True)
    # [UP], [CTRL+C], <C-c>: a whole item in brackets.
    if len(item) > 2 and (item[0], item[-1]) in (("[", "]"), ("<", ">")):
        inner = item[1:-1].strip()
        if not inner:
            raise _unknown(item, "the brackets are empty")
        try:
            return _parse(inner)
        except InvalidArgumentError as exc:
            raise _unknown(item, exc.message.split(": ", 1)[-1].rstrip(".")) from None
    modifiers: set[str] = set()
    rest = item
    while len(rest) > 1 and (match := MODIFIER_PREFIX.match(rest)) and match.end() < len(rest):
        word, letter = match.group("word"), match.group("letter")
        modifiers.add(MODIFIER_ALIASES[word.lower()] if word else EMACS_MODIFIERS[letter.lower()])
        rest = rest[match.end() :]
    if len(rest) == 1:
        return _Key(rest, frozenset(modifiers), is_char=True)
    name = re.sub(r"[_\-\s]", "", rest.lower())
    name = KEY_ALIASES.get(name, name)
    if name not in KEY_NAMES:
        raise _unknown(item)
    return _Key(name, frozenset(modifiers), is_char=False)


def _encode(key: _Key, *, application_cursor: bool, item: str) -> str:
    mods = key.modifiers
    if key.is_char:
        return _encode_char(key.key, mods, item)
    param = 1 + sum(MODIFIER_BITS[m] for m in mods)
    name = key.key
    if name in CURSOR_KEYS:
        letter = CURSOR_KEYS[name]
        if mods:
            return f"{CSI}1;{param}{letter}"
        return (SS3 if application_cursor else CSI) + letter
    if name in SS3_FUNCTION_KEYS:
        letter = SS3_FUNCTION_KEYS[name]
        return f"{CSI}1;{param}{letter}" if mods else SS3 + letter
    if name in TILDE_KEYS:
        number = TILDE_KEYS[name]
        return f"{CSI}{number};{param}~" if mods else f"{CSI}{number}~"
    plain, with_ctrl, with_shift = SIMPLE_KEYS[name]
    seq = plain
    if "shift" in mods and with_shift is not None:
        seq = with_shift
    elif "ctrl" in mods and with_ctrl is not None:
        seq = with_ctrl
    return ESC + seq if "alt" in mods else seq


def _encode_char(char: str, mods: frozenset[str], item: str) -> str:
    if not mods:
        return char  # any single character, typed as is
    if not char.isprintable():
        raise _unknown(item, "modifiers apply to printable characters only")
    if "shift" in mods:
        char = SHIFT_CHARS.get(char, char.upper())
    if "ctrl" in mods:
        ctrl = CTRL_CHARS.get(char)
        if ctrl is None:
            raise _unknown(item, f"ctrl+{char} has no control character in xterm")
        char = ctrl
    return ESC + char if "alt" in mods else char

"""Key names, modifiers and notation to xterm bytes; bracketed paste."""

from __future__ import annotations

import pytest

from sandbox.errors import InvalidArgumentError
from sandbox.terminal.keys import KEY_NAMES, encode_keys, encode_text, parse_paste

ESC = b"\x1b"
CSI = b"\x1b["
SS3 = b"\x1bO"

# Every canonical key, unmodified, normal cursor mode.
NAMED_KEYS: list[tuple[str, bytes]] = [
    ("enter", b"\r"),
    ("tab", b"\t"),
    ("escape", ESC),
    ("backspace", b"\x7f"),
    ("delete", CSI + b"3~"),
    ("insert", CSI + b"2~"),
    ("space", b" "),
    ("up", CSI + b"A"),
    ("down", CSI + b"B"),
    ("right", CSI + b"C"),
    ("left", CSI + b"D"),
    ("home", CSI + b"H"),
    ("end", CSI + b"F"),
    ("pageup", CSI + b"5~"),
    ("pagedown", CSI + b"6~"),
    ("f1", SS3 + b"P"),
    ("f2", SS3 + b"Q"),
    ("f3", SS3 + b"R"),
    ("f4", SS3 + b"S"),
    ("f5", CSI + b"15~"),
    ("f6", CSI + b"17~"),
    ("f7", CSI + b"18~"),
    ("f8", CSI + b"19~"),
    ("f9", CSI + b"20~"),
    ("f10", CSI + b"21~"),
    ("f11", CSI + b"23~"),
    ("f12", CSI + b"24~"),
]

ALIASES: list[tuple[str, bytes]] = [
    ("Enter", b"\r"),
    ("ENTER", b"\r"),
    ("return", b"\r"),
    ("Return", b"\r"),
    ("esc", ESC),
    ("ESC", ESC),
    ("del", CSI + b"3~"),
    ("Del", CSI + b"3~"),
    ("bs", b"\x7f"),
    ("ins", CSI + b"2~"),
    ("PgUp", CSI + b"5~"),
    ("pgdn", CSI + b"6~"),
    ("PgDown", CSI + b"6~"),
    ("page_up", CSI + b"5~"),
    ("page-down", CSI + b"6~"),
    ("Page Up", CSI + b"5~"),
    ("PageUp", CSI + b"5~"),
    ("arrowup", CSI + b"A"),
    ("arrow_up", CSI + b"A"),
    ("ArrowDown", CSI + b"B"),
    ("arrow-left", CSI + b"D"),
    ("RightArrow", CSI + b"C"),
    ("F1", SS3 + b"P"),
    ("F12", CSI + b"24~"),
    ("Tab", b"\t"),
    ("SPACE", b" "),
    ("Home", CSI + b"H"),
    ("END", CSI + b"F"),
]

MODIFIED: list[tuple[str, bytes]] = [
    # ctrl + character
    ("ctrl+c", b"\x03"),
    ("ctrl+a", b"\x01"),
    ("ctrl+z", b"\x1a"),
    ("ctrl+d", b"\x04"),
    ("ctrl+C", b"\x03"),
    ("ctrl+[", ESC),
    ("ctrl+\\", b"\x1c"),
    ("ctrl+]", b"\x1d"),
    ("ctrl+^", b"\x1e"),
    ("ctrl+_", b"\x1f"),
    ("ctrl+?", b"\x7f"),
    ("ctrl+@", b"\x00"),
    ("ctrl+space", b"\x00"),
    ("ctrl+ ", b"\x00"),
    ("ctrl+2", b"\x00"),
    ("ctrl+3", ESC),
    ("ctrl+8", b"\x7f"),
    ("ctrl+/", b"\x1f"),
    ("ctrl+shift+c", b"\x03"),
    # spellings of the modifiers
    ("Ctrl-C", b"\x03"),
    ("CTRL+C", b"\x03"),
    ("C-c", b"\x03"),
    ("c-c", b"\x03"),
    ("ctrl_c", b"\x03"),
    ("control+c", b"\x03"),
    ("ctl-c", b"\x03"),
    ("M-x", ESC + b"x"),
    ("meta+x", ESC + b"x"),
    ("option+x", ESC + b"x"),
    ("S-tab", CSI + b"Z"),
    # alt and shift on characters
    ("alt+x", ESC + b"x"),
    ("alt+X", ESC + b"X"),
    ("alt+.", ESC + b"."),
    ("shift+a", b"A"),
    ("shift+A", b"A"),
    ("shift+1", b"!"),
    ("shift+/", b"?"),
    ("alt+shift+a", ESC + b"A"),
    ("ctrl+alt+x", ESC + b"\x18"),
    ("alt+ctrl+x", ESC + b"\x18"),
    ("Ctrl-Alt-Del", CSI + b"3;7~"),
]

MODIFIED_NAMED: list[tuple[str, bytes]] = [
    ("shift+tab", CSI + b"Z"),
    ("ctrl+shift+tab", CSI + b"Z"),
    ("alt+tab", ESC + b"\t"),
    ("ctrl+tab", b"\t"),
    ("alt+enter", ESC + b"\r"),
    ("shift+enter", b"\r"),
    ("ctrl+enter", b"\r"),
    ("alt+escape", ESC + ESC),
    ("ctrl+backspace", b"\x08"),
    ("alt+backspace", ESC + b"\x7f"),
    ("shift+backspace", b"\x7f"),
    ("alt+space", ESC + b" "),
    ("shift+space", b" "),
    ("shift+up", CSI + b"1;2A"),
    ("alt+up", CSI + b"1;3A"),
    ("alt+shift+up", CSI + b"1;4A"),
    ("ctrl+up", CSI + b"1;5A"),
    ("ctrl+shift+up", CSI + b"1;6A"),
    ("ctrl+alt+up", CSI + b"1;7A"),
    ("ctrl+alt+shift+up", CSI + b"1;8A"),
    ("ctrl+down", CSI + b"1;5B"),
    ("ctrl+right", CSI + b"1;5C"),
    ("ctrl+left", CSI + b"1;5D"),
    ("alt+left", CSI + b"1;3D"),
    ("ctrl+home", CSI + b"1;5H"),
    ("shift+end", CSI + b"1;2F"),
    ("shift+f1", CSI + b"1;2P"),
    ("ctrl+f4", CSI + b"1;5S"),
    ("ctrl+f5", CSI + b"15;5~"),
    ("alt+f12", CSI + b"24;3~"),
    ("shift+pageup", CSI + b"5;2~"),
    ("ctrl+pagedown", CSI + b"6;5~"),
    ("ctrl+delete", CSI + b"3;5~"),
    ("shift+insert", CSI + b"2;2~"),
]

NOTATION: list[tuple[str, bytes]] = [
    ("^C", b"\x03"),
    ("^c", b"\x03"),
    ("^[", ESC),
    ("^?", b"\x7f"),
    ("^@", b"\x00"),
    ("^D", b"\x04"),
    ("^Z", b"\x1a"),
    ("^\\", b"\x1c"),
    ("[UP]", CSI + b"A"),
    ("[up]", CSI + b"A"),
    ("[F1]", SS3 + b"P"),
    ("[ENTER]", b"\r"),
    ("[CTRL+C]", b"\x03"),
    ("[Ctrl-Alt-X]", ESC + b"\x18"),
    ("[SHIFT+TAB]", CSI + b"Z"),
    ("[PgUp]", CSI + b"5~"),
    ("[^C]", b"\x03"),
    ("<C-c>", b"\x03"),
    ("<enter>", b"\r"),
]

CHARACTERS: list[tuple[str, bytes]] = [
    ("a", b"a"),
    ("A", b"A"),
    ("q", b"q"),
    ("1", b"1"),
    (" ", b" "),
    ("^", b"^"),
    ("[", b"["),
    ("]", b"]"),
    ("<", b"<"),
    ("+", b"+"),
    ("-", b"-"),
    ("_", b"_"),
    ("é", "é".encode()),
    ("€", "€".encode()),
]


@pytest.mark.parametrize(("key", "expected"), NAMED_KEYS)
def test_every_named_key_encodes_as_xterm(key: str, expected: bytes) -> None:
    assert encode_keys([key]) == expected


def test_key_names_lists_exactly_the_canonical_names_sorted() -> None:
    assert sorted(name for name, _ in NAMED_KEYS) == list(KEY_NAMES)
    assert list(KEY_NAMES) == sorted(KEY_NAMES)


@pytest.mark.parametrize(("key", "expected"), ALIASES)
def test_names_are_case_insensitive_and_have_aliases(key: str, expected: bytes) -> None:
    assert encode_keys([key]) == expected


@pytest.mark.parametrize(("key", "expected"), MODIFIED)
def test_modifiers_on_characters(key: str, expected: bytes) -> None:
    assert encode_keys([key]) == expected


@pytest.mark.parametrize(("key", "expected"), MODIFIED_NAMED)
def test_modifiers_on_named_keys_use_xterm_parameters(key: str, expected: bytes) -> None:
    assert encode_keys([key]) == expected


@pytest.mark.parametrize(("key", "expected"), NOTATION)
def test_caret_and_bracket_notation(key: str, expected: bytes) -> None:
    assert encode_keys([key]) == expected


@pytest.mark.parametrize(("key", "expected"), CHARACTERS)
def test_single_characters_are_typed_as_is(key: str, expected: bytes) -> None:
    assert encode_keys([key]) == expected


@pytest.mark.parametrize(
    ("key", "normal", "application"),
    [
        ("up", CSI + b"A", SS3 + b"A"),
        ("down", CSI + b"B", SS3 + b"B"),
        ("right", CSI + b"C", SS3 + b"C"),
        ("left", CSI + b"D", SS3 + b"D"),
        ("home", CSI + b"H", SS3 + b"H"),
        ("end", CSI + b"F", SS3 + b"F"),
        ("ctrl+up", CSI + b"1;5A", CSI + b"1;5A"),
        ("pageup", CSI + b"5~", CSI + b"5~"),
        ("f1", SS3 + b"P", SS3 + b"P"),
        ("enter", b"\r", b"\r"),
    ],
)
def test_application_cursor_mode_changes_only_plain_cursor_keys(
    key: str, normal: bytes, application: bytes
) -> None:
    assert encode_keys([key]) == normal
    assert encode_keys([key], application_cursor=True) == application


def test_keys_are_concatenated_in_order() -> None:
    assert encode_keys(["up", "enter", "ctrl+c", "^[", "x"]) == CSI + b"A\r\x03\x1bx"


def test_empty_key_list_encodes_to_nothing() -> None:
    assert encode_keys([]) == b""


@pytest.mark.parametrize(
    "bad",
    [
        "enterr",
        "ls -la",
        "ctrl+",
        "ctrl+1",
        "ctrl+-",
        "ctrl++",
        "ctrl+é",
        "super+c",
        "cmd+c",
        "f13",
        "f0",
        "[]",
        "[ ]",
        "<>",
        "",
        "ctrl+\x01",
        "hyper-x",
        "[ENTERR]",
        "[ctrl+1]",
    ],
)
def test_unknown_key_raises_invalid_argument_naming_the_item(bad: str) -> None:
    with pytest.raises(InvalidArgumentError) as info:
        encode_keys(["enter", bad])
    err = info.value
    assert err.code == "INVALID_ARGUMENT"
    assert repr(bad) in err.message
    assert "enter" in err.hint
    assert "ctrl+" in err.hint
    assert "f1..f12" in err.hint


def test_non_string_key_item_is_invalid_argument() -> None:
    with pytest.raises(InvalidArgumentError) as info:
        encode_keys(["enter", 3])  # type: ignore[list-item]  # a client can send anything
    assert info.value.code == "INVALID_ARGUMENT"


def test_a_bare_string_instead_of_a_list_is_invalid_argument() -> None:
    with pytest.raises(InvalidArgumentError) as info:
        encode_keys("enter")
    assert info.value.code == "INVALID_ARGUMENT"
    assert '["enter"]' in info.value.hint


# ------------------------------------------------------------------------- text and paste

PASTE_START = b"\x1b[200~"
PASTE_END = b"\x1b[201~"


@pytest.mark.parametrize(
    ("text", "paste", "expected"),
    [
        ("ls -la", "auto", b"ls -la"),
        ("echo hi\n", "auto", b"echo hi\n"),  # one line + Enter: typed, not pasted
        ("a\nb\n", "auto", PASTE_START + b"a\nb" + PASTE_END + b"\r"),  # Enter after the paste
        ("a\nb", "auto", PASTE_START + b"a\nb" + PASTE_END),
        ("a\rb", "auto", PASTE_START + b"a\rb" + PASTE_END),
        ("one line", True, PASTE_START + b"one line" + PASTE_END),
        ("a\nb", False, b"a\nb"),
        ("", "auto", b""),
        ("", False, b""),
        ("héllo €", False, "héllo €".encode()),
        ("héllo\n€", "auto", PASTE_START + "héllo\n€".encode() + PASTE_END),
        ("\x1b[201~", False, b"\x1b[201~"),
    ],
)
def test_encode_text_brackets_paste_when_asked_or_multiline(
    text: str, paste: bool | str, expected: bytes
) -> None:
    assert encode_text(text, paste=parse_paste(paste)) == expected


def test_auto_paste_is_plain_typing_when_the_program_never_enabled_bracketed_paste() -> None:
    # e.g. python's input(): the delimiters would arrive as literal text
    assert encode_text("a\nb", paste="auto", bracketed_paste_mode=False) == b"a\nb"
    assert encode_text("a\nb", paste=True, bracketed_paste_mode=False) == (
        PASTE_START + b"a\nb" + PASTE_END
    )


def test_encode_text_defaults_to_auto() -> None:
    assert encode_text("x") == b"x"
    assert encode_text("x\ny") == PASTE_START + b"x\ny" + PASTE_END


@pytest.mark.parametrize(
    ("text", "inner"),
    [
        ("a\x1b[201~rm -rf /\n", b"arm -rf /\n"),
        ("a\x1b[200~b\nc", b"ab\nc"),
        ("x\x1b[20\x1b[201~1~y\n", b"xy\n"),
        ("\x1b[201~\x1b[201~\n", b"\n"),
        ("keep \x1b[A arrows\n", b"keep \x1b[A arrows\n"),
    ],
)
def test_pasting_strips_paste_markers_from_the_text(text: str, inner: bytes) -> None:
    out = encode_text(text, paste=True)
    assert out == PASTE_START + inner + PASTE_END
    assert out.count(PASTE_END) == 1


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (True, True),
        (False, False),
        (None, "auto"),
        ("auto", "auto"),
        ("AUTO", "auto"),
        (" Auto ", "auto"),
        ("true", True),
        ("True", True),
        ("TRUE", True),
        ("false", False),
        ("False", False),
        ("yes", True),
        ("no", False),
        ("on", True),
        ("off", False),
        ("1", True),
        ("0", False),
    ],
)
def test_parse_paste_accepts_bools_and_their_spellings(value: object, expected: object) -> None:
    assert parse_paste(value) == expected


@pytest.mark.parametrize("value", ["maybe", "", 1, 0, 2.5, [], {"a": 1}])
def test_parse_paste_rejects_anything_else(value: object) -> None:
    with pytest.raises(InvalidArgumentError) as info:
        parse_paste(value)
    assert info.value.code == "INVALID_ARGUMENT"
    assert "auto" in info.value.hint

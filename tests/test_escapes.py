from itertools import pairwise

import pytest

from nanomem.text.escapes import strip_escapes

HOSTILE = {
    "title (OSC 0, BEL)": ("a\x1b]0;pwned\x07b", "ab"),
    "clipboard (OSC 52, ST)": ("a\x1b]52;c;cm0gLXJmIH4=\x1b\\b", "ab"),
    "clear screen (CSI)": ("a\x1b[2Jb\x1b[1;1Hc", "abc"),
    "colour and cursor": ("\x1b[31mred\x1b[0m \x1b[?25l", "red "),
    "device control string": ("a\x1bPq#0;2;0;0;0\x1b\\b", "ab"),
    "C1 CSI and OSC": ("a\x9b2Jb\x9d0;t\x07c", "abc"),
    "reset and charset": ("a\x1bcb\x1b(Bc", "abc"),
    "carriage return and backspace": ("safe\rrm -rf\x08\x08", "saferm -rf"),
    "an OSC left open ends at the line": ("a\x1b]0;title\nnext", "a\nnext"),
}


@pytest.mark.parametrize("raw, shown", HOSTILE.values(), ids=HOSTILE.keys())
def test_control_sequences_go_and_the_text_stays(raw: str, shown: str) -> None:
    assert strip_escapes(raw) == shown


def test_plain_text_newlines_and_tabs_are_kept() -> None:
    text = "# Title\n\n- one\titem — ünïcode 🙂\n"
    assert strip_escapes(text) == text


def test_text_so_far_is_always_the_start_of_the_whole() -> None:
    whole = "ok \x1b]0;title\x07 then \x1b[2J cleared \x1b]52;c;aGk=\x1b\\ end"
    shown = [strip_escapes(whole[:n]) for n in range(len(whole) + 1)]
    assert all(later.startswith(earlier) for earlier, later in pairwise(shown))
    assert shown[-1] == "ok  then  cleared  end"

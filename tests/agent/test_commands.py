import pytest

from nanomem.agent.commands import parse_command


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("/help", ("help", "")),
        ("  /new  ", ("new", "")),
        ("/dream_log abc123", ("dream-log", "abc123")),
        ("/Dream-Restore@nanomem_bot 1a2b", ("dream-restore", "1a2b")),
        ("/stop@SomeBot", ("stop", "")),
        ("/x multi\nline args", ("x", "multi\nline args")),
    ],
)
def test_commands_are_parsed(text: str, expected: tuple[str, str]) -> None:
    assert parse_command(text) == expected


@pytest.mark.parametrize("text", ["hello", "/etc/hosts is odd", "/ space", "//x", "/1abc", ""])
def test_ordinary_text_is_not_a_command(text: str) -> None:
    assert parse_command(text) is None

"""A config.toml that is not UTF-8 (found by a fuzz pass: "internal error: UnicodeDecodeError",
exit 1): the real `nanomem` command exits 2 with a config error naming the file and the byte."""

from __future__ import annotations

import pytest

from nanomem.home import Home
from tests.conftest import cli_env, run_cli

GOOD = b'[agent]\nmax_message_chars = 32000\n[llm]\nmodel = "openai/x'


@pytest.mark.parametrize(
    ("raw", "at"),
    [
        (GOOD + b'\xff\xfe"\n', len(GOOD)),  # in a value
        (b"\xef\xbb\xbf# a BOM then Latin-1: caf\xe9\n", 28),  # in a comment
        (b"[llm]\nmodel = 'a'\n\x80\n", 18),  # a stray continuation byte
        (b"model = '\xed\xa0\x80'\n", 9),  # a UTF-16 surrogate, which UTF-8 may not hold
    ],
    ids=["value", "comment", "stray-byte", "surrogate"],
)
@pytest.mark.parametrize("command", [["status"], ["chat", "-m", "hi"]], ids=["status", "chat"])
def test_a_config_that_is_not_utf8_is_a_config_error_naming_the_byte(
    home: Home, raw: bytes, at: int, command: list[str]
) -> None:
    home.root.mkdir(parents=True, exist_ok=True)
    home.config.write_bytes(raw)
    done = run_cli(*command, env=cli_env(home), timeout=60)
    assert done.returncode == 2, done.stderr
    assert f"config error: {home.config}: not valid UTF-8 at byte {at}" in done.stderr
    assert "internal error" not in done.stderr and "Traceback" not in done.stderr
    assert home.config.read_bytes() == raw  # left as it was

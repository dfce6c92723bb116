"""`nanomem chat` in a pseudo-terminal: the `chat` fixture (a plugin of tests/conftest.py)."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pexpect
import pytest

from nanomem.home import Home
from tests.conftest import cli_env
from tests.fakes.openai_server import FakeOpenAI
from tests.helpers import WAIT_S  # the safety net of every expect: each waits for its text

PROMPT = "you ›"


@pytest.fixture
def chat(home: Home, fake_llm: FakeOpenAI) -> Iterator[pexpect.spawn]:
    child = pexpect.spawn(
        sys.executable,
        ["-m", "nanomem", "chat"],
        env=cli_env(home, fake_llm, TERM="xterm", PROMPT_TOOLKIT_NO_CPR="1"),
        encoding="utf-8",
        timeout=WAIT_S,
        dimensions=(40, 100),
    )
    child.expect_exact(PROMPT)
    yield child
    if child.isalive():
        child.terminate(force=True)

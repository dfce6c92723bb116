"""A reader that closes stdout early (`nanomem chat -m … | head -3`, `memory log | head`):
the real `nanomem` command in a subprocess, its stdout a real pipe whose reading end is
already closed, so every write fails with EPIPE. The command leaves quietly, as a Unix tool
does: no traceback, no "internal error", no "Exception ignored" at interpreter exit."""

from __future__ import annotations

import os
import subprocess

import pytest

from nanomem.home import Home
from nanomem.memory.session import session_filename
from tests.conftest import NANOMEM, cli_env
from tests.fakes.openai_server import FakeOpenAI

READER_GONE = 141  # 128 + SIGPIPE: what a shell reports for `yes | head`
LINES = "\n".join(f"line {n} of a long answer" for n in range(200))


def into_closed_pipe(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """`nanomem ARGS` writing to a pipe nobody reads any more."""
    read, write = os.pipe()
    os.close(read)  # the reader left before the first byte
    try:
        return subprocess.run(
            [*NANOMEM, *args],
            env=env,
            stdout=write,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
            timeout=120,
            check=False,
        )
    finally:
        os.close(write)


def assert_quiet(result: subprocess.CompletedProcess[str]) -> None:
    assert result.returncode == READER_GONE, result.stderr
    for noise in ("Traceback", "BrokenPipe", "internal error", "Exception ignored"):
        assert noise not in result.stderr, result.stderr


@pytest.mark.slow
def test_chat_m_into_a_closed_pipe_leaves_quietly_with_its_turn_saved(
    home: Home, fake_llm: FakeOpenAI
) -> None:
    fake_llm.reply(LINES)
    result = into_closed_pipe("chat", "-m", "list them", env=cli_env(home, fake_llm))
    assert_quiet(result)
    # The reader left; the conversation did not: the answer is in the session.
    saved = (home.sessions / session_filename("cli:direct")).read_text()
    assert "line 199 of a long answer" in saved


@pytest.mark.slow
def test_memory_log_into_a_closed_pipe_leaves_quietly(home: Home) -> None:
    (home.workspace / "USER.md").write_text(LINES)
    assert_quiet(into_closed_pipe("memory", "log", env=cli_env(home)))


@pytest.mark.slow
def test_memory_restore_listing_into_a_closed_pipe_leaves_quietly(home: Home) -> None:
    assert_quiet(into_closed_pipe("memory", "restore", env=cli_env(home)))

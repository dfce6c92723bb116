"""A model (or a file it wrote) sends terminal control sequences: a title change, a cleared
screen, an OSC 52 clipboard write. Whatever nanomem prints shows their plain text only."""

from __future__ import annotations

import pexpect
import pytest

from nanomem.app import build_app
from nanomem.home import Home
from nanomem.memory.history import HistoryEntry
from tests.conftest import cli_env, run_cli_here, settings_for
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.telegram_server import FakeTelegram
from tests.helpers.gateway import ALLOWED, break_session, retrying_gateway
from tests.helpers.terminal import PROMPT

OWNER = ALLOWED[0]  # the first user the gateway lets in
TITLE, CLEAR, CLIPBOARD = "\x1b]0;pwned-title\x07", "\x1b[2J", "\x1b]52;c;cm0gLXJmIH4=\x07"
HOSTILE = f"Plain words{TITLE} stay{CLEAR} here{CLIPBOARD} and end."
SHOWN = "Plain words stay here and end."
SEQUENCES = ("\x1b]0;", "\x1b]52;", CLEAR, "pwned-title", "cm0gLXJmIH4=")


def assert_safe(output: str) -> None:
    for sequence in SEQUENCES:
        assert sequence not in output, repr(sequence)


def test_chat_m_prints_the_plain_text_only(home: Home, fake_llm: FakeOpenAI) -> None:
    fake_llm.reply(HOSTILE)  # streamed in three pieces: sequences split between them
    result = run_cli_here("chat", "-m", "hi", env=cli_env(home, fake_llm))
    assert result.returncode == 0, result.stderr
    assert result.stdout == SHOWN + "\n"


def test_a_failed_turn_prints_no_sequence_either(home: Home, fake_llm: FakeOpenAI) -> None:
    fake_llm.reply(HOSTILE, cut_after=2)  # the stream breaks: what was shown is kept, noted
    result = run_cli_here(
        "chat", "-m", "hi", env=cli_env(home, fake_llm, NANOMEM_LLM__MAX_RETRIES="0")
    )
    assert_safe(result.stdout + result.stderr)
    assert result.stdout.startswith("Plain words\n\n(The model service had an internal error")


@pytest.mark.slow  # a process in a pseudo-terminal
def test_the_interactive_chat_shows_the_plain_text_only(
    chat: pexpect.spawn,
    fake_llm: FakeOpenAI,
) -> None:
    fake_llm.tool_call("list_dir", {f"path{TITLE}": "memory"})  # a key is shown as written
    fake_llm.reply(HOSTILE)
    chat.sendline("what is in memory?")
    chat.expect_exact("and end.")  # the reply's last words: shown with or without the fix
    seen = chat.before + chat.after
    chat.expect_exact(PROMPT)
    seen += chat.before
    assert_safe(seen)
    assert "list_dir(path='memory')" in seen and SHOWN in seen


def test_memory_log_and_why_show_a_hostile_memory_file_as_text(
    home: Home, fake_llm: FakeOpenAI
) -> None:
    memory = home.workspace / "memory" / "MEMORY.md"
    memory.write_text(memory.read_text() + f"\n- {HOSTILE}\n")
    build_app(settings_for(home), home).git.commit_manual_edits()  # as Dream does first
    log = run_cli_here("memory", "log", env=cli_env(home))
    assert log.returncode == 0 and f"+- {SHOWN}" in log.stdout, log.stderr
    assert_safe(log.stdout)
    why = run_cli_here("memory", "why", "Plain", "words", env=cli_env(home))
    assert_safe(why.stdout + why.stderr)


def test_a_hostile_error_body_reaches_the_log_as_text(home: Home, fake_llm: FakeOpenAI) -> None:
    fake_llm.error(500, f"upstream said: {HOSTILE}")
    env = cli_env(home, fake_llm, NANOMEM_LLM__MAX_RETRIES="0")
    result = run_cli_here("chat", "-m", "hi", "--log-level", "WARNING", env=env)
    assert result.returncode == 1
    log = (home.logs / "nanomem.log").read_text()
    assert f"upstream said: {SHOWN}" in log  # the server's words, as text
    assert_safe(log + result.stderr)


@pytest.mark.slow  # Dream waits between its attempts
def test_dream_output_shows_a_hostile_error_as_text(home: Home, fake_llm: FakeOpenAI) -> None:
    history = home.workspace / "memory" / "history.jsonl"
    entry = HistoryEntry(1, "2026-11-25T10:00:00+00:00", "cli:direct", "- likes tea", "summary")
    history.write_text(entry.to_json() + "\n")
    fake_llm.error(500, f"upstream said: {HOSTILE}")
    env = cli_env(home, fake_llm, NANOMEM_LLM__MAX_RETRIES="0")
    result = run_cli_here("dream", env=env)
    assert result.stdout.startswith("Dream failed and changed nothing"), result.stdout
    assert_safe(result.stdout + result.stderr)


@pytest.mark.slow
def test_a_parked_message_shows_no_sequence_in_status_or_inbox(
    servers: tuple[FakeTelegram, FakeOpenAI],
    home: Home,
) -> None:
    """A person's words (not the model's) reach the owner's terminal too: the first words of a
    message whose handling kept failing, in `nanomem status` and `nanomem inbox`."""
    telegram, llm = servers
    break_session(home, 1002)
    process = retrying_gateway(home, telegram, llm)
    telegram.send_text(1002, f"Hi{TITLE}{CLEAR}{CLIPBOARD}!")
    telegram.wait_for_messages(OWNER, 1)  # told it is parked
    assert process.stop() == 0, "".join(process.lines)
    for command in ("status", "inbox"):
        result = run_cli_here(command, env=cli_env(home))
        assert result.returncode == 0, result.stderr
        assert "telegram:1002" in result.stdout and "“Hi!”" in result.stdout, result.stdout
        assert_safe(result.stdout)

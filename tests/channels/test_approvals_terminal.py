"""Approvals in `nanomem chat` (a pseudo-terminal): a shell command asked y/N/always at the
prompt, and a Dream change waiting for the owner shown when a session starts."""

import sys
from collections.abc import Iterator

import pexpect
import pytest

from nanomem.home import Home
from tests.conftest import cli_env, run_cli
from tests.fakes.openai_server import FakeOpenAI
from tests.helpers.dream import script_a_dream

PROMPT = "you ›"


def spawn(home: Home, fake_llm: FakeOpenAI, **env: str) -> pexpect.spawn:
    child = pexpect.spawn(
        sys.executable,
        ["-m", "nanomem", "chat"],
        env=cli_env(home, fake_llm, TERM="xterm", PROMPT_TOOLKIT_NO_CPR="1", **env),
        encoding="utf-8",
        timeout=30,
        dimensions=(40, 100),
    )
    return child


@pytest.fixture
def shell_chat(home: Home, fake_llm: FakeOpenAI) -> Iterator[pexpect.spawn]:
    child = spawn(home, fake_llm, NANOMEM_TOOLS__SHELL_ENABLED="true")
    child.expect_exact(PROMPT)
    yield child
    if child.isalive():
        child.terminate(force=True)


def test_a_shell_command_is_asked_at_the_prompt(
    shell_chat: pexpect.spawn, fake_llm: FakeOpenAI, home: Home
) -> None:
    fake_llm.tool_call("exec", {"command": "touch asked.txt"})
    fake_llm.reply("Made it.")
    shell_chat.sendline("make a file")
    shell_chat.expect_exact("Run this command?")
    shell_chat.expect_exact("allow? [y/N/always]")
    shell_chat.sendline("y")
    shell_chat.expect_exact("Allowed once.")
    shell_chat.expect_exact("Made it.")
    shell_chat.expect_exact(PROMPT)
    assert (home.workspace / "asked.txt").exists()

    fake_llm.tool_call("exec", {"command": "touch refused.txt"})
    fake_llm.reply("It was denied.")
    shell_chat.sendline("make another")
    shell_chat.expect_exact("allow? [y/N/always]")
    shell_chat.sendline("")  # the default is no
    shell_chat.expect_exact("Denied.")
    shell_chat.expect_exact("It was denied.")
    assert fake_llm.requests[-1]["messages"][-1]["content"] == "denied by the owner"
    assert not (home.workspace / "refused.txt").exists()


def test_a_waiting_dream_change_is_shown_when_a_session_starts(
    home: Home, fake_llm: FakeOpenAI
) -> None:
    env = cli_env(home, fake_llm, NANOMEM_DREAM__REVIEW="ask")
    fake_llm.reply("Nice to meet you, Ada!")
    assert run_cli("chat", "-m", "I'm Ada and I love green tea", env=env).returncode == 0
    fake_llm.reply("- 2026-11-22: the user is Ada and loves green tea")
    assert run_cli("chat", "-m", "/new", env=env).returncode == 0
    script_a_dream(fake_llm)
    dreamed = run_cli("dream", env=env)
    assert dreamed.stdout.startswith("Dream prepared a memory change"), dreamed.stdout
    assert "Ada" not in (home.workspace / "USER.md").read_text()

    child = spawn(home, fake_llm, NANOMEM_DREAM__REVIEW="ask")
    try:
        child.expect_exact("Dream prepared a memory change")
        child.expect_exact("[Approve: /dream-approve ")
        child.expect_exact(PROMPT)
        child.sendline("/dream-approve")
        child.expect_exact("Approved")
        child.expect_exact(PROMPT)
    finally:
        child.terminate(force=True)
    assert "- Name: Ada" in (home.workspace / "USER.md").read_text()

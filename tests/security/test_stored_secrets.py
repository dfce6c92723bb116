"""A configured secret the person types into a chat is masked wherever nanomem writes text."""

from __future__ import annotations

import pexpect
import pytest
from dulwich.repo import Repo

from nanomem.agent.inbox import SqliteInbox
from nanomem.app import build_app
from nanomem.audience import Sender
from nanomem.home import Home
from tests.conftest import TEST_KEY, cli_env, run_cli_here, settings_for
from tests.fakes.openai_server import FakeOpenAI, Step
from tests.helpers.leaks import secret_free_files
from tests.helpers.terminal import PROMPT

LLM_KEY = "sk-configured-llm-key-0123456789"
BOT_TOKEN = "123456789:AAH-telegram-token-for-tests_0123"
API_KEY = "nm-api-client-key-0123456789"
ENV_SECRET = "ghp_environment0123456789abcdef"
SECRETS = (LLM_KEY, BOT_TOKEN, API_KEY, ENV_SECRET)


def configure(home: Home) -> None:
    """The three configured secrets in config.toml, as a person writes them."""
    text = home.config.read_text()
    text = text.replace("[llm]\n", f'[llm]\napi_key = "{LLM_KEY}"\n', 1)
    text = text.replace("[telegram]\n", f'[telegram]\ntoken = "{BOT_TOKEN}"\n', 1)
    text = text.replace("[api]\n", f'[api]\nkeys = ["{API_KEY}"]\n', 1)
    home.config.write_text(text)


def test_secrets_typed_into_a_chat_are_stored_masked(home: Home, fake_llm: FakeOpenAI) -> None:
    configure(home)
    env = cli_env(home, fake_llm, GITHUB_TOKEN=ENV_SECRET, NANOMEM_LOG__LEVEL="DEBUG")
    del env["NANOMEM_LLM__API_KEY"]  # the configured one is used
    fake_llm.reply("Noted.")
    # A model that knows them anyway writes them into its summary: masked there too.
    fake_llm.set_fallback(lambda request: Step.reply("- asked to keep: " + ", ".join(SECRETS)))
    typed = "keep these for me: " + ", ".join(SECRETS)
    result = run_cli_here("chat", "-m", typed, env=env)
    assert result.returncode == 0 and result.stdout.strip() == "Noted.", result.stderr
    assert fake_llm.auth_headers[0] == f"Bearer {LLM_KEY}"  # the configured key is in use
    for secret in SECRETS:
        assert secret_free_files(home, secret) == [], secret  # the session file
    seen = fake_llm.requests[0]["messages"][-1]["content"]
    assert seen.endswith("keep these for me: ***, ***, ***, ***")  # and what the model read
    archived = run_cli_here("chat", "-m", "/new", env=env)
    assert archived.returncode == 0, archived.stderr
    history = (home.workspace / "memory" / "history.jsonl").read_text()
    assert "- asked to keep: ***, ***, ***, ***" in history  # archived, masked
    log = (home.logs / "nanomem.log").read_text()
    assert "DEBUG" in log
    for secret in SECRETS:
        assert secret_free_files(home, secret) == [], secret


def test_a_secret_pasted_into_a_memory_file_stays_out_of_commits_and_the_log_shown(
    home: Home,
) -> None:

    configure(home)
    user_md = home.workspace / "USER.md"
    user_md.write_text(user_md.read_text() + f"\n- bot token: {BOT_TOKEN}\n")
    build_app(settings_for(home), home).git.commit_manual_edits()  # as Dream does first
    shown = run_cli_here("memory", "log", env=cli_env(home))
    assert shown.returncode == 0, shown.stderr
    assert "+- bot token: ***" in shown.stdout and BOT_TOKEN not in shown.stdout
    git_dir = next(home.root.rglob("HEAD")).parent  # the memory repository, wherever it is
    with Repo(str(git_dir)) as repo:
        messages = [entry.commit.message for entry in repo.get_walker()]
    assert any(b"+- bot token: ***" in m for m in messages)
    assert not any(BOT_TOKEN.encode() in m for m in messages)


def test_a_secret_in_an_inbound_message_is_masked_in_the_inbox(home: Home) -> None:

    configure(home)
    build_app(settings_for(home), home)  # registers the configured secrets, as every start does
    inbox = SqliteInbox(home.root / "inbox-test.sqlite3")
    inbox.add("telegram", [("42", {"text": f"my key is {API_KEY}"}, Sender())], ("offset", "1"))
    (pending,) = inbox.pending("telegram")
    assert pending.payload == {"text": "my key is ***"}
    inbox.close()
    assert secret_free_files(home, API_KEY) == []


@pytest.mark.slow  # a process in a pseudo-terminal
def test_a_secret_typed_at_the_chat_prompt_is_stored_masked(
    chat: pexpect.spawn,
    home: Home,
    fake_llm: FakeOpenAI,
) -> None:
    fake_llm.reply("Noted.")
    chat.sendline(f"my key is {TEST_KEY}")
    chat.expect_exact("Noted.")
    chat.expect_exact(PROMPT)
    chat.sendcontrol("d")
    chat.expect(pexpect.EOF)
    assert "my key is ***" in home.chat_history.read_text()  # the prompt's own history
    assert secret_free_files(home, TEST_KEY) == []

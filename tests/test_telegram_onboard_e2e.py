"""Telegram from onboarding to a first reply: `nanomem onboard` in a pseudo-terminal asks for
the bot token (hidden, checked with getMe against the loopback Bot API) and the owner's id and
writes them into config.toml's [telegram] in place; the real gateway then answers the owner,
whom no allow_from names, and still refuses a stranger silently."""

from __future__ import annotations

import io
import json
import sys
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pexpect
import pytest

from nanomem.cli.web_setup import QUESTION as WEB_QUESTION
from nanomem.home import Home
from tests.conftest import cli_env
from tests.fakes.openai_server import FakeOpenAI, echo_step
from tests.fakes.telegram_server import FakeTelegram
from tests.helpers.gateway import GatewayProcess
from tests.helpers.loopback import loopback

OWNER, STRANGER = 4242, 666
TOKEN = "987654321:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw"  # the shape @BotFather hands out


@pytest.fixture
def servers() -> Iterator[tuple[FakeTelegram, FakeOpenAI]]:
    with FakeTelegram(TOKEN, bot_username="my_own_bot") as telegram, FakeOpenAI() as llm:
        llm.set_fallback(echo_step)
        yield telegram, llm


def onboard_env(home: Home, telegram: FakeTelegram, **extra: str) -> dict[str, str]:
    env = cli_env(home, TERM="xterm", NANOMEM_TELEGRAM__BASE_URL=telegram.base_url, **extra)
    env.pop("NANOMEM_TELEGRAM__TOKEN", None)
    return env


def spawn(env: dict[str, str], *args: str) -> tuple[pexpect.spawn, io.StringIO]:
    child = pexpect.spawn(
        sys.executable, ["-m", "nanomem", *args], env=env, encoding="utf-8", timeout=60
    )
    child.logfile_read = seen = io.StringIO()
    return child, seen


def finish(child: pexpect.spawn, seen: io.StringIO) -> str:
    child.expect_exact(WEB_QUESTION)  # the web app, offered last: not now
    child.sendline("")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0, seen.getvalue()
    assert "Traceback" not in seen.getvalue()
    return seen.getvalue()


def telegram_table(home: Home) -> dict[str, object]:
    return dict(tomllib.loads(home.config.read_text())["telegram"])


def test_onboarding_asks_the_token_checks_it_and_lets_the_owner_in(
    tmp_path: Path, servers: tuple[FakeTelegram, FakeOpenAI]
) -> None:
    telegram, llm = servers
    home = Home(tmp_path / "home")
    child, seen = spawn(onboard_env(home, telegram, NANOMEM_TELEGRAM__ENABLED="true"), "onboard")
    child.expect_exact("Model (")
    child.sendline("")  # later
    child.expect_exact("@BotFather")
    child.expect_exact("Bot token (hidden")
    child.sendline("987654321:not-this-bots-token")
    child.expect_exact("Telegram refused this token (401)")
    child.expect_exact("Bot token (hidden")
    child.sendline("ls -la")
    child.expect_exact("That is not a bot token")
    child.expect_exact("Bot token (hidden")
    child.sendline(TOKEN)
    child.expect_exact("The token works: this is @my_own_bot.")
    child.expect_exact("@userinfobot")
    child.expect_exact("Telegram user id")
    child.sendline(str(OWNER))
    shown = finish(child, seen)
    assert TOKEN not in shown and "not-this-bots-token" not in shown  # typed hidden
    assert "bot @my_own_bot, owner 4242" in shown and "nanomem gateway" in shown
    text = home.config.read_text()
    assert text.count("[telegram]") == 1  # the template's keys, uncommented in place
    assert telegram_table(home) == {"enabled": True, "token": TOKEN, "owner": OWNER}
    assert [m for m, _ in telegram.calls] == ["getme", "getme"]  # the malformed one never sent

    # The owner comes from the file alone: no allow_from, no NANOMEM_TELEGRAM__OWNER.
    with GatewayProcess(home, telegram, llm, NANOMEM_TELEGRAM__ALLOW_FROM="[]") as gateway:
        telegram.send_text(STRANGER, "let me in", username="mallory")
        telegram.send_text(OWNER, "hello from the owner")
        (reply,) = telegram.wait_for_messages(OWNER, 1, timeout=60)
        assert reply["text"].endswith("hello from the owner")
        time.sleep(0.3)  # a margin for what must not come
        assert telegram.sent_messages(STRANGER) == [] and telegram.chat_actions(STRANGER) == []
        gateway.wait_for_line(r"refused Telegram user 666 \(@mallory\)")
        assert not any("let me in" in json.dumps(r) for r in llm.requests)


def test_the_owner_alone_is_answered_when_allow_from_is_empty(
    tmp_path: Path, servers: tuple[FakeTelegram, FakeOpenAI]
) -> None:
    """The bug: a gateway with telegram.owner and no allow_from refused its owner."""
    telegram, llm = servers
    home = Home(tmp_path / "home")
    env = {"NANOMEM_TELEGRAM__ALLOW_FROM": "[]", "NANOMEM_TELEGRAM__OWNER": str(OWNER)}
    with GatewayProcess(home, telegram, llm, **env) as gateway:
        telegram.send_text(STRANGER, "secret words", username="mallory")
        telegram.send_text(OWNER, "is anyone there")
        (reply,) = telegram.wait_for_messages(OWNER, 1, timeout=60)
        assert reply["text"].startswith("echo: ") and reply["text"].endswith("is anyone there")
        gateway.wait_for_line(r"refused Telegram user 666 \(@mallory\)")
        time.sleep(0.3)
        assert telegram.sent_messages(STRANGER) == [] and telegram.chat_actions(STRANGER) == []
        assert not any("secret words" in json.dumps(r) for r in llm.requests)
        assert not any("refused Telegram user 4242" in line for line in gateway.lines)


def test_onboarding_offers_telegram_and_an_empty_token_leaves_it_off(tmp_path: Path) -> None:
    with loopback(echo_step) as (telegram, _):
        home = Home(tmp_path / "home")
        env = onboard_env(home, telegram)
        child, seen = spawn(env, "onboard")
        child.expect_exact("Model (")
        child.sendline("")
        child.expect_exact("Connect Telegram now? [y/N]")
        child.sendline("")
        shown = finish(child, seen)
        assert "Bot token" not in shown and "enabled" not in telegram_table(home)

        child, seen = spawn(env, "onboard")  # again, on the home it made: offered again
        child.expect_exact("Connect Telegram now? [y/N]")
        child.sendline("y")
        child.expect_exact("Bot token (hidden")
        child.sendline("")
        shown = finish(child, seen)
        assert "Telegram is not connected (no token given)" in shown
        assert "run `nanomem onboard` again" in shown
        assert telegram_table(home) == {} and telegram.calls == []


def test_a_bot_api_that_cannot_be_reached_is_said_without_the_token(tmp_path: Path) -> None:
    home = Home(tmp_path / "home")
    with FakeTelegram(TOKEN) as telegram:
        gone = telegram.base_url
    env = onboard_env(home, telegram, NANOMEM_TELEGRAM__ENABLED="true")
    env["NANOMEM_TELEGRAM__BASE_URL"] = gone
    child, seen = spawn(env, "onboard")
    child.expect_exact("Model (")
    child.sendline("")
    for _ in range(3):
        child.expect_exact("Bot token (hidden")
        child.sendline(TOKEN)
        child.expect_exact(f"Could not reach the Bot API at {gone}")
    shown = finish(child, seen)
    assert "Telegram is not connected (no working token in 3 tries)" in shown
    assert TOKEN not in shown and TOKEN.split(":")[1] not in shown
    assert "token" not in telegram_table(home) and "owner" not in telegram_table(home)

"""A message replayed after a SIGKILL is the same message from the same person: the real
gateway in a subprocess, killed during a turn, restarted under a changed config. The replay
runs with the sender the channel vouched for at receipt (the inbox row's), and is admitted
under the config of the restart."""

from __future__ import annotations

import json
import signal
from typing import Any

import pytest

from nanomem.cli.onboard import onboard
from nanomem.home import Home
from tests.fakes.openai_server import FakeOpenAI, Step
from tests.fakes.telegram_server import FakeTelegram
from tests.helpers import wait_until
from tests.helpers.gateway import GatewayProcess, texts

pytestmark = pytest.mark.slow

OWNER, MEMBER = 1000, 1001
COMMAND = "echo replayed"
SHELL = {"NANOMEM_TOOLS__SHELL_ENABLED": "true"}  # approval "ask": only the owner approves


def model(request: dict[str, Any]) -> Step:
    """Ask for a shell command; once its result is in, answer with what the tool said."""
    last = request["messages"][-1]
    if last["role"] == "tool":
        return Step.reply(f"tool said: {last['content']}")
    return Step.tool_call("exec", {"command": COMMAND})


def killed_during_a_turn(home: Home, telegram: FakeTelegram, llm: FakeOpenAI) -> None:
    """MEMBER writes while OWNER is the owner; the gateway dies while the model thinks."""
    llm.hang(120)
    gateway = GatewayProcess(home, telegram, llm, **SHELL, NANOMEM_TELEGRAM__OWNER=str(OWNER))
    telegram.send_text(MEMBER, "please run it")
    wait_until(lambda: llm.requests, timeout=30, what="the turn to reach the model")
    gateway.stop(signal.SIGKILL)
    llm.clear()


def test_a_replay_keeps_the_sender_vouched_for_at_receipt(tmp_path: Any) -> None:
    """MEMBER was not the owner when they wrote: made the owner before the restart, their
    replayed message still is not the owner's (no approval question reaches them; the command
    is refused as for anyone who is not the owner)."""
    home = Home(tmp_path / "home")
    onboard(home)
    with FakeTelegram() as telegram, FakeOpenAI() as llm:
        llm.set_fallback(model)
        killed_during_a_turn(home, telegram, llm)
        with GatewayProcess(home, telegram, llm, **SHELL, NANOMEM_TELEGRAM__OWNER=str(MEMBER)):
            wait_until(
                lambda: any(t.startswith("tool said:") for t in texts(telegram.sent_messages())),
                timeout=30,
                what="the replayed turn's reply",
            )
            sent = texts(telegram.sent_messages(MEMBER))
            assert not any("Run this command?" in t for t in sent)
            (reply,) = [t for t in sent if t.startswith("tool said:")]
            assert "nobody can approve" in reply


def test_a_replay_is_admitted_under_the_config_of_the_restart(tmp_path: Any) -> None:
    """Removed from telegram.allow_from before the restart: the stored message is dropped,
    unanswered, and leaves the inbox."""
    home = Home(tmp_path / "home")
    onboard(home)
    with FakeTelegram() as telegram, FakeOpenAI() as llm:
        llm.set_fallback(model)
        killed_during_a_turn(home, telegram, llm)
        llm.set_fallback(lambda request: Step.reply("plain answer"))
        allowed = json.dumps([OWNER])
        with GatewayProcess(home, telegram, llm, NANOMEM_TELEGRAM__ALLOW_FROM=allowed):
            telegram.send_text(OWNER, "hello")
            wait_until(lambda: telegram.sent_messages(OWNER), timeout=30, what="a reply")
            assert telegram.sent_messages(MEMBER) == []
            assert all("please run it" not in json.dumps(r["messages"]) for r in llm.requests)

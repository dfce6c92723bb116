"""/why through the real gateway: a fact told in a Telegram chat is archived, dreamed by the
real Dream over HTTP to the loopback model, and `/why` then names the chat and
quotes the entry; a line written by hand says so; a group is told nothing personal."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest

from nanomem.cli.onboard import onboard
from nanomem.home import Home
from tests.conftest import cli_env, run_cli
from tests.fakes.openai_server import FakeOpenAI, Step
from tests.fakes.telegram_server import FakeTelegram
from tests.helpers import wait_until
from tests.helpers.gateway import GatewayProcess, texts

OWNER, GROUP, MEMBER = 1000, -100777, 1001
TOLD = "By the way, I moved to Quito last month."
SUMMARY = "- 2026-11-23: the user said she moved to Quito last month"
LEARNED = "- Lives in Quito"
BY_HAND = "- Allergic to cats"


def model(request: dict[str, Any]) -> Step:
    """The chat, the archive's summary and Dream's two phases, told apart by their prompts."""
    messages = request["messages"]
    last = str(messages[-1].get("content", ""))
    tools = {t["function"]["name"] for t in request.get("tools") or []}
    if "edit_memory" in tools:  # Dream, phase 2
        if messages[-1]["role"] == "tool":
            return Step.reply("Recorded where the person lives.")
        edit = {"file": "USER.md", "old_text": "# User\n", "new_text": f"# User\n{LEARNED}\n"}
        return Step.tool_call("edit_memory", edit)
    if "## New conversation history" in last:  # Dream, phase 1: cite the entry by its number
        cited = re.search(r"### entry (\d+) · \S+ · telegram:1000\n.*Quito", last)
        assert cited, last
        return Step.reply(f"NEW:\n- USER.md: lives in Quito [entry {cited.group(1)}]")
    if "for your\nlong-term archive" in last:  # the archive's summary
        return Step.reply(SUMMARY)
    return Step.reply("Noted!")


@pytest.fixture(scope="module")
def chats(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[GatewayProcess, FakeTelegram]]:
    home = Home(tmp_path_factory.mktemp("why") / "home")
    onboard(home)
    with FakeTelegram() as telegram, FakeOpenAI() as llm:
        llm.set_fallback(model)
        process = GatewayProcess(
            home, telegram, llm, NANOMEM_TELEGRAM__ALLOW_FROM=json.dumps([OWNER, GROUP])
        )
        yield process, telegram
        assert process.stop() == 0, "".join(process.lines)


def say(telegram: FakeTelegram, chat: int, text: str, **kwargs: Any) -> str:
    before = len(telegram.sent_messages(chat))
    telegram.send_text(chat, text, **kwargs)

    def replied() -> str | None:
        new = [t for t in texts(telegram.sent_messages(chat))[before:] if not t.startswith("⚙")]
        return new[0] if new else None

    return str(wait_until(replied, timeout=60, what=f"a reply to {text!r}"))


def test_why_names_the_chat_a_learned_fact_came_from(
    chats: tuple[GatewayProcess, FakeTelegram],
) -> None:
    gateway, telegram = chats
    assert say(telegram, OWNER, TOLD) == "Noted!"
    assert "Archived 2 messages" in say(telegram, OWNER, "/new")
    learned = say(telegram, OWNER, "/dream")
    assert learned.startswith("Learned from 1 history entry"), learned
    assert LEARNED in (gateway.home.workspace / "USER.md").read_text()

    answer = say(telegram, OWNER, "/why do you think I live in Quito?")
    assert answer.startswith(f"USER.md, line 2: “{LEARNED}”"), answer
    assert "by Dream run" in answer and answer.splitlines()[1].endswith(", from:")  # cited
    assert f"telegram chat {OWNER}, 20" in answer
    assert "she moved to Quito last month" in answer

    shell = run_cli("memory", "why", "Quito", env=cli_env(gateway.home))
    assert shell.returncode == 0, shell.stderr
    assert f"telegram chat {OWNER}" in shell.stdout and "moved to Quito" in shell.stdout
    usage = run_cli("memory", "why", env=cli_env(gateway.home))
    assert usage.returncode == 2 and "usage: nanomem memory why" in usage.stderr


def test_why_on_a_line_written_by_hand_says_so(
    chats: tuple[GatewayProcess, FakeTelegram],
) -> None:
    gateway, telegram = chats
    user = gateway.home.workspace / "USER.md"
    user.write_text(user.read_text() + BY_HAND + "\n")
    line = len(user.read_text().splitlines())
    answer = say(telegram, OWNER, "/why cats")
    assert answer.splitlines()[0] == f"USER.md, line {line}: “{BY_HAND}”"
    assert "Written by hand, outside Dream" in answer and "by Dream run" not in answer
    assert say(telegram, OWNER, "/why").startswith("Usage: /why <words")


def test_a_group_hears_nothing_of_the_owners_memory(
    chats: tuple[GatewayProcess, FakeTelegram],
) -> None:
    _, telegram = chats
    answer = say(telegram, GROUP, "/why Quito", chat_type="supergroup", user_id=MEMBER)
    assert answer.startswith("No remembered line matches “Quito”"), answer
    assert "USER.md" not in answer and "moved to Quito" not in answer

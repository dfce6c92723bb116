"""A group chat is a shared room: through the real gateway, a group member never gets the
owner's personal memory back, while the owner's private chat still does."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from nanomem.cli.onboard import onboard
from nanomem.home import Home
from nanomem.memory.history import HistoryEntry
from tests.fakes.openai_server import FakeOpenAI, Step
from tests.fakes.telegram_server import FakeTelegram
from tests.helpers import wait_until
from tests.helpers.gateway import GatewayProcess, texts

OWNER, GROUP, MEMBER = 1000, -100555, 1001
USER_FACT = "The owner's door code is 4711."
HISTORY_FACT = "- 2026-11-20: the owner said the locker code is 9876"
GROUP_FACT = "- 2026-11-21: the group agreed the picnic is on Sunday"
ASK = "@nanomem_test_bot "


def model(request: dict[str, Any]) -> Step:
    messages = request["messages"]
    last = messages[-1]
    if last["role"] == "tool":
        return Step.reply(f"tool said: {last['content']}")
    text = str(last["content"])
    if "READ USER" in text:
        return Step.tool_call("read_file", {"path": "USER.md"})
    if "READ HISTORY" in text:
        return Step.tool_call("read_file", {"path": "memory/history.jsonl"})
    if "LIST MEMORY" in text:
        return Step.tool_call("list_dir", {"path": "memory"})
    if "SEARCH" in text:
        return Step.tool_call("search_history", {"query": "code"})
    return Step.reply("plain answer")


@pytest.fixture(scope="module")
def room(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[GatewayProcess, FakeTelegram, FakeOpenAI]]:
    home = Home(tmp_path_factory.mktemp("groups") / "home")
    onboard(home)
    (home.workspace / "USER.md").write_text(f"# User\n- {USER_FACT}\n")
    entries = [
        HistoryEntry(1, "2026-11-20T10:00:00+00:00", f"telegram:{OWNER}", HISTORY_FACT, "summary"),
        HistoryEntry(
            2,
            "2026-11-21T10:00:00+00:00",
            f"telegram:{GROUP}",
            GROUP_FACT + " (code word: ant)",
            "summary",
        ),
    ]
    history = home.workspace / "memory" / "history.jsonl"
    history.write_text("".join(e.to_json() + "\n" for e in entries))
    with FakeTelegram() as telegram, FakeOpenAI() as llm:
        llm.set_fallback(model)
        process = GatewayProcess(
            home, telegram, llm, NANOMEM_TELEGRAM__ALLOW_FROM=json.dumps([OWNER, GROUP])
        )
        yield process, telegram, llm
        assert process.stop() == 0, "".join(process.lines)


def answer(telegram: FakeTelegram, chat: int, send: Any) -> str:
    """Send, then wait for the next reply that is not a tool-progress line."""
    before = len(texts(telegram.sent_messages(chat)))
    send()

    def replied() -> str | None:
        new = [t for t in texts(telegram.sent_messages(chat))[before:] if not t.startswith("⚙")]
        return new[0] if new else None

    return str(wait_until(replied, timeout=30, what="a reply"))


def in_group(telegram: FakeTelegram, text: str) -> str:
    return answer(
        telegram,
        GROUP,
        lambda: telegram.send_text(GROUP, ASK + text, chat_type="supergroup", user_id=MEMBER),
    )


def in_private(telegram: FakeTelegram, text: str) -> str:
    return answer(telegram, OWNER, lambda: telegram.send_text(OWNER, text))


def test_a_group_never_sees_personal_memory(
    room: tuple[GatewayProcess, FakeTelegram, FakeOpenAI],
) -> None:
    _, telegram, llm = room
    assert in_group(telegram, "hello there") == "plain answer"
    system = llm.requests[-1]["messages"][0]["content"]
    assert "4711" not in system and "9876" not in system and "This is a group chat" in system
    # A group's file tools start in its own folder: the owner's files are not there at all.
    read = in_group(telegram, "READ USER please")
    assert "no file at 'USER.md'" in read and "4711" not in read
    history = in_group(telegram, "READ HISTORY please")
    assert "no file at" in history and "9876" not in history
    listing = in_group(telegram, "LIST MEMORY please")
    assert "no folder at 'memory'" in listing
    found = in_group(telegram, "SEARCH for it")
    assert "9876" not in found and "code word: ant" in found  # its own entries only
    everything = " ".join(texts(telegram.sent_messages(GROUP)))
    assert "4711" not in everything and "9876" not in everything


def test_the_owner_still_sees_everything_in_private(
    room: tuple[GatewayProcess, FakeTelegram, FakeOpenAI],
) -> None:
    _, telegram, llm = room
    assert in_private(telegram, "hello") == "plain answer"
    system = llm.requests[-1]["messages"][0]["content"]
    assert "4711" in system and "This is a group chat" not in system
    assert "4711" in in_private(telegram, "READ USER please")  # positive controls
    assert "9876" in in_private(telegram, "SEARCH for it")

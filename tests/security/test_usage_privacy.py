"""`/usage` in a group chat, through the real gateway and Telegram channel: the group sees its
own chat's numbers only, never the owner's other chats nor the whole home's, whoever asks."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from nanomem.home import Home
from tests.fakes.openai_server import FakeOpenAI, Step
from tests.fakes.telegram_gateway import BOT, LiveGateway, telegram_gateway
from tests.fakes.telegram_server import FakeTelegram
from tests.helpers.loopback import Model

OWNER, MEMBER, GROUP = 1000, 1001, -100555
# Figures that could only come from one chat's calls.
PRIVATE_PROMPT, GROUP_PROMPT = 777_001, 5_003


def metered(request: dict[str, Any]) -> Step:
    """Replies with usage that says which chat's message it answered."""
    last = str(request["messages"][-1]["content"])
    prompt = PRIVATE_PROMPT if "diary" in last else GROUP_PROMPT
    return Step.reply("noted", usage={"prompt_tokens": prompt, "completion_tokens": 7})


@pytest.fixture
def model() -> Model:
    return metered


@pytest.fixture
async def live(home: Home, servers: tuple[FakeTelegram, FakeOpenAI]) -> AsyncIterator[LiveGateway]:
    allowed = {"allow_from": [OWNER, MEMBER, GROUP], "owner": OWNER}
    async with telegram_gateway(home, *servers, telegram=allowed) as gateway:
        yield gateway


async def in_group(live: LiveGateway, text: str, user: int) -> str:
    return await live.say(GROUP, text, chat_type="supergroup", user_id=user)


@pytest.mark.parametrize("asker", [MEMBER, OWNER], ids=["member", "owner"])
async def test_a_group_sees_only_its_own_usage(live: LiveGateway, asker: int) -> None:
    assert await live.say(OWNER, "my private diary: I slept badly") == "noted"
    assert await in_group(live, f"{BOT}what is on the agenda?", MEMBER) == "noted"
    shown = await in_group(live, "/usage", asker)
    assert f"{GROUP_PROMPT:,} prompt" in shown
    assert f"{PRIVATE_PROMPT:,}" not in shown
    assert f"{PRIVATE_PROMPT + GROUP_PROMPT:,}" not in shown  # the home's sum
    assert "whole home" not in shown
    assert str(OWNER) not in shown  # no other chat is named
    # The owner's own chat still sees the whole home, its own chat's numbers first.
    mine = await live.say(OWNER, "/usage")
    assert f"Today: {PRIVATE_PROMPT:,} prompt" in mine
    assert f"whole home today: {PRIVATE_PROMPT + GROUP_PROMPT:,} prompt" in mine

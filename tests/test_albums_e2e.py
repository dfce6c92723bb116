"""Telegram albums arrive as one message, through the real gateway: the Telegram channel against
the loopback Bot API (an update per part, sharing a media_group_id), the model over HTTP to the
loopback OpenAI fake, which takes images."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from typing import Any

import pytest

from nanomem.home import Home
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.telegram_gateway import LiveGateway, telegram_gateway
from tests.fakes.telegram_server import FakeTelegram
from tests.helpers import until

OWNER, GROUP, MEMBER = 1000, -500, 1001
PHOTOS = [b"\xff\xd8\xff\xe0 photo one", b"\xff\xd8\xff\xe0 photo two", b"\xff\xd8\xff\xe0 three"]
WAIT_S = 3.0  # telegram.album_wait_s here: long enough for a part sent after a poll


@pytest.fixture
async def live(home: Home, servers: tuple[FakeTelegram, FakeOpenAI]) -> AsyncIterator[LiveGateway]:
    telegram, llm = servers
    async with telegram_gateway(
        home,
        telegram,
        llm,
        telegram={"allow_from": [OWNER, MEMBER], "album_wait_s": WAIT_S, "stream": False},
        llm={"supports_images": True},
    ) as gateway:
        yield gateway


def user_turns(llm: FakeOpenAI) -> list[Any]:
    """The new user message of each model request."""
    return [[m for m in r["messages"] if m["role"] == "user"][-1]["content"] for r in llm.requests]


def images(content: Any) -> list[bytes]:
    parts = content if isinstance(content, list) else []
    urls = [p["image_url"]["url"] for p in parts if p.get("type") == "image_url"]
    return [base64.b64decode(url.split(",", 1)[1]) for url in urls]


def text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "\n".join(p["text"] for p in content if p.get("type") == "text")


async def test_a_three_photo_album_is_one_turn_with_three_images(live: LiveGateway) -> None:
    reply = await live.reply(
        OWNER, lambda: live.telegram.send_album(OWNER, PHOTOS, caption="which is best?")
    )
    assert reply.startswith("echo:")
    (turn,) = user_turns(live.llm)  # one turn for the three updates
    assert images(turn) == PHOTOS  # every part, in the order sent
    assert text_of(turn).count("[photo]") == 3 and "which is best?" in text_of(turn)
    assert len([m for m in live.telegram.sent_messages(OWNER) if "echo" in str(m)]) == 1


async def test_an_album_split_across_two_polls_is_still_one_message(live: LiveGateway) -> None:
    telegram = live.telegram
    first = telegram.send_album(OWNER, PHOTOS[:2], caption="two now, one later")
    group = first[0]["message"]["media_group_id"]
    # Both stored and confirmed (the next getUpdates carried their offset) before the third.
    await until(lambda: telegram.acknowledged(first[-1]["update_id"]), 30)
    assert live.llm.requests == []
    await live.reply(OWNER, lambda: telegram.send_album(OWNER, PHOTOS[2:], media_group_id=group))
    (turn,) = user_turns(live.llm)
    assert images(turn) == PHOTOS and "two now, one later" in text_of(turn)


async def test_a_message_after_an_album_is_answered_after_it(live: LiveGateway) -> None:
    telegram = live.telegram
    telegram.send_album(OWNER, PHOTOS[:2], caption="the album")
    await live.reply(OWNER, lambda: telegram.send_text(OWNER, "and a question after it"))
    await until(lambda: len(live.llm.requests) == 2, 30)
    album, question = user_turns(live.llm)
    assert "the album" in text_of(album) and len(images(album)) == 2
    assert "and a question after it" in text_of(question)


async def test_an_album_with_a_document_keeps_every_file(live: LiveGateway, home: Home) -> None:
    parts: list[bytes | tuple[str, bytes]] = [PHOTOS[0], ("notes.txt", b"buy plants\n")]
    await live.reply(OWNER, lambda: live.telegram.send_album(OWNER, parts))
    (turn,) = user_turns(live.llm)
    assert images(turn) == PHOTOS[:1]
    assert "[document: notes.txt]" in text_of(turn) and "buy plants" in text_of(turn)
    saved = sorted(p.suffix for p in (home.workspace / "media").iterdir())
    assert saved == [".jpg", ".txt"]


async def test_a_group_album_is_addressed_as_a_whole(live: LiveGateway) -> None:
    """The mention is in the first part's caption: the parts without one still belong to it.
    An album that mentions nobody is left alone, as any unaddressed group message is."""
    telegram = live.telegram
    telegram.send_album(GROUP, PHOTOS[:2], caption="nice view", chat_type="group", user_id=MEMBER)
    reply = await live.reply(
        GROUP,
        lambda: telegram.send_album(
            GROUP, PHOTOS, caption="@nanomem_test_bot which one?", chat_type="group", user_id=MEMBER
        ),
    )
    assert reply.startswith("echo:")
    (turn,) = user_turns(live.llm)
    assert images(turn) == PHOTOS and "which one?" in text_of(turn)
    assert "nice view" not in str(turn)

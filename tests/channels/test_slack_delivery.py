"""The Slack channel's delivery (channels/slack/delivery.py) with slack-sdk's own client against
the loopback Slack: what a rate limit makes of a reply that takes more than one call."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from channels.slack.delivery import SECTION_LIMIT, Delivery
from channels.slack.web import web_client
from nanomem.agent import Button, DeliveryLater, OutboundMessage, Text
from tests.fakes.slack_server import BOT_TOKEN, FakeSlack
from tests.helpers.slack import DM, slack_fake


@pytest.fixture
def fake() -> Iterator[FakeSlack]:
    server = slack_fake()
    yield server
    server.stop()


def delivery_to(fake: FakeSlack, workspace: Path) -> Delivery:
    return Delivery(web_client(BOT_TOKEN, fake.base_url), workspace, streams_in=lambda _: False)


async def test_long_words_with_buttons_are_not_posted_twice_when_the_core_sends_again(
    fake: FakeSlack, tmp_path: Path
) -> None:
    """Words longer than a section, with choices under them: Slack rate-limits the second
    call to chat.postMessage, and the core sends a part refused for later again (from that
    part on): the words show once, whatever number of calls the part takes."""
    delivery = delivery_to(fake, tmp_path)
    words = "word " * (SECTION_LIMIT // 5 + 100)
    asked = Text(words.strip(), buttons=(Button("Yes", "/help"),))
    msg = OutboundMessage("slack", DM, asked, "in-1", 1)
    fake.fail("chat.postMessage", "ratelimited", status=429, retry_after=1, after=1)
    for _ in range(3):  # as the core's send_in_turn does
        try:
            await delivery.send(msg)
            break
        except DeliveryLater:
            continue
    shown = [shown_text(m) for m in fake.messages_in(DM)]
    assert sum(words.strip()[:100] in text for text in shown) == 1, shown
    assert any(m.get("blocks") for m in fake.messages_in(DM))  # and the choices came


def shown_text(message: dict[str, Any]) -> str:
    """What Slack shows of a message: its blocks' text when it has blocks (`text` is then only
    the notification's), else its text."""
    blocks = message.get("blocks")
    if not blocks:
        return str(message["text"])
    return "".join(b["text"]["text"] for b in blocks if b.get("type") == "section")


async def test_a_huge_growing_reply_is_previewed_without_rendering_all_of_it(
    fake: FakeSlack, tmp_path: Path
) -> None:
    """Each piece of a reply 300,000 characters long: only its beginning is rendered for the
    preview (a message shows 3,900 at most), on the event loop, in milliseconds."""
    import time

    from nanomem.agent import Delta, TurnStarted

    delivery = Delivery(
        web_client(BOT_TOKEN, fake.base_url), tmp_path, streams_in=lambda _: True,
        stream_every_s=0.0,
    )  # fmt: skip
    await delivery.send(OutboundMessage("slack", DM, TurnStarted(), "in-1"))
    huge = "**bold** _it_ <x> & [a link](https://example.com) and words\n" * 5000
    started = time.monotonic()
    for n in range(5):
        await delivery.send(OutboundMessage("slack", DM, Delta("", huge[n:], 0), "in-1"))
    took = time.monotonic() - started
    assert fake.messages_in(DM) and took < 1.0, took

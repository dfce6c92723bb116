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
from tests.fakes.slack_server import BOT_TOKEN, BOT_USER, FakeSlack
from tests.helpers import until
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
        stream_every_s=0.0, first_show_s=0.0,
    )  # fmt: skip
    await delivery.send(OutboundMessage("slack", DM, TurnStarted(), "in-1"))
    huge = "**bold** _it_ <x> & [a link](https://example.com) and words\n" * 5000
    started = time.monotonic()
    for n in range(5):
        await delivery.send(OutboundMessage("slack", DM, Delta("", huge[n:], 0), "in-1"))
    took = time.monotonic() - started
    assert fake.messages_in(DM) and took < 1.0, took


async def test_a_rate_limited_answer_over_a_grown_reply_finishes_it_without_an_inbox(
    fake: FakeSlack, tmp_path: Path
) -> None:
    """A reply that is in no inbox (seq None) grew in a message; Slack rate-limits the update
    that finishes it, and the core sends the answer again: the same message is finished, no
    second one posted."""
    from nanomem.agent import Delta, TurnStarted

    delivery = Delivery(
        web_client(BOT_TOKEN, fake.base_url), tmp_path, streams_in=lambda _: True,
        stream_every_s=0.0, first_show_s=0.0,
    )  # fmt: skip
    await delivery.send(OutboundMessage("slack", DM, TurnStarted(), "in-1"))
    await delivery.send(OutboundMessage("slack", DM, Delta("so far", "so far", 0), "in-1"))
    fake.fail("chat.update", "ratelimited", status=429, retry_after=1)
    answer = OutboundMessage("slack", DM, Text("the whole answer"), "in-1")
    with pytest.raises(DeliveryLater):
        await delivery.send(answer)
    await delivery.send(answer)  # as the core's send_in_turn does after the wait
    assert [m["text"] for m in fake.messages_in(DM)] == ["the whole answer"]


async def test_two_homes_on_one_bot_never_take_each_others_replies_for_their_own(
    fake: FakeSlack, tmp_path: Path
) -> None:
    """Two homes share a bot and a DM, each with its own inbox numbering from 1. One's stored
    reply 1 began to go out and was refused; the other posts its own reply 1; after a restart
    the first looks for its reply's messages: the other's (its metadata with another home's
    mark) is not its own, so its reply is posted."""
    from nanomem.agent import MessageBus
    from nanomem.agent.inbox import SqliteInbox

    async def delivery_of(home: str) -> Delivery:
        bus = MessageBus(inbox=SqliteInbox(tmp_path / f"{home}.sqlite3"))
        delivery = delivery_to(fake, tmp_path)
        delivery.bot_user = BOT_USER
        await delivery.load(bus)
        return delivery

    fake.fail("chat.postMessage", "internal_error", status=500)
    with pytest.raises(DeliveryLater):
        await (await delivery_of("one")).send(
            OutboundMessage("slack", DM, Text("one's"), "in-1", 1)
        )
    await (await delivery_of("two")).send(OutboundMessage("slack", DM, Text("two's"), "in-1", 1))
    await (await delivery_of("one")).send(OutboundMessage("slack", DM, Text("one's"), "in-1", 1))
    assert sorted(m["text"] for m in fake.messages_in(DM)) == ["one's", "two's"]


async def test_a_reply_sent_again_after_a_restart_finds_its_parts_past_the_first_page(
    fake: FakeSlack, tmp_path: Path
) -> None:
    """A run posted a stored reply's three parts, then died before it was marked delivered;
    the next run looks for them in the history, which Slack gives a page at a time (here one
    message a page): it finds them all, and posts none again."""
    from nanomem.agent import MessageBus
    from nanomem.agent.inbox import SqliteInbox

    async def delivery_of_a_run() -> Delivery:
        delivery = delivery_to(fake, tmp_path)
        delivery.bot_user = BOT_USER
        await delivery.load(MessageBus(inbox=SqliteInbox(tmp_path / "inbox.sqlite3")))
        return delivery

    parts = [OutboundMessage("slack", DM, Text(f"part {n}"), "in-1", 1) for n in range(3)]
    first = await delivery_of_a_run()
    for part in parts:
        await first.send(part)
    fake.page_max = 1
    again = await delivery_of_a_run()
    for part in parts:
        await again.send(part)
    assert [m["text"] for m in fake.messages_in(DM)] == ["part 0", "part 1", "part 2"]


async def test_a_reply_done_at_once_is_posted_whole_and_a_steps_words_before_a_tool_stay(
    fake: FakeSlack, tmp_path: Path
) -> None:
    """A reply whose words all came at once is one post, not a post made to grow and its
    update (nor notes in the inbox for them); words held back that way before a tool call
    are posted when the step ends, and stay."""
    from nanomem.agent import Delta, DeltaEnd, TurnStarted

    client = web_client(BOT_TOKEN, fake.base_url)
    delivery = Delivery(client, tmp_path, streams_in=lambda _: True)

    def part(reply_to: str, seq: int, *parts: Any) -> list[OutboundMessage]:
        return [OutboundMessage("slack", DM, p, reply_to, seq) for p in parts]

    for msg in part("in-1", 1, TurnStarted(), Delta("Quick ", "Quick ", 0),
                    Delta("answer.", "Quick answer.", 0), Text("Quick answer.")):  # fmt: skip
        await delivery.send(msg)
    assert [m["text"] for m in fake.messages_in(DM)] == ["Quick answer."] and not fake.updates
    for msg in part("in-2", 2, TurnStarted(), Delta("Let me look.", "Let me look.", 0),
                    DeltaEnd(0)):  # fmt: skip
        await delivery.send(msg)
    assert [m["text"] for m in fake.messages_in(DM)][-1] == "Let me look."
    # Words and then a long silence (a slow model): shown after the wait, then finished.
    for msg in part("in-3", 3, TurnStarted(), Delta("Thinking", "Thinking", 0)):
        await delivery.send(msg)
    await until(lambda: fake.messages_in(DM)[-1]["text"] == "Thinking", what="the words")
    await delivery.send(OutboundMessage("slack", DM, Text("Thinking done."), "in-3", 3))
    assert [m["text"] for m in fake.messages_in(DM)][-2:] == ["Let me look.", "Thinking done."]

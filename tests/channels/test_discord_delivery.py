"""The Discord channel's delivery (channels/discord/delivery.py) with discord.py's own HTTP
client against the loopback Discord: what a rate limit, a refusal and an interaction's token
make of a reply."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from channels.discord.client import Gateway, point_at
from channels.discord.delivery import Asked, Delivery
from nanomem.agent import DeliveryLater, Delta, OutboundMessage, Text, TurnStarted
from tests.fakes.discord_server import GENERAL, FakeDiscord
from tests.helpers import until

PERSON = "300000000000000001"


@pytest.fixture
def fake() -> Iterator[FakeDiscord]:
    with FakeDiscord() as server:
        yield server


@pytest.fixture
async def delivery(fake: FakeDiscord, tmp_path: Path) -> AsyncIterator[Delivery]:
    point_at(fake.api_base)
    client = Gateway(lambda event, data: None)
    await client.sign_in(fake.token)
    yield Delivery(
        client,
        workspace=tmp_path,
        owner=PERSON,
        stream_dms=True,
        stream_guilds=True,
        stream_every_s=0.0,
        max_file_mb=1,
        typing_delay_s=60,
    )
    await client.close()


def reply(text: str, reply_to: str = "in-1", seq: int | None = 1) -> OutboundMessage:
    return OutboundMessage("discord", GENERAL, Text(text), reply_to, seq)


async def test_a_rate_limit_longer_than_the_client_waits_is_for_the_core_to_retry(
    fake: FakeDiscord, delivery: Delivery
) -> None:
    fake.rate_limit("create", times=1, retry_after=40.0)
    with pytest.raises(DeliveryLater) as later:
        await delivery.send(reply("not now"))
    assert later.value.retry_in_s == 40.0
    await delivery.send(reply("not now"))  # the core's retry: the same nonce, one message
    assert [m["content"] for m in fake.sent(GENERAL)] == ["not now"]


async def test_a_re_sent_reply_is_the_same_message_not_a_second(
    fake: FakeDiscord, delivery: Delivery
) -> None:
    """What a crash between Discord's answer and the inbox's record of it would re-send."""
    await delivery.send(reply("once", seq=7))
    delivery._parts.clear()  # a new run remembers nothing of the first
    await delivery.send(reply("once", seq=7))
    assert [m["content"] for m in fake.sent(GENERAL)] == ["once"]


async def test_a_refused_reply_is_given_up_not_kept(fake: FakeDiscord, delivery: Delivery) -> None:
    gone = OutboundMessage("discord", "999999999999", Text("to nowhere"), "in-1", 1)
    await delivery.send(gone)  # Unknown Channel: logged, not raised, so it leaves the inbox
    assert fake.sent(GENERAL) == []


async def test_a_growing_reply_skips_an_edit_that_is_rate_limited(
    fake: FakeDiscord, delivery: Delivery
) -> None:
    delivery.accepted("in-1", Asked("", PERSON, guild=True))
    await delivery.send(OutboundMessage("discord", GENERAL, TurnStarted(), "in-1"))
    await delivery.send(OutboundMessage("discord", GENERAL, Delta("gr", "gr", 0), "in-1"))
    stream = delivery.turns.chat(GENERAL).streams["in-1"]
    await until(lambda: stream.message_id is not None, 30)  # posted: the next piece edits it
    grown = fake.sent(GENERAL)[0]
    fake.rate_limit("edit", times=1, retry_after=40.0)
    await delivery.send(OutboundMessage("discord", GENERAL, Delta("ow", "grow", 0), "in-1"))
    await until(lambda: fake.limited == 1, 30)  # that edit was refused, and is not waited for
    await delivery.send(reply("grown"))
    assert [m["content"] for m in fake.sent(GENERAL)] == ["grown"]
    assert fake.sent(GENERAL)[0]["id"] == grown["id"]  # the same message became the reply


async def test_a_rate_limited_reply_over_a_grown_message_is_not_posted_twice(
    fake: FakeDiscord, delivery: Delivery
) -> None:
    """The reply that replaces a grown message is refused for longer than the client waits:
    the core's re-send (DeliveryLater's retry, from that part on) edits the same message,
    never leaving the half-grown one beside a second, whole one."""
    delivery.accepted("in-1", Asked("", PERSON, guild=True))
    await delivery.send(OutboundMessage("discord", GENERAL, TurnStarted(), "in-1"))
    await delivery.send(OutboundMessage("discord", GENERAL, Delta("gr", "gr", 0), "in-1"))
    stream = delivery.turns.chat(GENERAL).streams["in-1"]
    await until(lambda: stream.message_id is not None, 30)
    grown = fake.sent(GENERAL)[0]
    fake.rate_limit("edit", times=1, retry_after=40.0)
    with pytest.raises(DeliveryLater):
        await delivery.send(reply("grown"))
    await delivery.send(reply("grown"))  # the core's retry
    assert [m["content"] for m in fake.sent(GENERAL)] == ["grown"]
    assert fake.sent(GENERAL)[0]["id"] == grown["id"]


async def test_a_huge_growing_reply_is_previewed_without_rendering_all_of_it(
    fake: FakeDiscord, delivery: Delivery
) -> None:
    """Each piece of a reply 300,000 characters long: its preview shows Discord's 2,000 at
    most, so only its beginning is rendered, on the event loop, in milliseconds, however
    much the model has written (rendering all of it took over a second, with every piece)."""
    delivery.accepted("in-1", Asked("", PERSON, guild=True))
    await delivery.send(OutboundMessage("discord", GENERAL, TurnStarted(), "in-1"))
    huge = "**bold** _it_ <x> & [a link](https://example.com) and words\n" * 5000
    started = time.monotonic()
    for n in range(5):
        await delivery.send(OutboundMessage("discord", GENERAL, Delta("", huge[n:], 0), "in-1"))
    took = time.monotonic() - started
    await until(lambda: fake.sent(GENERAL), 30)
    assert len(fake.sent(GENERAL)[0]["content"]) <= 2000
    assert took < 1.0, took


async def test_a_slash_commands_answer_replaces_its_thinking_then_follows_up(
    fake: FakeDiscord, delivery: Delivery
) -> None:
    iid = fake.slash(GENERAL, PERSON, "help")
    token = fake.token_of(iid)
    await delivery.client.call(
        "POST", "/interactions/{i}/{t}/callback", {"type": 5}, i=iid, t=token
    )
    delivery.accepted("in-2", Asked("", PERSON, True, token, at=time.monotonic()))
    await delivery.send(reply("first part", "in-2"))
    await delivery.send(reply("second part", "in-2"))
    sent = fake.sent(GENERAL)
    assert [m["content"] for m in sent] == ["first part", "second part"]
    assert all(m["webhook"] for m in sent)

"""Replies that grow while the model writes them: the real Telegram channel against the loopback
Bot API, fed by the bus exactly as the core publishes (the turn's start, stream pieces, the
reply, the turn's end)."""

from __future__ import annotations

import asyncio
import itertools
import re
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from channels.telegram.channel import TelegramChannel
from channels.telegram.drafts import GROWN, preview
from channels.telegram.format import render_chunks
from nanomem.agent.bus import InboundMessage, MessageBus
from nanomem.agent.channel import pump_outbound
from nanomem.agent.commands import STOPPED
from nanomem.agent.outbound import Delta, OutboundMessage, Text, TurnEnded, TurnStarted
from nanomem.config import TelegramSettings
from tests.fakes.telegram_server import FakeTelegram
from tests.helpers import until

OWNER, FRIEND, GROUP = 42, 43, -100123
LONG = "\n\n".join(
    f"## Part {n}\n\nSome **bold** words, `code` and a [link](https://example.com) " + "more " * 60
    for n in range(16)
)  # two messages when finished


@pytest.fixture
def fake() -> Iterator[FakeTelegram]:
    with FakeTelegram() as server:
        yield server


class Live:
    """A running channel with its outbox pumped, as the gateway runs it."""

    def __init__(self, channel: TelegramChannel, bus: MessageBus, fake: FakeTelegram) -> None:
        self.channel, self.bus, self.fake = channel, bus, fake

    async def ask(
        self, chat_id: int, text: str, command: str = "", **sender: Any
    ) -> InboundMessage:
        self.fake.send_text(chat_id, text, **sender)
        msg = await asyncio.wait_for(self.bus.next_inbound(), 10)
        await self.bus.publish_outbound(OutboundMessage.answering(msg, TurnStarted(command)))
        return msg

    async def stream(self, msg: InboundMessage, text: str, pause: float = 0.01) -> None:
        """The model writes `text` a few words at a time; the core publishes each piece."""
        so_far = ""
        for piece in re.findall(r".{1,40}", text, re.DOTALL):
            so_far += piece
            stream = OutboundMessage.answering(msg, Delta(piece, so_far, 0))
            await self.bus.publish_outbound(stream)
            await asyncio.sleep(pause)

    async def reply(self, msg: InboundMessage, text: str | Text) -> None:
        part = text if isinstance(text, Text) else Text(text)
        await self.bus.publish_outbound(OutboundMessage.answering(msg, part))
        await self.ended(msg)

    async def ended(self, msg: InboundMessage, *, stopped: bool = False) -> None:
        await self.bus.publish_outbound(OutboundMessage.answering(msg, TurnEnded(stopped)))


@asynccontextmanager
async def live(
    fake: FakeTelegram, tmp_path: Path, bus: MessageBus | None = None, **values: Any
) -> AsyncIterator[Live]:
    base = {"enabled": True, "token": fake.token, "allow_from": [OWNER, FRIEND]}
    base |= {"base_url": fake.base_url, "base_file_url": fake.base_file_url}
    settings = TelegramSettings.model_validate(base | values)
    channel = TelegramChannel(
        settings,
        workspace=tmp_path,
        commands=[],
        poll_timeout_s=1,
        typing_every_s=0.2,
        watch_every_s=0.1,
        stream_every_s=0.2,
    )
    bus = bus or MessageBus()
    await channel.start(bus)
    pump = asyncio.create_task(pump_outbound(channel, bus))
    try:
        yield Live(channel, bus, fake)
    finally:
        pump.cancel()
        await asyncio.gather(pump, return_exceptions=True)
        await channel.stop()


def html_of(messages: list[dict[str, Any]]) -> list[str]:
    return [m.get("html") or m["text"] for m in messages]


def growing(texts: list[str]) -> bool:
    """Each text is longer than the one before (Markdown may still change what came before:
    a link shows as its text once it is complete)."""
    return all(len(b) > len(a) for a, b in itertools.pairwise(texts))


async def test_a_long_reply_grows_as_a_draft_and_arrives_whole(
    fake: FakeTelegram, tmp_path: Path
) -> None:
    async with live(fake, tmp_path) as chat:
        msg = await chat.ask(OWNER, "tell me a lot")
        await chat.stream(msg, LONG)
        await chat.reply(msg, LONG)
        final = render_chunks(LONG)
        sent = await fake.wait_for_messages_async(OWNER, len(final))
    drafts = fake.drafts(OWNER)
    assert len(drafts) >= 4 and len({d["draft_id"] for d in drafts}) == 1
    first_part = [d["text"] for d in drafts if d["text"].startswith("Part 0")]
    assert len(first_part) >= 3 and growing(first_part)
    assert all(d["html"] for d in drafts)  # rendered Markdown, accepted by Telegram
    assert html_of(sent) == final  # properly formatted, split as always, nothing twice
    assert fake.edits(OWNER) == [] and fake.deleted_messages(OWNER) == []


async def test_a_draft_is_renewed_before_telegram_lets_it_expire(
    fake: FakeTelegram, tmp_path: Path
) -> None:
    # Drafts live 2 s here (30 s at Telegram), renewed after 0.5 s (20 s). The reply streams
    # for longer than a lifetime, then pauses longer than one (a slow tool, say), then goes on.
    fake.set_draft_lifetime(2.0)
    blank: list[float] = []  # moments the chat showed no draft, once the first one came
    async with live(fake, tmp_path) as chat:
        chat.channel.delivery.streamer.renew_s = 0.5
        msg = await chat.ask(OWNER, "tell me a lot, slowly")
        done = asyncio.Event()

        async def watch() -> None:
            await until(lambda: fake.drafts(OWNER))
            while not done.is_set():
                if fake.visible_draft(OWNER) is None:
                    blank.append(asyncio.get_running_loop().time())
                await asyncio.sleep(0.05)

        watcher = asyncio.create_task(watch())
        half = len(LONG) // 2
        await chat.stream(msg, LONG[:half], pause=0.035)  # about 2.4 s: longer than a life
        await asyncio.sleep(2.5)  # the pause longer than a draft's life (the behaviour tested)
        so_far = LONG[:half]
        for piece in re.findall(r".{1,40}", LONG[half:], re.DOTALL):
            so_far += piece
            stream = OutboundMessage.answering(msg, Delta(piece, so_far, 0))
            await chat.bus.publish_outbound(stream)
            await asyncio.sleep(0.02)
        done.set()
        await watcher
        await chat.reply(msg, LONG)
        final = render_chunks(LONG)
        sent = await fake.wait_for_messages_async(OWNER, len(final))
    assert blank == []
    assert len({d["draft_id"] for d in fake.drafts(OWNER)}) >= 3  # renewed as new drafts
    assert html_of(sent) == final


async def test_without_drafts_one_message_is_edited_and_becomes_the_reply_despite_429s(
    fake: FakeTelegram, tmp_path: Path
) -> None:
    fake.set_drafts_known(False)
    async with live(fake, tmp_path) as chat:
        msg = await chat.ask(OWNER, "tell me a lot")
        half = len(LONG) // 2
        await chat.stream(msg, LONG[:half])
        fake.fail_next("editMessageText", retry_after=1, chat_id=OWNER)  # while it grows
        await chat.stream(msg, LONG)
        await until(lambda: fake.edits(OWNER))
        fake.fail_next("editMessageText", retry_after=1, chat_id=OWNER)  # the final edit
        await chat.reply(msg, LONG)
        final = render_chunks(LONG)
        sent = await fake.wait_for_messages_async(OWNER, len(final))
    assert [method for method, _ in fake.calls].count("sendmessagedraft") == 1  # remembered
    edits = fake.edits(OWNER)
    assert len(edits) >= 3 and {e["message_id"] for e in edits} == {sent[0]["message_id"]}
    assert html_of(sent) == final and fake.deleted_messages(OWNER) == []
    assert edits[-1]["html"] == final[0]  # the grown message became the first part


async def test_a_grown_message_that_cannot_be_edited_is_replaced_not_duplicated(
    fake: FakeTelegram, tmp_path: Path
) -> None:
    fake.set_drafts_known(False)
    async with live(fake, tmp_path) as chat:
        msg = await chat.ask(OWNER, "hi")
        await chat.stream(msg, "A short answer, **written** slowly.")
        await until(lambda: fake.sent_messages(OWNER))
        refusal = "Bad Request: message can't be edited"
        fake.fail_next("editMessageText", error_code=400, description=refusal, times=10)
        await chat.reply(msg, "A short answer, **written** slowly.")
        await until(lambda: fake.deleted_messages(OWNER))
        (sent,) = await fake.wait_for_messages_async(OWNER, 1)
    assert sent["html"] == "A short answer, <b>written</b> slowly."


async def test_groups_get_the_final_reply_only_unless_stream_groups(
    fake: FakeTelegram, tmp_path: Path
) -> None:
    ask = {"chat_type": "supergroup", "user_id": OWNER}
    text = LONG[:2000]
    (final,) = render_chunks(text)
    for group, stream_groups in ((GROUP, False), (GROUP - 1, True)):
        async with live(fake, tmp_path, stream_groups=stream_groups) as chat:
            msg = await chat.ask(group, "@nanomem_test_bot tell me", **ask)  # type: ignore[arg-type]
            await chat.stream(msg, text)
            await chat.reply(msg, text)
            await until(lambda g=group: [m for m in fake.sent_messages(g) if m["html"] == final])
        (sent,) = fake.sent_messages(group)
        assert fake.drafts(group) == []  # drafts exist in private chats only
        assert sent["reply_to_message"]["text"].endswith("tell me")  # the question is quoted
        assert bool(fake.edits(group)) is stream_groups


async def test_a_stored_reply_finishes_the_message_a_killed_run_began_to_grow_it_in(
    fake: FakeTelegram, tmp_path: Path
) -> None:
    """A group's reply had begun to grow in a message when the run died; the next run's
    stored reply edits that message into the whole reply instead of posting a second."""
    from nanomem.agent.inbox import SqliteInbox

    ask = {"chat_type": "supergroup", "user_id": OWNER}
    inbox = tmp_path / "inbox.sqlite3"
    run = {"stream_groups": True}
    async with live(fake, tmp_path, MessageBus(inbox=SqliteInbox(inbox)), **run) as chat:
        msg = await chat.ask(GROUP, "@nanomem_test_bot tell me", **ask)  # type: ignore[arg-type]
        await chat.stream(msg, "The first words")
        kept = chat.bus.inbox
        await until(lambda: kept is not None and kept.position(GROWN), what="its message kept")
    # Stopped without its reply: as killed. The next run answers what is left in the inbox.
    async with live(fake, tmp_path, MessageBus(inbox=SqliteInbox(inbox)), **run) as chat:
        again = await asyncio.wait_for(chat.bus.next_inbound(), 10)
        assert again.seq == msg.seq
        await chat.bus.publish_outbound(OutboundMessage.answering(again, TurnStarted()))
        await chat.reply(again, "The first words, and the rest.")
        await until(lambda: "and the rest" in fake.sent_messages(GROUP)[-1]["text"])
    assert [m["text"] for m in fake.sent_messages(GROUP)] == ["The first words, and the rest."]


async def test_stream_false_sends_only_the_final_reply(fake: FakeTelegram, tmp_path: Path) -> None:
    async with live(fake, tmp_path, stream=False) as chat:
        msg = await chat.ask(OWNER, "hi")
        await chat.stream(msg, LONG[:1500])
        await chat.reply(msg, LONG[:1500])
        (sent,) = await fake.wait_for_messages_async(OWNER, 1)
    assert fake.drafts() == [] and fake.edits() == []
    assert sent["html"] == render_chunks(LONG[:1500])[0]


async def test_a_flood_limit_on_one_chats_stream_never_delays_another_chats_reply(
    fake: FakeTelegram, tmp_path: Path
) -> None:
    fake.fail_next("sendMessageDraft", retry_after=2, chat_id=OWNER)
    async with live(fake, tmp_path) as chat:
        mine = await chat.ask(OWNER, "hi")
        theirs = await chat.ask(FRIEND, "hi too")
        await chat.stream(mine, "my answer grows")
        await until(
            lambda: [
                c for c, p in fake.calls if p.get("chat_id") == OWNER and c == "sendmessagedraft"
            ]
        )
        await chat.reply(mine, "my answer grows")
        await chat.stream(theirs, "their answer")
        await until(lambda: fake.drafts(FRIEND))
        await chat.reply(theirs, "their answer")
        await fake.wait_for_messages_async(FRIEND, 1)
        assert fake.sent_messages(OWNER) == []  # still waiting out its own flood limit
        (mine_sent,) = await fake.wait_for_messages_async(OWNER, 1)
    assert mine_sent["text"] == "my answer grows"
    assert fake.drafts(FRIEND) and fake.sent_messages(FRIEND)[0]["text"] == "their answer"


async def test_what_was_shown_of_a_stopped_reply_stays_in_the_chat(
    fake: FakeTelegram, tmp_path: Path
) -> None:
    async with live(fake, tmp_path) as chat:
        msg = await chat.ask(OWNER, "tell me")
        stop = await chat.ask(OWNER, "/stop", command="stop")
        await chat.stream(msg, "The first **words**")
        await until(lambda: fake.drafts(OWNER))
        await chat.ended(msg, stopped=True)  # the core tells the cut turn's end first
        await chat.reply(stop, Text(STOPPED, "command", command="stop"))
        kept, stopped = await fake.wait_for_messages_async(OWNER, 2)
    assert kept["html"] == "The first <b>words</b>" and stopped["text"] == STOPPED


def test_preview_shows_the_newest_part_rendered_and_balanced() -> None:
    assert preview("Some **bold", html=True) == "Some **bold"  # not bold until it closes
    assert preview("```py\nx = 1", html=True) == '<pre><code class="language-py">x = 1</code></pre>'
    assert preview("  \n", html=True) == ""
    newest = preview(LONG, html=True)
    assert newest == render_chunks(LONG)[-1]
    assert preview("a < b & c", html=False) == "a < b & c"


async def test_a_reply_telegram_rate_limits_again_and_again_is_delivered_within_the_run_once(
    fake: FakeTelegram, tmp_path: Path
) -> None:
    """Six flood waits in a row (the core's DeliveryLater with retry_in_s each time; Telegram
    once gave up after six tries, until the next start): the reply arrives within the run,
    every part once, in order, while another chat's reply goes at once."""
    async with live(fake, tmp_path, stream=False) as chat:
        mine = await chat.ask(OWNER, "tell me a lot")
        theirs = await chat.ask(FRIEND, "and me")
        final = render_chunks(LONG)
        fake.fail_next("sendMessage", retry_after=1, times=6, chat_id=OWNER)
        await chat.reply(mine, LONG)
        await chat.reply(theirs, "at once")
        (other,) = await fake.wait_for_messages_async(FRIEND, 1)
        sent = await fake.wait_for_messages_async(OWNER, len(final), timeout=30)
    assert other["text"] == "at once" and len(fake.sent_messages(OWNER)) == len(final)
    assert html_of(sent) == final  # nothing twice, nothing lost, in order


def test_a_huge_reply_is_previewed_from_its_end_without_rendering_all_of_it() -> None:
    """Each refresh of a reply 300,000 characters long renders only its end (a message shows
    4,096 at most), on the event loop, in milliseconds; it shows what it showed before."""
    import time

    huge = "**bold** _it_ <x> & [a link](https://example.com) and words\n" * 5000 + "the end"
    started = time.monotonic()
    for n in range(5):
        shown = preview(huge[n:], html=True)
    took = time.monotonic() - started
    assert took < 0.5, took
    assert shown.endswith("and words\nthe end") and "<b>bold</b>" in shown
    code = "Here:\n```py\n" + "x = 1  # a < b\n" * 2000  # cut inside the code block
    in_code = preview(code, html=True)  # as code still, as all of it rendered shows it
    assert in_code.startswith("<pre>") and in_code.endswith("# a &lt; b</pre>"), in_code[-60:]
    assert in_code == preview(code[len(code) // 2 :].replace("x = 1", "```py\nx = 1", 1), html=True)

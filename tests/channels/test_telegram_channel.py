"""The Telegram channel in-process: real python-telegram-bot against the loopback Bot API."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from channels.telegram.channel import GREETING, OFFSET, REFUSED_PRESS, TelegramChannel
from channels.telegram.delivery import TOKEN_REJECTED
from nanomem.agent.bus import InboundMessage, MessageBus
from nanomem.agent.channel import ChannelDown, pump_outbound
from nanomem.agent.inbox import SqliteInbox
from nanomem.agent.intake_kit import TOO_BIG
from nanomem.agent.outbound import Button, OutboundMessage, Text, TurnStarted
from nanomem.config import ConfigError
from tests.conftest import log_lines
from tests.fakes.proxy_server import FakeProxy
from tests.fakes.telegram_server import FakeTelegram
from tests.helpers import until
from tests.helpers.telegram import (
    FRIEND,
    GROUP,
    OWNER,
    STRANGER,
    make_channel,
)


@pytest.fixture
def fake() -> Iterator[FakeTelegram]:
    with FakeTelegram() as server:
        yield server


class Running:
    """The channel with a stand-in for the core: it runs each message's preparation (as the
    core does before a turn) and delivers what the channel answers itself."""

    def __init__(self, channel: TelegramChannel, bus: MessageBus) -> None:
        self.channel, self.bus = channel, bus
        self.ready: asyncio.Queue[InboundMessage] = asyncio.Queue()
        self._tasks = [
            asyncio.create_task(self._take()),
            asyncio.create_task(pump_outbound(channel, bus)),
        ]

    async def _take(self) -> None:
        while True:
            await self.ready.put(await self.bus.next_inbound())

    async def next(self, timeout: float = 5) -> InboundMessage:
        return await asyncio.wait_for(self.ready.get(), timeout)

    async def nothing(self, wait: float = 0.5) -> None:
        await asyncio.sleep(wait)
        assert self.bus.inbound_depth == 0 and self.ready.empty()

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.channel.stop()


@pytest.fixture
async def running(fake: FakeTelegram, tmp_path: Path) -> AsyncIterator[Running]:
    bus = MessageBus()
    channel = make_channel(fake, tmp_path)
    await channel.start(bus)
    serving = Running(channel, bus)
    try:
        yield serving
    finally:
        await serving.close()


@pytest.fixture
def logged() -> Iterator[list[str]]:
    with log_lines() as lines:
        yield lines


async def test_a_private_message_reaches_the_bus_and_the_answer_comes_back(
    running: Running, fake: FakeTelegram
) -> None:
    fake.send_text(OWNER, "hello")
    msg = await running.next()
    assert (msg.channel, msg.chat_id, msg.content, msg.sender.id) == (
        "telegram",
        "42",
        "hello",
        "42",
    )
    # not a shared room; a person is there to be asked (a shell command, say)
    assert msg.sender.can_answer and msg.sender.is_owner and not msg.sender.shared_room
    assert not msg.pressed
    await running.channel.send(OutboundMessage.answering(msg, TurnStarted()))  # the core's
    await until(lambda: fake.chat_actions(OWNER) == [{"chat_id": OWNER, "action": "typing"}])
    await running.channel.send(OutboundMessage.answering(msg, Text("**hi** there")))
    (reply,) = await fake.wait_for_messages_async(OWNER, 1)
    assert reply["html"] == "<b>hi</b> there" and "reply_to_message" not in reply


async def test_commands_are_registered_with_underscores(
    running: Running, fake: FakeTelegram
) -> None:
    assert [c["command"] for c in fake.commands or []] == [
        "start",
        "help",
        "new",
        "stop",
        "dream_restore",
    ]


async def test_command_replies_name_commands_as_the_menu_does(
    running: Running, fake: FakeTelegram
) -> None:
    fake.send_text(OWNER, "/dream_restore")
    asked = await running.next()
    listing = "Memory versions, newest first:\n\n/dream-restore <id> undoes one."
    await running.channel.send(
        OutboundMessage.answering(asked, Text(listing, "command", command="dream-restore"))
    )
    (reply,) = await fake.wait_for_messages_async(OWNER, 1)
    assert reply["text"].endswith("/dream_restore <id> undoes one.")
    fake.send_text(OWNER, "what is /dream-restore?")
    question = await running.next()
    await running.channel.send(OutboundMessage.answering(question, Text("It is /dream-restore.")))
    _, model_reply = await fake.wait_for_messages_async(OWNER, 2)
    assert model_reply["text"] == "It is /dream-restore."  # the model's words stay as written


async def test_strangers_are_refused_silently_and_logged_once(
    running: Running, fake: FakeTelegram, logged: list[str]
) -> None:
    for text in ("/start", "hello?", "/help"):
        fake.send_text(STRANGER, text, username="mallory")
    fake.send_text(OWNER, "me")
    assert (await running.next()).content == "me"
    await running.nothing(0.3)
    assert fake.sent_messages(STRANGER) == [] and fake.chat_actions(STRANGER) == []
    refusals = [line for line in logged if "refused Telegram user" in line]
    assert refusals == ["refused Telegram user 666 (@mallory); add it to telegram.allow_from"]
    reactions = [method for method, _ in fake.calls if method == "setmessagereaction"]
    assert reactions == []


async def test_start_is_answered_by_the_channel(running: Running, fake: FakeTelegram) -> None:
    fake.send_text(OWNER, "/start", first_name="Ada")
    (greeting,) = await fake.wait_for_messages_async(OWNER, 1)
    assert greeting["text"] == GREETING.format(name="Ada")
    await running.nothing(0.2)


@pytest.mark.parametrize("text", ["/dream_restore 3f2a", "/dream-restore 3f2a", "/new"])
async def test_commands_reach_the_core_unchanged(
    running: Running, fake: FakeTelegram, text: str
) -> None:
    fake.send_text(OWNER, text)
    assert (await running.next()).content == text


async def test_group_messages_need_a_mention_a_reply_or_a_command(
    running: Running, fake: FakeTelegram
) -> None:
    group = {"chat_type": "supergroup", "user_id": FRIEND, "first_name": "Bea"}
    fake.send_text(GROUP, "chatting among ourselves", **group)  # type: ignore[arg-type]
    fake.send_text(GROUP, "/help@some_other_bot", **group)  # type: ignore[arg-type]
    fake.send_text(GROUP, "/weather", **group)  # type: ignore[arg-type]
    fake.send_text(GROUP, "@nanomem_test_bot what time is it?", username="bea", **group)  # type: ignore[arg-type]
    mentioned = await running.next()
    assert mentioned.content == "what time is it?"
    assert mentioned.chat_id == str(GROUP) and mentioned.sender.id == str(FRIEND)
    assert mentioned.sender.name == "Bea (@bea)" and mentioned.sender.shared_room
    fake.send_text(GROUP, "and tomorrow?", reply_to_bot=True, **group)  # type: ignore[arg-type]
    assert (await running.next()).content == "and tomorrow?"
    fake.send_text(GROUP, "/new", **group)  # type: ignore[arg-type]
    assert (await running.next()).content == "/new"
    fake.send_text(GROUP, "/help@nanomem_test_bot", **group)  # type: ignore[arg-type]
    assert (await running.next()).content == "/help@nanomem_test_bot"
    await running.nothing(0.3)


async def test_open_groups_hear_everything(fake: FakeTelegram, tmp_path: Path) -> None:
    bus = MessageBus()
    channel = make_channel(fake, tmp_path, group_policy="open")
    await channel.start(bus)
    try:
        fake.send_text(GROUP, "no mention", chat_type="group", user_id=OWNER)
        msg = await asyncio.wait_for(bus.next_inbound(), 5)
        assert msg.content == "no mention" and msg.sender.name == "Alice (@alice)"
    finally:
        await channel.stop()


async def test_a_group_member_not_allowed_is_refused(running: Running, fake: FakeTelegram) -> None:
    fake.send_text(GROUP, "@nanomem_test_bot hi", chat_type="supergroup", user_id=STRANGER)
    fake.send_text(GROUP, "@nanomem_test_bot me too", chat_type="supergroup", user_id=OWNER)
    assert (await running.next()).content == "me too"  # control: the same group, allowed
    await running.nothing()


async def test_forum_topics_are_separate_sessions_and_replies_stay_in_the_topic(
    running: Running, fake: FakeTelegram
) -> None:
    question = fake.send_text(
        GROUP, "@nanomem_test_bot hi", chat_type="supergroup", user_id=OWNER, message_thread_id=7
    )["message"]
    msg = await running.next()
    assert msg.chat_id == f"{GROUP}:7" and msg.session_key == f"telegram:{GROUP}:7"
    typing = {"chat_id": GROUP, "action": "typing", "message_thread_id": 7}
    await running.channel.send(OutboundMessage.answering(msg, TurnStarted()))  # the core's
    await until(lambda: typing in fake.chat_actions())
    await running.channel.send(OutboundMessage.answering(msg, Text("in the topic")))
    (reply,) = await fake.wait_for_messages_async(GROUP, 1)
    assert reply["message_thread_id"] == 7
    assert reply["reply_to_message"]["message_id"] == question["message_id"]


async def test_media_is_saved_in_the_workspace(
    running: Running, fake: FakeTelegram, tmp_path: Path
) -> None:
    fake.send_photo(OWNER, b"jpeg-bytes", caption="what is this?")
    photo = await running.next()
    assert photo.content == "[photo]\nwhat is this?"
    (path,) = photo.media
    assert path.startswith("media/") and path.endswith(".jpg")
    assert (tmp_path / path).read_bytes() == b"jpeg-bytes"
    fake.send_document(OWNER, b"%PDF", file_name="Report 2026.PDF", mime_type="application/pdf")
    document = await running.next()
    assert document.content == "[document: Report 2026.PDF]"
    assert document.media[0].endswith(".pdf") and (tmp_path / document.media[0]).exists()
    fake.send_voice(OWNER, b"ogg")
    voice = await running.next()
    assert voice.content == "[voice note]" and voice.media[0].endswith(".oga")


async def test_files_over_the_limit_get_a_clear_reply(fake: FakeTelegram, tmp_path: Path) -> None:
    bus = MessageBus()
    channel = make_channel(fake, tmp_path, max_file_mb=1)
    await channel.start(bus)
    serving = Running(channel, bus)
    try:
        fake.send_document(OWNER, b"x" * (3 * 2**19), file_name="big.bin")
        (notice,) = await fake.wait_for_messages_async(OWNER, 1)
        assert notice["text"] == TOO_BIG.format(size=1.5, limit=1, setting="telegram.max_file_mb")
        assert bus.inbound_depth == 0 and not (tmp_path / "media").exists()
    finally:
        await serving.close()


async def test_what_was_stored_comes_back_after_a_stop_and_nobody_is_asked_to_resend(
    fake: FakeTelegram, tmp_path: Path
) -> None:
    inbox = SqliteInbox(tmp_path / "inbox.sqlite3")
    bus = MessageBus(inbox=inbox)
    channel = make_channel(fake, tmp_path)
    await channel.start(bus)
    fake.send_text(OWNER, "a long question")
    fake.send_text(OWNER, "and another")
    first, second = [await asyncio.wait_for(bus.next_inbound(), 5) for _ in range(2)]
    fake.send_text(STRANGER, "let me in")  # refused: stored nowhere, yet confirmed
    await until(lambda: inbox.position(OFFSET) == str(fake.last_update_id() + 1))
    await bus.answered(first, OutboundMessage.answering(first, Text("the first answer")))
    await channel.stop()
    assert fake.sent_messages(OWNER) == []  # no "please send it again"
    assert [p.seq for p in inbox.pending("telegram")] == [first.seq, second.seq]

    again = MessageBus(inbox=inbox)
    restarted = make_channel(fake, tmp_path)
    pump = asyncio.create_task(pump_outbound(restarted, again))
    await restarted.start(again)
    try:
        replayed = await asyncio.wait_for(again.next_inbound(), 5)
        assert (replayed.id, replayed.content) == (second.id, "and another") and replayed.replayed
        (delivered,) = await fake.wait_for_messages_async(OWNER, 1)
        assert delivered["text"] == "the first answer"  # answered before the stop, sent now
        await until(lambda: [p.seq for p in inbox.pending("telegram")] == [second.seq])
        fake.send_text(OWNER, "after the restart")
        fresh = await asyncio.wait_for(again.next_inbound(), 5)
        assert fresh.content == "after the restart" and not fresh.replayed
        assert again.inbound_depth == 0  # nothing stored was handed in twice
    finally:
        pump.cancel()
        await restarted.stop()
        inbox.close()


async def test_updates_are_confirmed_only_after_they_are_stored_as_telegram_sent_them(
    fake: FakeTelegram, tmp_path: Path
) -> None:
    inbox = SqliteInbox(tmp_path / "inbox.sqlite3")
    bus = MessageBus(inbox=inbox)
    channel = make_channel(fake, tmp_path)
    await channel.start(bus)
    try:
        sent = fake.send_text(OWNER, "keep me")
        msg = await asyncio.wait_for(bus.next_inbound(), 5)
        (stored,) = inbox.pending("telegram")
        # As Telegram sent it: not python-telegram-bot's objects turned back into a dict
        # (which adds its own defaults).
        assert stored.payload == sent and stored.seq == msg.seq
        assert msg.id == InboundMessage.inbox_id(stored.seq)
    finally:
        await channel.stop()
        inbox.close()


async def test_polling_and_replies_go_through_the_configured_proxy(
    fake: FakeTelegram, tmp_path: Path
) -> None:
    with FakeProxy(fake.port) as proxy:
        bus = MessageBus()
        channel = make_channel(fake, tmp_path, proxy=proxy.url)
        await channel.start(bus)
        serving = Running(channel, bus)
        try:
            fake.send_text(OWNER, "hello")
            msg = await serving.next()
            buttons = (Button("Yes", "/yes"),)
            await channel.send(OutboundMessage.answering(msg, Text("**hi**", buttons=buttons)))
            (reply,) = await fake.wait_for_messages_async(OWNER, 1)
        finally:
            await serving.close()
    assert reply["html"] == "<b>hi</b>"
    assert FakeTelegram.button_data(reply, "Yes") == "/yes"
    lines = " ".join(proxy.request_lines)
    assert "/getUpdates" in lines and "/sendMessage" in lines


async def test_a_revoked_token_is_reported_and_polling_recovers(
    running: Running, fake: FakeTelegram
) -> None:
    fake.set_token_valid(False)
    fake.send_text(OWNER, "sent while the token is refused")
    await until(lambda: running.channel.problem() == TOKEN_REJECTED)
    fake.set_token_valid(True)
    await until(lambda: running.channel.problem() is None)
    fake.send_text(OWNER, "after recovery")
    received = [(await running.next()).content for _ in range(2)]
    assert received == ["sent while the token is refused", "after recovery"]  # none lost


async def test_start_says_why_it_cannot_run(fake: FakeTelegram, tmp_path: Path) -> None:
    fake.set_token_valid(False)
    with pytest.raises(ChannelDown, match=r"^telegram: the bot token was rejected \(check"):
        await make_channel(fake, tmp_path).start(MessageBus())
    unreachable = make_channel(fake, tmp_path, base_url="http://127.0.0.1:9/bot")
    with pytest.raises(ChannelDown, match=r"^telegram: cannot reach the Bot API"):
        await unreachable.start(MessageBus())
    with pytest.raises(ConfigError, match=r"telegram\.token is not set"):
        make_channel(fake, tmp_path, token=None)


def utf16(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


async def test_a_reply_of_3000_emoji_arrives_whole_in_parts_within_the_limit(
    running: Running, fake: FakeTelegram
) -> None:
    fake.send_text(OWNER, "emoji please")
    msg = await running.next()
    text = "😀" * 3000  # 3,000 characters, 6,000 UTF-16 units: more than one message
    await running.channel.send(OutboundMessage.answering(msg, Text(text)))
    parts = await fake.wait_for_messages_async(OWNER, 2)
    assert [utf16(p["text"]) for p in parts] == [4096, 6000 - 4096]
    assert "".join(p["text"] for p in parts) == text
    await asyncio.sleep(0.3)  # a window for a third part, which must not come
    assert len(fake.sent_messages(OWNER)) == 2


async def test_a_part_telegram_refuses_as_too_long_is_split_again_and_delivered(
    running: Running, fake: FakeTelegram, logged: list[str]
) -> None:
    fake.send_text(OWNER, "a long one")
    msg = await running.next()
    text = " ".join(f"word{i}" for i in range(600))  # about 4,300 units: two parts
    fake.fail_next(
        "sendMessage", error_code=400, description="Bad Request: message is too long", times=1
    )
    await running.channel.send(OutboundMessage.answering(msg, Text(text)))
    await fake.wait_for_messages_async(OWNER, 3)  # two parts, the refused one in pieces

    def words() -> list[str]:
        return " ".join(p["text"] for p in fake.sent_messages(OWNER)).split()

    await until(lambda: len(words()) >= 600)
    assert words() == text.split()
    parts = fake.sent_messages(OWNER)
    assert all(utf16(p["text"]) <= 2048 for p in parts[:-1])  # the refused part, halved
    assert any("too long" in line for line in logged)


async def test_buttons_are_shown_and_a_press_arrives_as_the_presser_s_command(
    running: Running, fake: FakeTelegram
) -> None:
    fake.send_text(OWNER, "hello")
    asked = await running.next()
    choices = (Button("Approve", "/dream-approve 3f2a"), Button("Reject", "/dream-reject 3f2a"))
    await running.channel.send(
        OutboundMessage.answering(asked, Text("Keep this?", buttons=choices))
    )
    shown = fake.sent_messages(OWNER)[-1]
    rows = shown["reply_markup"]["inline_keyboard"]
    assert [(b["text"], b["callback_data"]) for b in rows[0]] == [
        ("Approve", "/dream-approve 3f2a"),
        ("Reject", "/dream-reject 3f2a"),
    ]

    query = fake.press(shown, "/dream-approve 3f2a")
    press = await running.next()
    assert (press.chat_id, press.sender.id, press.content) == ("42", "42", "/dream-approve 3f2a")
    assert press.pressed is True
    await until(lambda: any(a["callback_query_id"] == query for a in fake.press_answers()))
    await until(lambda: fake.markup_edits(OWNER))
    assert "reply_markup" not in fake.sent_messages(OWNER)[-1]  # pressed once, then gone


async def test_only_the_owner_s_messages_are_marked_as_the_owner_s(
    running: Running, fake: FakeTelegram
) -> None:
    # Approving a shell command or a memory change is the owner's alone (telegram.owner_id).
    fake.send_text(OWNER, "hello")
    mine = await running.next()
    fake.send_text(FRIEND, "hello")
    theirs = await running.next()
    assert mine.sender.is_owner is True
    assert theirs.sender.is_owner is not True


async def test_in_a_group_another_member_s_press_leaves_the_buttons_to_the_asker(
    running: Running, fake: FakeTelegram
) -> None:
    # Only the asker's answer counts (the core refuses the rest); removing the buttons at
    # anyone's press let any member take the owner's choice away.
    fake.send_text(GROUP, "@nanomem_test_bot hello", chat_type="supergroup", user_id=OWNER)
    asked = await running.next()
    choices = (Button("Allow once", "/shell-allow 1"), Button("Deny", "/shell-deny 1"))
    await running.channel.send(OutboundMessage.answering(asked, Text("Run `ls`?", buttons=choices)))
    shown = fake.sent_messages(GROUP)[-1]
    fake.press(shown, "/shell-deny 1", user_id=FRIEND)
    press = await running.next()
    assert press.sender.id == str(FRIEND) and press.pressed is True
    await running.nothing()
    assert not fake.markup_edits(GROUP)


async def test_a_stranger_s_press_is_refused_in_the_answer_and_does_nothing(
    running: Running, fake: FakeTelegram
) -> None:
    # In a group the owner is admitted by their own id; another member is a stranger.
    fake.send_text(GROUP, "@nanomem_test_bot hello", chat_type="supergroup", user_id=OWNER)
    asked = await running.next()
    choices = (Button("Allow once", "/shell-allow 1"),)
    await running.channel.send(OutboundMessage.answering(asked, Text("Run `ls`?", buttons=choices)))
    shown = fake.sent_messages(GROUP)[-1]
    query = fake.press(shown, "/shell-allow 1", user_id=STRANGER)
    answer = await until(
        lambda: next((a for a in fake.press_answers() if a["callback_query_id"] == query), None)
    )
    assert answer["text"] == REFUSED_PRESS
    await running.nothing()
    assert "reply_markup" in fake.sent_messages(GROUP)[-1]


def test_a_schedule_is_admitted_as_its_makers_message_there_would_be(
    fake: FakeTelegram, tmp_path: Path
) -> None:
    channel = make_channel(fake, tmp_path, allow_from=[OWNER, -500])
    assert channel.admits(str(OWNER), str(OWNER))  # a private chat
    assert not channel.admits(str(FRIEND), str(FRIEND))  # taken off allow_from
    assert channel.admits("-600", str(OWNER))  # a group: the person is allowed
    assert channel.admits("-600:12", str(OWNER))  # a topic of it
    assert not channel.admits("-600:12", str(FRIEND))
    assert channel.admits("-500:3", str(FRIEND))  # the group itself is allowed
    # No recorded maker (made before makers were): the chat decides.
    assert channel.admits(str(OWNER), "") and not channel.admits(str(FRIEND), "")
    assert channel.admits("-500", "") and not channel.admits("-600", "")
    everyone = make_channel(fake, tmp_path, allow_from=["*"])
    assert everyone.admits("-600:12", str(FRIEND)) and everyone.admits(str(FRIEND), "")

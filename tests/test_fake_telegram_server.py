"""Tests for the loopback fake Telegram Bot API, driven by the real python-telegram-bot."""

from __future__ import annotations

import asyncio
import datetime as dtm
import json
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from telegram import Bot, BotCommand, Update
from telegram.error import BadRequest, EndPointNotFound, InvalidToken, RetryAfter
from telegram.ext import (
    Application,
    ApplicationBuilder,
    CommandHandler,
    ContextTypes,
    MessageHandler,
    filters,
)

from tests.fakes.telegram_server import FakeTelegram, html_error
from tests.helpers import until

CHAT = 42
NEVER_S = 3600  # a long-poll timeout no test waits out
WAIT_S = 60.0  # the safety net of every wait
GROUP = -100123


@pytest.fixture
def fake() -> Iterator[FakeTelegram]:
    with FakeTelegram() as server:
        yield server


def build_app(fake: FakeTelegram) -> Application[Any, Any, Any, Any, Any, Any]:
    return (
        ApplicationBuilder()
        .token(fake.token)
        .base_url(fake.base_url)
        .base_file_url(fake.base_file_url)
        .build()
    )


@asynccontextmanager
async def running(app: Application[Any, Any, Any, Any, Any, Any]) -> AsyncIterator[None]:
    """Run ``app`` inside the current loop, the way the product's Telegram channel does."""
    await app.initialize()
    await app.start()
    assert app.updater is not None
    await app.updater.start_polling(poll_interval=0, timeout=1)
    try:
        yield
    finally:
        # A safety net only: a shutdown that hangs (a poll the fake never answers) fails here.
        await asyncio.wait_for(app.updater.stop(), WAIT_S)
        await asyncio.wait_for(app.stop(), WAIT_S)
        await asyncio.wait_for(app.shutdown(), WAIT_S)


@pytest.fixture
async def bot(fake: FakeTelegram) -> AsyncIterator[Bot]:
    async with Bot(fake.token, base_url=fake.base_url, base_file_url=fake.base_file_url) as b:
        yield b


async def test_initialize_calls_get_me(fake: FakeTelegram) -> None:
    app = build_app(fake)
    await app.initialize()
    try:
        assert app.bot.username == "nanomem_test_bot"
        assert app.bot.id == 123456
        assert app.bot.bot.is_bot and app.bot.bot.can_join_groups
        assert fake.calls[0] == ("getme", {})
    finally:
        await app.shutdown()


async def test_handlers_receive_updates_and_replies_are_recorded(fake: FakeTelegram) -> None:
    app = build_app(fake)
    seen: list[str] = []

    async def start(update: Update, _: ContextTypes.DEFAULT_TYPE) -> None:
        assert update.message is not None
        seen.append("start")
        await update.message.reply_text("welcome")

    async def echo(update: Update, _: ContextTypes.DEFAULT_TYPE) -> None:
        assert update.message is not None and update.message.text is not None
        seen.append(update.message.text)
        await update.message.reply_text(f"echo: {update.message.text}")

    app.add_handler(CommandHandler("start", start))
    app.add_handler(MessageHandler(filters.TEXT & ~filters.COMMAND, echo))
    async with running(app):
        update = fake.send_text(CHAT, "/start")
        assert update["message"]["entities"] == [{"type": "bot_command", "offset": 0, "length": 6}]
        fake.send_text(CHAT, "hello")
        messages = await fake.wait_for_messages_async(CHAT, 2, timeout=5)
        assert [m["text"] for m in messages] == ["welcome", "echo: hello"]
        assert messages[0]["from"]["username"] == "nanomem_test_bot"
        assert messages[0]["message_id"] < messages[1]["message_id"]
        await asyncio.sleep(1.5)  # more polls: nothing may be redelivered
    assert seen == ["start", "hello"]
    assert fake.sent_messages(CHAT) == messages
    assert [p["text"] for m, p in fake.calls if m == "sendmessage"] == ["welcome", "echo: hello"]
    final = [p for m, p in fake.calls if m == "getupdates"][-1]
    assert final["timeout"] == 0  # PTB confirms the offset with a non-blocking poll on stop


async def test_offsets_deliver_each_update_once(fake: FakeTelegram, bot: Bot) -> None:
    first = fake.send_text(CHAT, "one")["update_id"]
    fake.send_text(CHAT, "two")
    got = await bot.get_updates(timeout=0)
    assert [u.message.text for u in got if u.message] == ["one", "two"]
    assert len(await bot.get_updates(timeout=0)) == 2  # unconfirmed: delivered again
    assert [u.update_id for u in await bot.get_updates(offset=first + 1, timeout=0)] == [first + 1]
    assert await bot.get_updates(offset=first + 2, timeout=0) == ()
    assert await bot.get_updates(timeout=0) == ()  # confirmed updates are gone


def test_a_raw_update_is_sent_as_given(fake: FakeTelegram) -> None:
    first = fake.send_raw({"message": {"date": 2**63, "photo": 5}})
    deep = fake.send_raw('"message": ' + '{"reply_to_message": ' * 900 + "{}" + "}" * 900)
    url = f"{fake.base_url}{fake.token}/getUpdates"
    with urllib.request.urlopen(url, timeout=WAIT_S) as answer:
        body = answer.read()
    assert body.startswith(b'{"ok": true, "result": [{"update_id": %d, ' % first)
    assert b'{"update_id": %d, "message": {"reply_to_message": ' % deep in body
    assert body.count(b"reply_to_message") == 900
    assert json.loads(body)["result"][0] == {
        "update_id": first,
        "message": {"date": 2**63, "photo": 5},
    }


async def test_long_poll_waits_and_wakes_on_update(fake: FakeTelegram, bot: Bot) -> None:
    started = time.monotonic()
    assert await bot.get_updates(timeout=1) == ()
    assert time.monotonic() - started >= 0.9  # it waited out its timeout (a lower bound)

    poll = asyncio.create_task(bot.get_updates(timeout=NEVER_S, read_timeout=NEVER_S))
    await until(lambda: fake.getupdates_count >= 2)  # the second long poll waits in the server
    fake.send_text(CHAT, "wake up")
    # The poll would last an hour: an answer within WAIT_S means the update woke it.
    updates = await asyncio.wait_for(poll, WAIT_S)
    assert updates[0].message is not None and updates[0].message.text == "wake up"


async def test_idle_polling_does_not_spin(fake: FakeTelegram) -> None:
    async with running(build_app(fake)):
        await asyncio.sleep(0.2)  # past the first polls
        before = fake.getupdates_count
        await asyncio.sleep(2)  # the idle window whose polls are counted
        assert fake.getupdates_count - before < 10


async def test_pause_updates_stalls_polling(fake: FakeTelegram, bot: Bot) -> None:
    fake.pause_updates(True)
    fake.send_text(CHAT, "stuck")
    started = time.monotonic()
    assert await bot.get_updates(timeout=1) == ()
    assert time.monotonic() - started >= 0.9
    polls = fake.getupdates_count
    poll = asyncio.create_task(bot.get_updates(timeout=NEVER_S, read_timeout=NEVER_S))
    await until(lambda: fake.getupdates_count != polls)  # the poll is waiting in the server
    fake.pause_updates(False)
    assert len(await asyncio.wait_for(poll, WAIT_S)) == 1  # woken by the unpause, not a timeout


async def test_fail_next_retry_after(
    fake: FakeTelegram, bot: Bot, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PTB_TIMEDELTA", "1")  # else .retry_after is an int plus a warning
    fake.fail_next("sendMessage", error_code=429, retry_after=1)
    with pytest.raises(RetryAfter) as info:
        await bot.send_message(CHAT, "hi")
    assert info.value.retry_after == dtm.timedelta(seconds=1)
    assert (await bot.send_message(CHAT, "hi")).text == "hi"  # consumed once
    assert len(fake.sent_messages(CHAT)) == 1


async def test_fail_next_per_chat_and_times(fake: FakeTelegram, bot: Bot) -> None:
    fake.fail_next("sendmessage", error_code=400, description="Bad Request: nope", times=2,
                   chat_id=7)  # fmt: skip
    await bot.send_message(CHAT, "other chat is unaffected")
    for _ in range(2):
        with pytest.raises(BadRequest, match=r"(?i)nope"):
            await bot.send_message(7, "x")
    await bot.send_message(7, "third works")
    assert [m["text"] for m in fake.sent_messages(7)] == ["third works"]


async def test_html_validation_and_rejection(fake: FakeTelegram, bot: Bot) -> None:
    fake.reject_html_next()
    with pytest.raises(BadRequest, match=r"(?i)can't parse entities"):
        await bot.send_message(CHAT, "<b>fine</b>", parse_mode="HTML")
    msg = await bot.send_message(CHAT, "<b>fine</b> &amp; <a href='x'>ok</a>", parse_mode="HTML")
    assert msg.text == "fine & ok"
    assert fake.sent_messages(CHAT)[0]["html"] == "<b>fine</b> &amp; <a href='x'>ok</a>"
    for bad in ("<b>open", "<div>x</div>", "a</b>", "<b><i>x</b></i>", "Q&A", "1 < 2"):
        with pytest.raises(BadRequest, match=r"(?i)can't parse entities"):
            await bot.send_message(CHAT, bad, parse_mode="HTML")
    assert await bot.send_message(CHAT, "Q&A <b>plain</b>")  # no parse_mode: anything goes
    assert html_error("<pre><code>x</code></pre><tg-spoiler>s</tg-spoiler>") is None


async def test_text_limits(fake: FakeTelegram, bot: Bot) -> None:
    with pytest.raises(BadRequest, match=r"(?i)message is too long"):
        await bot.send_message(CHAT, "x" * 5000)
    with pytest.raises(BadRequest, match=r"(?i)message is too long"):
        await bot.send_message(CHAT, "😀" * 2049)  # UTF-16 units, not code points
    assert (await bot.send_message(CHAT, "x" * 4096)).text == "x" * 4096
    with pytest.raises(BadRequest, match=r"(?i)text is empty"):
        await bot.send_message(CHAT, " ")
    # With HTML, the visible text counts: tags are free, an entity is its one character.
    for fits, html in [
        (True, "<b>" + "x" * 4096 + "</b>"),
        (True, "&amp;" * 4096),
        (False, "&amp;" * 4097),
        (True, "<i>😀</i>" * 2048),
        (False, "<i>😀</i>" * 2049),
    ]:
        if fits:
            assert await bot.send_message(CHAT, html, parse_mode="HTML")
        else:
            with pytest.raises(BadRequest, match=r"(?i)message is too long"):
                await bot.send_message(CHAT, html, parse_mode="HTML")


async def test_edit_message_text(fake: FakeTelegram, bot: Bot) -> None:
    msg = await bot.send_message(CHAT, "draft", message_thread_id=5)
    assert msg.message_thread_id == 5
    edited = await bot.edit_message_text("final", chat_id=CHAT, message_id=msg.message_id)
    assert isinstance(edited, type(msg)) and edited.text == "final"
    assert [m["text"] for m in fake.sent_messages(CHAT)] == ["final"]
    with pytest.raises(BadRequest, match=r"(?i)message is not modified"):
        await bot.edit_message_text("final", chat_id=CHAT, message_id=msg.message_id)
    with pytest.raises(BadRequest, match=r"(?i)message to edit not found"):
        await bot.edit_message_text("x", chat_id=CHAT, message_id=999)


async def test_drafts_are_recorded_and_can_be_unknown(fake: FakeTelegram, bot: Bot) -> None:
    assert await bot.send_message_draft(CHAT, 7, "<b>gro</b>", parse_mode="HTML")
    assert await bot.send_message_draft(CHAT, 7, "growing", message_thread_id=3)
    drafts = fake.drafts(CHAT)
    assert [(d["draft_id"], d["text"], d["html"]) for d in drafts] == [
        (7, "gro", "<b>gro</b>"),
        (7, "growing", None),
    ]
    assert drafts[0]["at"] <= drafts[1]["at"] and drafts[1]["message_thread_id"] == 3
    assert fake.sent_messages(CHAT) == []  # a draft is no message
    with pytest.raises(BadRequest, match=r"(?i)textdraft_peer_invalid"):
        await bot.send_message_draft(GROUP, 1, "groups have no drafts")
    with pytest.raises(BadRequest, match=r"(?i)non-zero"):
        await bot.send_message_draft(CHAT, 0, "x")
    fake.set_drafts_known(False)
    with pytest.raises(InvalidToken, match="method not found"):  # PTB reads a 404 so
        await bot.send_message_draft(CHAT, 8, "x")


async def test_edits_are_recorded_and_messages_deleted(fake: FakeTelegram, bot: Bot) -> None:
    msg = await bot.send_message(CHAT, "one")
    await bot.edit_message_text("<i>two</i>", CHAT, msg.message_id, parse_mode="HTML")
    assert [(e["text"], e["html"]) for e in fake.edits(CHAT)] == [("two", "<i>two</i>")]
    assert await bot.delete_message(CHAT, msg.message_id)
    assert fake.sent_messages(CHAT) == [] and len(fake.deleted_messages(CHAT)) == 1
    with pytest.raises(BadRequest, match=r"(?i)message to edit not found"):
        await bot.edit_message_text("three", CHAT, msg.message_id)
    with pytest.raises(BadRequest, match=r"(?i)message to delete not found"):
        await bot.delete_message(CHAT, msg.message_id)


async def test_reply_to_message_is_echoed(fake: FakeTelegram, bot: Bot) -> None:
    inbound = fake.send_text(CHAT, "question")["message"]
    reply = await bot.send_message(CHAT, "answer", reply_to_message_id=inbound["message_id"])
    assert reply.reply_to_message is not None
    assert reply.reply_to_message.text == "question"
    update = fake.send_text(CHAT, "follow-up", reply_to_bot=True)
    assert update["message"]["reply_to_message"]["text"] == "answer"
    with pytest.raises(BadRequest, match=r"(?i)replied not found"):
        await bot.send_message(CHAT, "x", reply_to_message_id=999)


async def test_invalid_token(fake: FakeTelegram) -> None:
    fake.set_token_valid(False)
    app = build_app(fake)
    with pytest.raises(InvalidToken):
        await app.initialize()
    await app.bot.shutdown()  # initialize() opened the HTTP clients before failing
    assert fake.calls[-1][0] == "getme"


async def test_unknown_method_and_raw_json(fake: FakeTelegram, bot: Bot) -> None:
    with pytest.raises(EndPointNotFound):
        await bot.do_api_request("frobnicate")
    request = urllib.request.Request(
        f"{fake.base_url}{fake.token}/SENDMESSAGE",
        data=json.dumps({"chat_id": CHAT, "text": "raw"}).encode(),
        headers={"Content-Type": "application/json"},
    )
    body = await asyncio.to_thread(lambda: json.load(urllib.request.urlopen(request, timeout=5)))
    assert body["ok"] and body["result"]["text"] == "raw"
    assert fake.calls[-1] == ("sendmessage", {"chat_id": CHAT, "text": "raw"})


async def test_document_round_trip_through_handler(fake: FakeTelegram) -> None:
    app = build_app(fake)
    payload = bytes(range(256)) * 40
    received: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()

    async def on_document(update: Update, _: ContextTypes.DEFAULT_TYPE) -> None:
        assert update.message is not None and update.message.document is not None
        assert update.message.document.file_name == "notes.bin"
        data = await (await update.message.document.get_file()).download_as_bytearray()
        received.set_result(bytes(data))

    app.add_handler(MessageHandler(filters.Document.ALL, on_document))
    async with running(app):
        fake.send_document(CHAT, payload, file_name="notes.bin", caption="see attached")
        assert await asyncio.wait_for(received, 5) == payload


async def test_photo_voice_and_uploads(fake: FakeTelegram, bot: Bot) -> None:
    photo = fake.send_photo(CHAT, b"jpeg-bytes", caption="look")["message"]
    voice = fake.send_voice(CHAT, b"ogg-bytes", duration=3)["message"]
    assert photo["caption"] == "look" and voice["voice"]["duration"] == 3
    photo_file = await bot.get_file(photo["photo"][-1]["file_id"])
    assert await photo_file.download_as_bytearray() == b"jpeg-bytes"
    voice_file = await bot.get_file(voice["voice"]["file_id"])
    assert voice_file.file_size == 9 and voice_file.file_path is not None
    assert await voice_file.download_as_bytearray() == b"ogg-bytes"
    with pytest.raises(BadRequest, match=r"(?i)invalid file_id"):
        await bot.get_file("nope")

    doc = await bot.send_document(CHAT, b"report", filename="r.txt", caption="report")
    assert doc.document is not None and doc.document.file_name == "r.txt"
    assert await (await doc.document.get_file()).download_as_bytearray() == b"report"
    png = b"\x89PNG\r\n\x1a\n" + b"rest"
    sent = await bot.send_photo(CHAT, png)
    assert sent.photo and sent.photo[-1].file_size == len(png)
    assert [bool(m.get("document")) for m in fake.sent_messages(CHAT)] == [True, False]
    # Telegram makes photos of images only.
    with pytest.raises(BadRequest, match=r"(?i)IMAGE_PROCESS_FAILED"):
        await bot.send_photo(CHAT, b"not an image")


async def test_voice_and_audio_uploads_with_html_captions(fake: FakeTelegram, bot: Bot) -> None:
    voice = await bot.send_voice(CHAT, b"OggS-voice", caption="<b>hi</b>", parse_mode="HTML")
    assert voice.voice is not None and voice.caption == "hi"
    assert await (await voice.voice.get_file()).download_as_bytearray() == b"OggS-voice"
    song = await bot.send_audio(CHAT, b"ID3-song", filename="song.mp3")
    assert song.audio is not None and song.audio.file_name == "song.mp3"
    assert fake.file_data(fake.sent_messages(CHAT)[-1]["audio"]) == b"ID3-song"
    assert fake.sent_messages(CHAT)[0]["caption_html"] == "<b>hi</b>"
    with pytest.raises(BadRequest, match=r"(?i)caption is too long"):
        await bot.send_document(CHAT, b"x", filename="x.txt", caption="y" * 1025)


async def test_an_album_is_an_update_per_part_sharing_a_media_group_id(
    fake: FakeTelegram, bot: Bot
) -> None:
    queued = fake.send_album(CHAT, [b"one", ("notes.txt", b"two")], caption="both")
    more = fake.send_album(CHAT, [b"three"], media_group_id=queued[0]["message"]["media_group_id"])
    updates = await bot.get_updates(timeout=0)
    assert [u.update_id for u in updates] == [u["update_id"] for u in queued + more]
    messages = [u.message for u in updates if u.message is not None]
    assert len({m.media_group_id for m in messages}) == 1 and messages[0].media_group_id
    assert [m.caption for m in messages] == ["both", None, None]  # on the first part only
    assert messages[1].document is not None and messages[1].document.file_name == "notes.txt"
    photo = await bot.get_file(messages[2].photo[-1].file_id)
    assert await photo.download_as_bytearray() == b"three"


async def test_commands_actions_and_reactions(fake: FakeTelegram, bot: Bot) -> None:
    assert fake.commands is None
    await bot.set_my_commands([BotCommand("start", "Start"), BotCommand("help", "Help")])
    assert fake.commands == [
        {"command": "start", "description": "Start"},
        {"command": "help", "description": "Help"},
    ]
    assert [c.command for c in await bot.get_my_commands()] == ["start", "help"]
    with pytest.raises(BadRequest, match=r"(?i)BOT_COMMAND_INVALID"):
        await bot.set_my_commands([BotCommand("new-chat", "dash is invalid")])
    await bot.send_chat_action(CHAT, "typing")
    assert fake.chat_actions(CHAT) == [{"chat_id": CHAT, "action": "typing"}]
    assert await bot.set_message_reaction(CHAT, 1, "👍")
    assert fake.calls[-1][1]["reaction"] == [{"type": "emoji", "emoji": "👍"}]
    assert await bot.delete_my_commands()
    assert fake.commands == []


async def test_group_command_with_bot_username(fake: FakeTelegram) -> None:
    app = build_app(fake)
    helped: asyncio.Future[Update] = asyncio.get_running_loop().create_future()

    async def on_help(update: Update, _: ContextTypes.DEFAULT_TYPE) -> None:
        helped.set_result(update)

    app.add_handler(CommandHandler("help", on_help))
    async with running(app):
        update = fake.send_text(GROUP, "/help@nanomem_test_bot now", chat_type="supergroup",
                                user_id=7, message_thread_id=3)  # fmt: skip
        entity = update["message"]["entities"][0]
        assert entity == {"type": "bot_command", "offset": 0, "length": 22}
        got = await asyncio.wait_for(helped, 5)
        assert got.effective_chat is not None and got.effective_chat.type == "supergroup"
        assert got.effective_user is not None and got.effective_user.id == 7
        assert got.message is not None and got.message.message_thread_id == 3
    with pytest.raises(ValueError, match="negative"):
        fake.send_text(5, "hi", chat_type="group")


async def test_stop_returns_promptly_during_long_poll() -> None:
    fake = FakeTelegram().start()
    async with Bot(fake.token, base_url=fake.base_url) as bot:
        poll = asyncio.create_task(bot.get_updates(timeout=NEVER_S, read_timeout=NEVER_S))
        await until(lambda: fake.getupdates_count > 0)
        await asyncio.sleep(0.1)  # a margin for the poll to settle into its wait in the server
        # The poll would last an hour: a stop within WAIT_S did not wait for it.
        await asyncio.wait_for(asyncio.to_thread(fake.stop), WAIT_S)
        assert await asyncio.wait_for(poll, WAIT_S) == ()
    fake.stop()  # idempotent


def _post_form(fake: FakeTelegram, method: str, **params: Any) -> Any:
    data = urllib.parse.urlencode(params).encode()
    with urllib.request.urlopen(f"{fake.base_url}{fake.token}/{method}", data, timeout=5) as r:
        return json.load(r)


def test_sync_usage_from_another_thread(fake: FakeTelegram) -> None:
    fake.send_text(CHAT, "ping")
    polled = _post_form(fake, "getUpdates", offset=0, timeout=1)
    assert polled["result"][0]["message"]["text"] == "ping"
    sender = threading.Timer(
        0.3, _post_form, (fake, "sendMessage"), {"chat_id": CHAT, "text": "pong"}
    )
    sender.start()
    assert [m["text"] for m in fake.wait_for_messages(CHAT, 1, timeout=5)] == ["pong"]
    sender.join()
    with pytest.raises(AssertionError, match=r"expected 2 bot messages .* got 1: \['pong'\]"):
        fake.wait_for_messages(CHAT, 2, timeout=0.2)

"""An internal error never loses a message: through the real `nanomem gateway` (a subprocess,
or in-process), python-telegram-bot against the loopback Bot API, the lean client (or the
scripted model) behind it.

The fault is one a real home can get into: the chat's session file is a directory (a botched
restore or sync), so loading the session raises inside our own code on every attempt. The
message must stay in the inbox, be retried with backoff and answered once the fault is gone;
while the fault lasts it is parked after `agent.max_attempts`, listed by `nanomem status`,
the owner is told once, and the owner can retry it; restarts change none of that."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from channels.telegram.channel import GREETING
from nanomem.agent.bus import MessageBus
from nanomem.agent.channel import pump_outbound
from nanomem.agent.inbox import SqliteInbox
from nanomem.agent.outbound import OutboundMessage
from nanomem.agent.retries import RETRYING
from nanomem.app import App, build_app
from nanomem.audience import Sender
from nanomem.gateway.service import Gateway
from nanomem.home import Home
from nanomem.providers.scripted import ScriptedProvider
from tests.conftest import cli_env, log_lines, run_cli_here, settings_for
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.telegram_server import FakeTelegram
from tests.helpers import WAIT_S, until, wait_until
from tests.helpers.gateway import ALLOWED, break_session, load_session, retrying_gateway
from tests.helpers.telegram import OWNER as OWNER_42
from tests.helpers.telegram import make_channel

OWNER = ALLOWED[0]  # the first user of telegram.allow_from (GatewayProcess allows 1000..1019)


def stored(home: Home, chat: int) -> list[dict[str, Any]]:
    """The chat's messages in the inbox, read as another process would."""
    with sqlite3.connect(f"file:{home.inbox}?mode=ro", uri=True) as db:
        db.row_factory = sqlite3.Row
        rows = db.execute("SELECT * FROM messages WHERE chat = ? ORDER BY seq", (str(chat),))
        return [dict(row) for row in rows]


def scripted_app(home: Home, *, retry_first_s: float, max_attempts: int) -> App:
    """The gateway's app with the scripted model, retrying failed messages quickly."""
    sections: dict[str, Any] = {
        "gateway": {"port": 0},
        "dream": {"enabled": False},
        "agent": {"retry_first_s": retry_first_s, "max_attempts": max_attempts},
    }
    return build_app(settings_for(home, **sections), home, ScriptedProvider(), durable=True)


@asynccontextmanager
async def running(app: App, fake: FakeTelegram) -> AsyncIterator[None]:
    """The real gateway in-process, its Telegram channel against `fake`."""
    gateway = Gateway(app, {"telegram": make_channel(fake, app.workspace)})
    serving = asyncio.create_task(gateway.run())
    try:
        yield
    finally:
        gateway.request_stop()
        await asyncio.wait_for(serving, WAIT_S)


@pytest.mark.slow
def test_a_message_whose_handling_raises_is_kept_retried_and_answered(
    servers: tuple[FakeTelegram, FakeOpenAI], home: Home
) -> None:
    telegram, llm = servers
    broken = break_session(home, 1001)
    process = retrying_gateway(home, telegram, llm, NANOMEM_AGENT__MAX_ATTEMPTS="100")
    telegram.send_text(1001, "what is on the list today?")
    (note,) = telegram.wait_for_messages(1001, 1)
    assert note["text"] == RETRYING
    assert "Traceback" not in note["text"] and "IsADirectory" not in note["text"]
    (kept,) = stored(home, 1001)  # still in the inbox, not answered
    assert kept["reply"] is None
    wait_until(lambda: stored(home, 1001)[0]["attempts"] >= 2, what="a second attempt")
    broken.rmdir()  # the fault is gone
    replies = telegram.wait_for_messages(1001, 2)
    assert replies[1]["text"].startswith("echo: ")
    assert replies[1]["text"].endswith("what is on the list today?")
    wait_until(lambda: stored(home, 1001) == [], what="the message to leave the inbox")
    assert process.stop() == 0, "".join(process.lines)
    assert len(telegram.sent_messages(1001)) == 2  # told once, answered once
    roles = [(m["role"], m["content"]) for m in load_session(home, "telegram:1001").messages]
    assert [role for role, _ in roles] == ["user", "assistant"]  # no error text saved
    assert len(llm.requests) == 1


@pytest.mark.slow
def test_a_persisting_fault_parks_the_message_and_the_owner_retries_it(
    servers: tuple[FakeTelegram, FakeOpenAI], home: Home
) -> None:
    telegram, llm = servers
    broken = break_session(home, 1002)
    process = retrying_gateway(home, telegram, llm)
    telegram.send_text(1002, "please remember the milk")
    (notice,) = telegram.wait_for_messages(OWNER, 1)
    assert "parked" in notice["text"] and "telegram:1002" in notice["text"]
    assert "please remember the milk" in notice["text"] and "nanomem inbox retry" in notice["text"]
    (kept,) = stored(home, 1002)
    assert kept["attempts"] == 3 and kept["parked_at"] and kept["last_error"] == "IsADirectoryError"
    assert len(telegram.sent_messages(1002)) == 1  # the person was told once
    queues = process.health()[1]["queues"]
    assert (queues["inbox"], queues["parked"]) == (1, 1)
    status = run_cli_here("status", env=cli_env(home))
    assert status.returncode == 0, status.stderr
    (line,) = [line for line in status.stdout.splitlines() if "please remember" in line]
    assert "telegram:1002" in line and "3 attempts" in line and "IsADirectoryError" in line

    # Parked stays parked across a restart, even with the fault gone; the owner is not told
    # again. Another chat's message parked after the restart is the positive control: the
    # owner hears of that one only, so the check that would repeat the first notice ran.
    assert process.stop() == 0, "".join(process.lines)
    broken.rmdir()
    break_session(home, 1005)
    process = retrying_gateway(home, telegram, llm)
    process.wait_for_line(r"1 message is parked")
    telegram.send_text(1005, "water the plants")
    notices = telegram.wait_for_messages(OWNER, 2)
    assert "telegram:1005" in notices[1]["text"] and "water the plants" in notices[1]["text"]
    assert len(telegram.sent_messages(OWNER)) == 2 and len(telegram.sent_messages(1002)) == 1
    assert stored(home, 1002)[0]["parked_at"] and llm.requests == []

    # The owner retries it: the running gateway answers it.
    retried = run_cli_here("inbox", "retry", str(kept["seq"]), env=cli_env(home))
    assert retried.returncode == 0, retried.stderr
    replies = telegram.wait_for_messages(1002, 2)
    assert replies[1]["text"].endswith("please remember the milk")
    wait_until(lambda: stored(home, 1002) == [], what="the message to leave the inbox")
    assert process.stop() == 0, "".join(process.lines)
    assert len(telegram.sent_messages(OWNER)) == 2 and len(llm.requests) == 1


@pytest.mark.slow
def test_a_retry_due_while_the_gateway_was_down_runs_at_start(
    servers: tuple[FakeTelegram, FakeOpenAI], home: Home
) -> None:
    telegram, llm = servers
    broken = break_session(home, 1004)
    process = retrying_gateway(home, telegram, llm, NANOMEM_AGENT__RETRY_FIRST_S="2")
    telegram.send_text(1004, "the dentist is at nine")
    telegram.wait_for_messages(1004, 1)  # told it will be retried
    assert process.stop() == 0, "".join(process.lines)
    (kept,) = stored(home, 1004)
    assert kept["attempts"] >= 1 and kept["next_at"] and not kept["parked_at"]
    broken.rmdir()
    due = datetime.fromisoformat(kept["next_at"])
    wait_until(lambda: datetime.now(UTC) > due, what="the retry to fall due")
    process = retrying_gateway(home, telegram, llm, NANOMEM_AGENT__RETRY_FIRST_S="2")
    replies = telegram.wait_for_messages(1004, 2)
    assert replies[1]["text"].endswith("the dentist is at nine")
    wait_until(lambda: stored(home, 1004) == [], what="the message to leave the inbox")
    assert process.stop() == 0, "".join(process.lines)
    # Taken once: the line once, though the channel was still starting at the first sweep.
    said = [line for line in process.lines if "retrying message" in line]
    assert len(said) == 1 and "(telegram:1004), attempt" in said[0], said


# Siblings: where else a stored message could leave the inbox unanswered.


async def test_a_note_the_channel_answers_with_stays_stored_until_delivered(
    tmp_path: Path,
) -> None:
    # It was forgotten as soon as it was queued: a network error then lost the answer.
    with FakeTelegram() as fake, log_lines("ERROR") as logged:
        inbox = SqliteInbox(tmp_path / "inbox.sqlite3")
        channel = make_channel(fake, tmp_path)
        channel.delivery.backoff_s = 0.01  # its waits between attempts at a send
        first = MessageBus(inbox=inbox)
        await channel.start(first)
        # In the core's place: it prepares the message (the channel answers /start itself)
        # and delivers what the channel answered.
        core = [
            asyncio.create_task(first.next_inbound()),
            asyncio.create_task(pump_outbound(channel, first)),
        ]
        fake.fail_next("sendMessage", error_code=502, description="Bad Gateway", times=6)
        fake.send_text(OWNER_42, "/start", first_name="Ada")
        await until(lambda: any("gave up sending" in line for line in logged))
        for task in core:
            task.cancel()
        await asyncio.gather(*core, return_exceptions=True)
        await channel.stop()
        (kept,) = inbox.pending("telegram")
        assert kept.reply is not None
        assert OutboundMessage.from_dict(kept.reply, 0).content == GREETING.format(name="Ada")
        assert fake.sent_messages(OWNER_42) == []

        bus = MessageBus(inbox=inbox)
        restarted = make_channel(fake, tmp_path)
        pump = asyncio.create_task(pump_outbound(restarted, bus))
        await restarted.start(bus)
        try:
            (greeting,) = await fake.wait_for_messages_async(OWNER_42, 1)
            assert greeting["text"] == GREETING.format(name="Ada")
            await until(lambda: inbox.count() == 0)
        finally:
            pump.cancel()
            await restarted.stop()
            inbox.close()


async def test_a_message_the_channel_cannot_take_in_is_kept_and_taken_again(
    home: Home, tmp_path: Path
) -> None:
    # A Bot API answer we cannot read (getFile without its file_unique_id) made taking the
    # message in raise: it was logged and then sat in the inbox until the next start.
    with FakeTelegram() as fake:
        app = scripted_app(home, retry_first_s=0.2, max_attempts=5)
        async with running(app, fake):
            unreadable = json.dumps({"ok": True, "result": {"file_id": "document-1"}})
            fake.fail_next("getFile", body=unreadable, times=2)
            fake.send_document(OWNER_42, b"milk, eggs", file_name="list.txt")
            note, answer = await fake.wait_for_messages_async(OWNER_42, 2, timeout=WAIT_S)
            assert note["text"] == RETRYING
            assert "[document: list.txt]" in answer["text"]
            assert answer["reply_to_message"]["message_id"]  # late: it quotes the question
            await until(lambda: app.bus.inbox is not None and app.bus.inbox.count() == 0)
            assert len(fake.sent_messages(OWNER_42)) == 2


async def test_an_unreadable_stored_message_does_not_keep_telegram_down(
    home: Home, tmp_path: Path
) -> None:
    # One stored update that cannot be read back (damaged, or written by another version)
    # made every start of the channel fail: Telegram stayed down for every chat.
    with FakeTelegram() as fake:
        app = scripted_app(home, retry_first_s=0.05, max_attempts=2)
        inbox = app.bus.inbox
        assert inbox is not None
        damaged = {"update_id": 1, "message": {"message_id": 1, "text": "the lost words"}}
        (seq,) = inbox.add("telegram", [(str(OWNER_42), damaged, Sender())], None)
        async with running(app, fake):
            fake.send_text(OWNER_42, "hello")
            (answer,) = await fake.wait_for_messages_async(OWNER_42, 1, timeout=WAIT_S)
            assert answer["text"].endswith("hello")  # the channel runs
            (parked,) = await until(inbox.parked)  # kept for the owner, not retried forever
            assert (parked.seq, parked.attempts, parked.preview) == (seq, 2, "the lost words")


async def test_an_unreadable_stored_firing_does_not_stop_the_schedules(home: Home) -> None:
    # One stored firing that could not be read back made the schedules' start fail: no other
    # firing was replayed and no schedule was armed until the next start.
    with FakeTelegram() as fake:
        app = scripted_app(home, retry_first_s=0.05, max_attempts=2)
        inbox = app.bus.inbox
        assert inbox is not None
        now = datetime.now(UTC).isoformat()
        firing = {
            "id": "a1b2c3",
            "session": f"telegram:{OWNER_42}",
            "text": "water the plants",
            "rule": "once",
            "created_at": now,
            "occurrence": now,
            "made_by": str(OWNER_42),
        }
        chat = str(OWNER_42)
        damaged, _ = inbox.add(
            "schedule", [(chat, {"text": "feed the cat"}, Sender()), (chat, firing, Sender())], None
        )
        async with running(app, fake):
            (answer,) = await fake.wait_for_messages_async(OWNER_42, 1, timeout=WAIT_S)
            assert answer["text"].endswith("water the plants")
            (parked,) = await until(inbox.parked)
            assert (parked.seq, parked.attempts, parked.preview) == (damaged, 2, "feed the cat")
            await until(lambda: inbox.count() == 1)  # the answered firing left the inbox


@pytest.mark.slow
def test_each_parked_message_gets_its_own_log_line(
    servers: tuple[FakeTelegram, FakeOpenAI], home: Home
) -> None:
    """Two messages parked within a minute differ only in numbers (their ids and chats): the
    log's flood guard must not fold the second into a count, since each is the owner's to
    retry or drop by the id that line names."""
    telegram, llm = servers
    for chat in (1002, 1003):
        break_session(home, chat)
    process = retrying_gateway(home, telegram, llm)
    telegram.send_text(1002, "please remember the milk")
    telegram.send_text(1003, "and the eggs")
    telegram.wait_for_messages(OWNER, 2)  # both parked, the owner told of each
    assert process.stop() == 0, "".join(process.lines)
    parked = [line for line in process.lines if "is parked after" in line]
    assert sorted(line.split("(telegram:")[1][:4] for line in parked) == ["1002", "1003"], "".join(
        process.lines
    )

"""The durable inbox: on disk before acknowledged, gone only once the reply is delivered."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import sqlite3
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

from nanomem.agent.bus import MessageBus
from nanomem.agent.channel import pump_outbound
from nanomem.agent.inbox import NEVER_FINISHED, SqliteInbox, parked_in
from nanomem.agent.outbound import (
    Button,
    Delta,
    DeltaEnd,
    File,
    OutboundMessage,
    Part,
    Progress,
    Question,
    Text,
)
from nanomem.agent.retries import retry_delay
from nanomem.app import build_app
from nanomem.audience import Sender
from nanomem.home import Home
from nanomem.providers.scripted import ScriptedProvider
from nanomem.text.masking import register_secrets
from tests.conftest import log_lines, settings_for
from tests.helpers import until
from tests.helpers.inbox import Recorder, stored

NOBODY = Sender()


def test_items_and_the_position_are_stored_together(tmp_path: Path) -> None:
    inbox = SqliteInbox(tmp_path / "inbox.sqlite3")
    seqs = inbox.add(
        "telegram", [("42", {"text": "a"}, NOBODY), ("7", {"text": "b"}, NOBODY)], ("offset", "12")
    )
    assert inbox.position("offset") == "12" and seqs[0] < seqs[1]
    pending = inbox.pending("telegram")
    assert [(p.chat, p.payload, p.reply) for p in pending] == [
        ("42", {"text": "a"}, None),
        ("7", {"text": "b"}, None),
    ]
    assert inbox.pending("api") == []
    assert (tmp_path / "inbox.sqlite3").stat().st_mode & 0o777 == 0o600


def test_answered_keeps_the_reply_until_done(tmp_path: Path) -> None:
    inbox = SqliteInbox(tmp_path / "inbox.sqlite3")
    first, second = inbox.add("telegram", [("42", {}, NOBODY), ("42", {}, NOBODY)], None)
    inbox.answered(first, {"content": "the reply"})
    inbox.answered(second, None)  # a turn /stop cut short: nothing to deliver
    (left,) = inbox.pending("telegram")
    assert (left.seq, left.reply) == (first, {"content": "the reply"})
    inbox.done(first)
    assert inbox.pending("telegram") == []


def test_a_killed_writer_leaves_everything_it_committed(tmp_path: Path) -> None:
    path = tmp_path / "inbox.sqlite3"
    script = (
        "import os, sys\n"
        "from nanomem.agent.inbox import SqliteInbox\n"
        "from nanomem.audience import Sender\n"
        f"inbox = SqliteInbox(__import__('pathlib').Path({str(path)!r}))\n"
        "for n in range(50):\n"
        "    inbox.add('telegram', [('1', {'n': n}, Sender())], ('offset', str(n + 1)))\n"
        "os.kill(os.getpid(), 9)\n"
    )
    subprocess.run([sys.executable, "-c", script], check=False, timeout=60)
    inbox = SqliteInbox(path)
    assert [p.payload["n"] for p in inbox.pending("telegram")] == list(range(50))
    assert inbox.position("offset") == "50"


def test_an_unreadable_inbox_is_set_aside_not_fatal(tmp_path: Path) -> None:
    path = tmp_path / "inbox.sqlite3"
    path.write_bytes(b"this is not a database" * 100)
    inbox = SqliteInbox(path)
    assert inbox.pending("telegram") == []
    assert any(p.name.startswith("inbox.sqlite3.unreadable-") for p in tmp_path.iterdir())
    inbox.add("telegram", [("1", {}, NOBODY)], None)
    assert len(inbox.pending("telegram")) == 1
    with sqlite3.connect(path) as db:  # a real database again
        assert db.execute("SELECT count(*) FROM messages").fetchone() == (1,)


async def test_a_message_leaves_the_inbox_only_when_its_reply_is_delivered(
    home: Home, tmp_path: Path
) -> None:
    inbox = SqliteInbox(tmp_path / "inbox.sqlite3")
    bus = MessageBus(inbox=inbox)
    provider = ScriptedProvider(latency=0.2)  # the turn takes a while: it is seen running
    app = build_app(settings_for(home), home, provider, bus)
    channel = Recorder(fail_first=True)
    serving = asyncio.create_task(app.loop.run())
    pump = asyncio.create_task(pump_outbound(channel, bus))
    try:
        msg = await stored(bus, "42", "hello")
        await bus.publish_inbound(msg)
        await until(lambda: provider.calls)  # the model was asked
        (waiting,) = inbox.pending("telegram")
        assert waiting.reply is None  # the turn is running
        left = await until(
            lambda: (rows := inbox.pending("telegram")) and rows[0].reply is not None and rows
        )
        assert left[0].reply is not None
        assert OutboundMessage.from_dict(left[0].reply, 0).content.startswith("echo:")
        assert channel.sent == []  # the first delivery failed: the reply is kept
        assert await bus.unfinished("telegram") == []  # ... and queued again, as at a start
        await until(lambda: not inbox.pending("telegram"))
        assert inbox.pending("telegram") == [] and len(channel.sent) == 1
    finally:
        serving.cancel()
        pump.cancel()
        await asyncio.gather(serving, pump, return_exceptions=True)
        inbox.close()


async def test_what_cannot_be_delivered_now_is_logged_kept_only_when_the_inbox_has_it(
    tmp_path: Path,
) -> None:
    inbox = SqliteInbox(tmp_path / "inbox.sqlite3")
    bus = MessageBus(inbox=inbox)
    msg = await stored(bus, "42", "hello")
    answer = OutboundMessage.answering(msg, Text("the answer"))
    file = OutboundMessage("telegram", "42", File("report.csv"), msg.id)  # as send_file makes it
    pump: asyncio.Task[None] | None = None
    try:
        for out, said in [
            (file, "telegram: a file to chat 42 is dropped (not in the inbox): network down"),
            (answer, "telegram: a reply to chat 42 is kept for the next start: network down"),
        ]:
            channel = Recorder(fail_first=True)
            with log_lines("WARNING") as lines:
                pump = asyncio.create_task(pump_outbound(channel, bus))
                await bus.publish_outbound(out)
                await until(lambda: said in lines)  # noqa: B023 - awaited in this iteration
            pump.cancel()
            await asyncio.gather(pump, return_exceptions=True)
        assert [p.seq for p in inbox.pending("telegram")] == [msg.seq]  # the answer's, kept
    finally:
        if pump is not None:
            pump.cancel()
        inbox.close()


async def test_a_stopping_loop_leaves_waiting_messages_in_the_inbox(
    home: Home, tmp_path: Path
) -> None:
    inbox = SqliteInbox(tmp_path / "inbox.sqlite3")
    bus = MessageBus(inbox=inbox)
    provider = ScriptedProvider(latency=0.3)
    app = build_app(settings_for(home), home, provider, bus)
    serving = asyncio.create_task(app.loop.run())
    try:
        running = await stored(bus, "42", "first")
        waiting = await stored(bus, "42", "second")
        for msg in (running, waiting):
            await bus.publish_inbound(msg)
        await until(lambda: provider.calls)
        app.loop.stop_taking()
        await app.loop.close(grace_s=10)
        (left,) = [p for p in inbox.pending("telegram") if p.reply is None]
        assert left.seq == waiting.seq and len(provider.calls) == 1  # "second" never began
        session = await app.sessions.get("telegram:42")
        assert [m["role"] for m in session.messages] == ["user", "assistant"]
    finally:
        serving.cancel()
        await asyncio.gather(serving, return_exceptions=True)
        inbox.close()


async def test_a_graceful_stop_gives_back_the_attempt_of_a_turn_it_kept_from_beginning(
    home: Home, tmp_path: Path
) -> None:
    inbox = SqliteInbox(tmp_path / "inbox.sqlite3")
    bus = MessageBus(inbox=inbox)
    provider = ScriptedProvider(latency=0.3)
    settings = settings_for(home, agent={"max_concurrent_turns": 1})
    app = build_app(settings, home, provider, bus)
    serving = asyncio.create_task(app.loop.run())
    try:
        running = await stored(bus, "42", "first")
        waiting = await stored(bus, "43", "second")  # another chat: waits for the turn slot
        for msg in (running, waiting):
            await bus.publish_inbound(msg)
        await until(lambda: provider.calls)
        await until(lambda: {p.seq: p.attempts for p in inbox.pending("telegram")}[waiting.seq])
        app.loop.stop_taking()
        await app.loop.close(grace_s=10)
        (left,) = [p for p in inbox.pending("telegram") if p.reply is None]
        assert left.seq == waiting.seq and left.attempts == 0  # counted, then given back
        assert len(provider.calls) == 1
    finally:
        serving.cancel()
        await asyncio.gather(serving, return_exceptions=True)
        inbox.close()


V1_SCHEMA = """
CREATE TABLE messages (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    channel TEXT NOT NULL,
    chat TEXT NOT NULL,
    received_at TEXT NOT NULL,
    payload TEXT NOT NULL,
    reply TEXT
);
CREATE INDEX messages_by_channel ON messages (channel, seq);
CREATE TABLE positions (name TEXT PRIMARY KEY, value TEXT NOT NULL);
PRAGMA user_version=1;
"""


def test_an_inbox_written_before_retries_loads_and_keeps_everything(tmp_path: Path) -> None:
    path = tmp_path / "inbox.sqlite3"
    with contextlib.closing(sqlite3.connect(path)) as db:
        db.executescript(V1_SCHEMA)
        db.execute(
            "INSERT INTO messages (channel, chat, received_at, payload, reply) VALUES "
            "('telegram', '42', '2026-11-20T10:00:00.000+00:00', '{\"text\": \"a\"}', NULL), "
            "('telegram', '42', '2026-11-20T10:00:01.000+00:00', '{}', '{\"content\": \"r\"}')"
        )
        db.execute("INSERT INTO positions VALUES ('telegram.offset', '17')")
        db.commit()
    assert parked_in(path) == []  # `nanomem status` reads an old file without changing it
    inbox = SqliteInbox(path)
    waiting, answered = inbox.pending("telegram")
    assert (waiting.payload, waiting.attempts, waiting.parked_at) == ({"text": "a"}, 0, None)
    assert answered.reply == {"content": "r"} and inbox.position("telegram.offset") == "17"
    kept = inbox.failed(waiting.seq, "KeyError", "a", lambda attempts: 10.0)
    assert kept is not None and kept.attempts == 1 and kept.next_at is not None
    inbox.close()
    with contextlib.closing(sqlite3.connect(path)) as db:
        assert db.execute("PRAGMA user_version").fetchone() == (3,)
    assert [p.attempts for p in SqliteInbox(path).pending("telegram")] == [1, 0]
    assert waiting.sender is None  # stored before senders were: the channel reads the payload


def test_the_sender_is_stored_with_the_message_and_read_back(tmp_path: Path) -> None:
    path = tmp_path / "inbox.sqlite3"
    member = Sender("77", "Bea (@bea)", can_answer=True, shared_room=True)
    inbox = SqliteInbox(path)
    (seq,) = inbox.add("telegram", [("-100", {"text": "hi"}, member)], None)
    inbox.close()
    (pending,) = SqliteInbox(path).pending("telegram")
    assert (pending.seq, pending.sender) == (seq, member)


def test_a_parked_message_of_an_inbox_not_yet_migrated_is_listed(tmp_path: Path) -> None:
    path = tmp_path / "inbox.sqlite3"
    inbox = SqliteInbox(path)
    (seq,) = inbox.add("telegram", [("42", {"text": "a"}, NOBODY)], None)
    inbox.failed(seq, "KeyError", "a", lambda attempts: None)
    inbox.close()
    with contextlib.closing(sqlite3.connect(path)) as db:  # as version 2 left it
        db.execute("ALTER TABLE messages DROP COLUMN sender")
        db.execute("PRAGMA user_version=2")
        db.commit()
    (parked,) = parked_in(path)
    assert (parked.seq, parked.sender) == (seq, None)


def test_the_backoff_grows_to_an_hour_and_the_last_attempt_parks() -> None:
    delays = [retry_delay(n, max_attempts=8, first_s=10.0) for n in range(1, 9)]
    assert delays == [10.0, 60.0, 360.0, 2160.0, 3600.0, 3600.0, 3600.0, None]
    assert retry_delay(1, max_attempts=1, first_s=10.0) is None


def test_a_failed_message_waits_then_is_parked_until_the_owner_decides(tmp_path: Path) -> None:
    inbox = SqliteInbox(tmp_path / "inbox.sqlite3")
    seq, other = inbox.add("telegram", [("42", {"text": "hi"}, NOBODY), ("43", {}, NOBODY)], None)
    plan = functools.partial(retry_delay, max_attempts=3, first_s=10.0)
    before = datetime.now(UTC)
    first = inbox.failed(seq, "IsADirectoryError", "hi there", plan)
    assert first is not None and first.next_at is not None and first.parked_at is None
    assert 9 <= (first.next_at - before).total_seconds() <= 11
    assert [p.seq for p in inbox.retrying()] == [seq] and inbox.parked() == []
    inbox.failed(seq, "IsADirectoryError", "hi there", plan)
    last = inbox.failed(seq, "KeyError", "hi there", plan)
    assert last is not None and (last.attempts, last.last_error) == (3, "KeyError")
    assert last.parked_at is not None and last.next_at is None and inbox.retrying() == []
    assert [p.seq for p in inbox.untold()] == [seq] and parked_in(inbox.path)[0].seq == seq
    inbox.owner_told(seq)
    assert inbox.untold() == [] and [p.preview for p in inbox.parked()] == ["hi there"]
    assert (inbox.count(), inbox.count_parked()) == (2, 1)  # kept: parked is not gone
    assert not inbox.unpark(other) and inbox.unpark(seq)  # only a parked one
    (again,) = inbox.retrying()
    assert again.attempts == 3 and again.next_at is not None
    parked = inbox.failed(seq, "KeyError", "hi there", plan)  # one more attempt, then parked
    assert parked is not None and parked.parked_at is not None and inbox.untold() != []
    assert not inbox.drop(other) and inbox.drop(seq)  # a message never failed is not dropped
    assert [p.seq for p in inbox.pending("telegram")] == [other]
    assert inbox.failed(seq, "KeyError", "", plan) is None  # gone: nothing to count


def test_attempts_count_as_they_begin_and_none_ending_parks_the_message(tmp_path: Path) -> None:
    inbox = SqliteInbox(tmp_path / "inbox.sqlite3")
    (seq,) = inbox.add("telegram", [("42", {"text": "a long pdf"}, NOBODY)], None)
    plan = functools.partial(retry_delay, max_attempts=2)
    for attempt in (1, 2):  # each begins, and the process dies in it: no end is recorded
        assert inbox.begin(seq, "a long pdf", plan) is None
        (left,) = inbox.pending("telegram")
        assert left.attempts == attempt and not left.failed  # replayed in its chat's order
    parked = inbox.begin(seq, "a long pdf", plan)  # the third would begin: parked instead
    assert parked is not None and parked.parked_at is not None and parked.attempts == 2
    assert parked.last_error == NEVER_FINISHED and [p.seq for p in inbox.untold()] == [seq]
    assert inbox.begin(seq, "a long pdf", plan) is None and inbox.count_parked() == 1
    assert inbox.unpark(seq)  # the owner grants one more: it begins, not parked again
    assert inbox.begin(seq, "a long pdf", plan) is None and inbox.count_parked() == 0
    assert inbox.pending("telegram")[0].attempts == 3


def test_an_attempt_begun_and_failed_counts_once_and_a_given_back_one_not(
    tmp_path: Path,
) -> None:
    inbox = SqliteInbox(tmp_path / "inbox.sqlite3")
    seq, other = inbox.add("telegram", [("42", {}, NOBODY), ("43", {}, NOBODY)], None)
    plan = functools.partial(retry_delay, max_attempts=5)
    inbox.begin(seq, "", plan)
    failed = inbox.failed(seq, "KeyError", "", plan, counted=True)
    assert failed is not None and failed.attempts == 1 and failed.next_at is not None
    inbox.begin(seq, "", plan)  # its retry: under way, no longer waiting for one
    assert inbox.retrying() == [] and not inbox.drop(seq)
    inbox.begin(other, "", plan)
    inbox.give_back(other)  # a graceful stop took it before its turn began
    assert {p.seq: p.attempts for p in inbox.pending("telegram")} == {seq: 2, other: 0}


async def test_a_restart_hands_back_only_what_no_retry_owns(tmp_path: Path) -> None:
    inbox = SqliteInbox(tmp_path / "inbox.sqlite3")
    bus = MessageBus(inbox=inbox)
    fresh, failed, parked = inbox.add(
        "telegram", [("1", {}, NOBODY), ("2", {}, NOBODY), ("3", {}, NOBODY)], None
    )
    inbox.failed(failed, "KeyError", "", lambda attempts: 60.0)
    inbox.failed(parked, "KeyError", "", lambda attempts: None)
    assert [p.seq for p in await bus.unfinished("telegram")] == [fresh]
    assert inbox.count() == 3
    inbox.close()


def test_a_secret_json_would_escape_is_stored_masked(tmp_path: Path) -> None:
    secret = 'pässwörd-"quoted"\\-ключ'  # JSON writes it as \u00e4, \", \\ and \u043a...
    register_secrets([secret])
    inbox = SqliteInbox(tmp_path / "inbox.sqlite3")
    inbox.add("telegram", [("42", {"text": f"it is {secret}", "parts": [secret]}, NOBODY)], None)
    (pending,) = inbox.pending("telegram")
    assert pending.payload == {"text": "it is ***", "parts": ["***"]}
    inbox.close()
    stored = (tmp_path / "inbox.sqlite3").read_bytes()
    assert "pässwörd".encode() not in stored and b"p\\u00e4ssw\\u00f6rd" not in stored


def test_every_outbound_part_is_stored_and_read_back_whole() -> None:
    choices = (Button("Allow once", "/shell-allow 1"), Button("Deny", "/shell-deny 1"))
    parts: list[Part] = [
        Text("the reply", buttons=choices),
        Text("Model quota exhausted", "error", category="quota"),
        Text("New session started.", "command", command="new"),
        Delta("piece", "the piece", 2),
        DeltaEnd(2),
        Question("Run `ls`?", choices),
        Progress("list_dir(path='.')", "list_dir"),
        File("media/report.pdf", "the report"),
    ]
    for part in parts:
        stored = json.loads(json.dumps(OutboundMessage("telegram", "42", part, "in-1").to_dict()))
        assert OutboundMessage.from_dict(stored, 7) == OutboundMessage(
            "telegram", "42", part, "in-1", 7
        )


def test_a_reply_stored_before_parts_is_read_as_text() -> None:
    old = {
        "channel": "telegram",
        "chat_id": "42",
        "content": "Unknown command /x — try /help.",
        "kind": "error",
        "reply_to": "in-3",
        "metadata": {"command": "x"},
        "buttons": [["Help", "/help"]],
    }
    read = OutboundMessage.from_dict(old, 3)
    assert read.part == Text(old["content"], "error", (Button("Help", "/help"),), "x")
    assert (read.chat_id, read.reply_to, read.seq) == ("42", "in-3", 3)
    answer = {**old, "kind": "reply", "metadata": {"command": "help"}, "buttons": []}
    assert OutboundMessage.from_dict(answer, 3).part == Text(old["content"], "command", (), "help")

"""The durable inbox: on disk before acknowledged, gone only once the reply is delivered."""

from __future__ import annotations

import asyncio
import sqlite3
import subprocess
import sys
from pathlib import Path

from nanomem.agent.bus import InboundMessage, MessageBus, OutboundMessage
from nanomem.agent.channel import DeliveryLater, pump_outbound
from nanomem.agent.inbox import SqliteInbox
from nanomem.app import build_app
from nanomem.home import Home
from nanomem.providers.scripted import ScriptedProvider
from tests.conftest import settings_for


def test_items_and_the_position_are_stored_together(tmp_path: Path) -> None:
    inbox = SqliteInbox(tmp_path / "inbox.sqlite3")
    seqs = inbox.add("telegram", [("42", {"text": "a"}), ("7", {"text": "b"})], ("offset", "12"))
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
    first, second = inbox.add("telegram", [("42", {}), ("42", {})], None)
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
        f"inbox = SqliteInbox(__import__('pathlib').Path({str(path)!r}))\n"
        "for n in range(50):\n"
        "    inbox.add('telegram', [('1', {'n': n})], ('offset', str(n + 1)))\n"
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
    inbox.add("telegram", [("1", {})], None)
    assert len(inbox.pending("telegram")) == 1
    with sqlite3.connect(path) as db:  # a real database again
        assert db.execute("SELECT count(*) FROM messages").fetchone() == (1,)


class Recorder:
    name = "telegram"

    def __init__(self, fail_first: bool = False) -> None:
        self.sent: list[str] = []
        self.fail_first = fail_first

    async def start(self, bus: MessageBus) -> None: ...

    async def stop(self) -> None: ...

    async def send(self, msg: OutboundMessage) -> None:
        if msg.kind == "stream":
            return  # shown as it comes by channels that can; this one waits for the reply
        if self.fail_first:
            self.fail_first = False
            raise DeliveryLater("network down")
        self.sent.append(msg.content)


async def stored(bus: MessageBus, chat: str, text: str) -> InboundMessage:
    (seq,) = await bus.receive("telegram", [(chat, {"text": text})])
    assert seq is not None
    return InboundMessage("telegram", chat, text, "1", id=InboundMessage.inbox_id(seq), seq=seq)


async def test_a_message_leaves_the_inbox_only_when_its_reply_is_delivered(
    home: Home, tmp_path: Path
) -> None:
    inbox = SqliteInbox(tmp_path / "inbox.sqlite3")
    bus = MessageBus(inbox=inbox)
    app = build_app(settings_for(home), home, ScriptedProvider(latency=0.2), bus)
    channel = Recorder(fail_first=True)
    serving = asyncio.create_task(app.loop.run())
    pump = asyncio.create_task(pump_outbound(channel, bus))
    try:
        msg = await stored(bus, "42", "hello")
        await bus.publish_inbound(msg)
        await asyncio.sleep(0.05)
        (waiting,) = inbox.pending("telegram")
        assert waiting.reply is None  # the turn is running
        for _ in range(200):
            if (left := inbox.pending("telegram")) and left[0].reply is not None:
                break
            await asyncio.sleep(0.02)
        assert left[0].reply is not None and left[0].reply["content"].startswith("echo:")
        assert channel.sent == []  # the first delivery failed: the reply is kept
        assert await bus.unfinished("telegram") == []  # ... and queued again, as at a start
        for _ in range(200):
            if not inbox.pending("telegram"):
                break
            await asyncio.sleep(0.02)
        assert inbox.pending("telegram") == [] and len(channel.sent) == 1
    finally:
        serving.cancel()
        pump.cancel()
        await asyncio.gather(serving, pump, return_exceptions=True)
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
        while not provider.calls:
            await asyncio.sleep(0.01)
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

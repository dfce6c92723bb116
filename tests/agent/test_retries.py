"""A message whose handling raises inside nanomem: kept in the inbox, tried again with backoff
through its channel, parked after the last attempt; the person is told once (real loop, real
inbox, the scripted model; the fault is a session file that is a directory)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import pytest

from nanomem.agent.bus import InboundMessage, MessageBus
from nanomem.agent.channel import pump_outbound
from nanomem.agent.inbox import Pending, SqliteInbox
from nanomem.agent.loop import INTERNAL_ERROR
from nanomem.agent.outbound import Text
from nanomem.agent.retries import GIVEN_UP, RETRYING, Retries
from nanomem.app import App, build_app
from nanomem.audience import Sender
from nanomem.home import Home
from nanomem.memory.session import session_filename
from nanomem.providers.scripted import ScriptedProvider
from tests.conftest import settings_for
from tests.helpers import until
from tests.helpers.inbox import Recorder, stored


@dataclass
class Running:
    app: App
    bus: MessageBus
    inbox: SqliteInbox
    channel: Recorder
    provider: ScriptedProvider
    retries: Retries | None = None
    readmitted: list[int] = field(default_factory=list)
    taking: bool = True  # False: the channel is down and takes nothing back

    async def readmit(self, pending: Pending) -> bool:
        """What a channel does: the stored message, brought in again as a replayed one."""
        if not self.taking:
            return False
        self.readmitted.append(pending.seq)
        text, seq = pending.payload["text"], pending.seq
        ident = InboundMessage.inbox_id(seq)
        msg = InboundMessage(
            "telegram", pending.chat, text, Sender("1"), id=ident, seq=seq, replayed=True
        )
        await self.bus.publish_inbound(msg)
        return True

    def row(self, seq: int) -> Pending | None:
        return next((p for p in self.inbox.pending("telegram") if p.seq == seq), None)


@pytest.fixture
async def running(home: Home, tmp_path: Path) -> AsyncIterator[Running]:
    inbox = SqliteInbox(tmp_path / "inbox.sqlite3")
    bus = MessageBus(inbox=inbox)
    settings = settings_for(home, agent={"retry_first_s": 0.05, "max_attempts": 3})
    provider = ScriptedProvider()
    app = build_app(settings, home, provider, bus)
    state = Running(app, bus, inbox, Recorder(), provider)
    state.retries = Retries(bus, {"telegram": state.readmit}, sweep_s=0.05)
    tasks = [
        asyncio.create_task(app.loop.run()),
        asyncio.create_task(pump_outbound(state.channel, bus)),
        asyncio.create_task(state.retries.run()),
    ]
    try:
        yield state
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        inbox.close()


def break_session(home: Home, key: str) -> Path:
    path = home.sessions / session_filename(key)
    path.mkdir(parents=True)
    return path


async def test_a_message_that_raises_is_kept_told_once_and_answered_after_the_fault(
    running: Running, home: Home
) -> None:
    broken = break_session(home, "telegram:42")
    msg = await stored(running.bus, "42", "hello")
    await running.bus.publish_inbound(msg)
    await until(lambda: (row := running.row(msg.seq or 0)) and row.attempts >= 2)
    await until(lambda: running.channel.sent == [RETRYING])  # told once, not every attempt
    assert running.provider.calls == []
    broken.rmdir()
    await until(lambda: running.inbox.count() == 0)
    assert running.channel.sent[0] == RETRYING and running.channel.sent[1].endswith("hello")
    assert len(running.channel.sent) == 2
    session = await running.app.sessions.get("telegram:42")
    assert [m["role"] for m in session.messages] == ["user", "assistant"]


async def test_a_persisting_fault_parks_the_message_and_nothing_more_is_tried(
    running: Running, home: Home
) -> None:
    break_session(home, "telegram:43")
    msg = await stored(running.bus, "43", "remember the milk")
    await running.bus.publish_inbound(msg)
    (parked,) = await until(running.inbox.parked)
    assert (parked.attempts, parked.last_error) == (3, "IsADirectoryError")
    assert parked.preview == "remember the milk" and running.readmitted == [msg.seq] * 2
    assert running.retries is not None
    for _ in range(3):  # a parked message is never handed in again
        await running.retries.sweep()
    assert running.readmitted == [msg.seq] * 2 and running.channel.sent == [RETRYING]


async def test_a_retry_waits_for_its_channel_to_run(running: Running, home: Home) -> None:
    running.taking = False
    broken = break_session(home, "telegram:44")
    msg = await stored(running.bus, "44", "later")
    await running.bus.publish_inbound(msg)
    await until(lambda: running.channel.sent == [RETRYING])
    broken.rmdir()
    row = running.row(msg.seq or 0)
    assert row is not None and row.next_at is not None and running.retries is not None
    due = row.next_at
    await until(lambda: datetime.now(UTC) > due)
    await running.retries.sweep()  # due, but the channel is down: kept, attempts unchanged
    row = running.row(msg.seq or 0)
    assert row is not None and row.attempts == 1 and row.parked_at is None
    running.taking = True
    await until(lambda: running.inbox.count() == 0)
    assert running.channel.sent[1].endswith("later")


async def test_the_first_failure_on_the_last_attempt_says_the_owner_was_told(
    home: Home, tmp_path: Path
) -> None:
    inbox = SqliteInbox(tmp_path / "inbox.sqlite3")
    bus = MessageBus(inbox=inbox)
    app = build_app(settings_for(home, agent={"max_attempts": 1}), home, ScriptedProvider(), bus)
    channel = Recorder()
    tasks = [asyncio.create_task(app.loop.run()), asyncio.create_task(pump_outbound(channel, bus))]
    try:
        break_session(home, "telegram:45")
        await bus.publish_inbound(await stored(bus, "45", "once"))
        await until(lambda: channel.sent == [GIVEN_UP])
        assert [p.attempts for p in inbox.parked()] == [1]
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        inbox.close()


async def test_without_an_inbox_the_person_is_told_at_once(home: Home) -> None:
    app = build_app(settings_for(home), home, ScriptedProvider(), MessageBus())
    break_session(home, "cli:direct")
    reply = await app.loop.handle(InboundMessage("cli", "direct", "hi"))
    assert reply is not None and reply.part == Text(INTERNAL_ERROR, "error")

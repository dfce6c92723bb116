"""A flood of Discord gateway events against a channel whose intake is held up: the events
waiting in memory are bounded, and what was dropped is read back from the channel's history
(the real channel in-process, against the loopback Discord)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from channels.discord.channel import DiscordChannel
from nanomem.agent.bus import MessageBus
from nanomem.config import DiscordSettings
from tests.conftest import log_lines
from tests.fakes.discord_server import FakeDiscord
from tests.helpers import until
from tests.helpers.discord import OWNER

KEPT = 5


@pytest.fixture
def fake() -> Iterator[FakeDiscord]:
    with FakeDiscord() as server:
        yield server


async def test_a_flood_is_bounded_in_memory_and_what_it_dropped_is_read_back_in_order(
    fake: FakeDiscord, tmp_path: Path
) -> None:
    settings = DiscordSettings.model_validate(
        {"enabled": True, "token": fake.token, "api_base": fake.api_base, "owner": OWNER}
    )
    channel = DiscordChannel(settings, workspace=tmp_path, commands=[], events_kept=KEPT)
    bus = MessageBus(maxsize=1)  # nobody takes messages yet: the channel's intake waits
    await channel.start(bus)
    try:
        await asyncio.to_thread(fake.wait, fake.connected)
        with log_lines("WARNING") as logged:
            for n in range(20):
                await asyncio.to_thread(fake.dm, OWNER, f"flood {n:02d}")
            # One in the bus, one waiting to go in, KEPT in memory: the rest are dropped.
            dropped = "events wait to be read"
            await until(lambda: any(dropped in line for line in logged), what="the drop")
            texts = []
            for _ in range(20):
                msg = await asyncio.wait_for(bus.next_inbound(prepared=False), 10)
                texts.append(msg.content)
        assert texts == [f"flood {n:02d}" for n in range(20)]  # none lost, none twice
        assert len([line for line in logged if dropped in line]) == 1
    finally:
        await channel.stop()

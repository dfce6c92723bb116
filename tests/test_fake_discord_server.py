"""Tests for the loopback Discord, driven by the real discord.py: what it sends and expects
is what Discord's REST API and gateway do. discord.py has no base-URL setting: its routes are
built on `discord.http.Route.BASE`, pointed at the fake here as the channel does, and the
websocket's address comes from the fake's `GET /gateway/bot` (AutoShardedClient asks it)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import discord
import pytest
from discord.http import Route

from tests.fakes.discord_server import (
    BOT_ID,
    DIRECT_MESSAGES,
    GENERAL,
    GUILD_MESSAGES,
    GUILDS,
    MESSAGE_CONTENT,
    FakeDiscord,
)
from tests.helpers import until

PERSON = "300000000000000001"


@pytest.fixture
def fake() -> Iterator[FakeDiscord]:
    with FakeDiscord() as server:
        yield server


class Recorder(discord.AutoShardedClient):
    def __init__(self, intents: discord.Intents) -> None:
        super().__init__(intents=intents, allowed_mentions=discord.AllowedMentions.none())
        self.seen: list[discord.Message] = []
        self.interactions: list[discord.Interaction] = []

    async def on_message(self, message: discord.Message) -> None:
        self.seen.append(message)

    async def on_interaction(self, interaction: discord.Interaction) -> None:
        self.interactions.append(interaction)


def intents(content: bool = True) -> discord.Intents:
    chosen = discord.Intents.none()
    chosen.guilds = chosen.guild_messages = chosen.dm_messages = True
    chosen.message_content = content
    return chosen


@asynccontextmanager
async def connected(fake: FakeDiscord, content: bool = True) -> AsyncIterator[Recorder]:
    Route.BASE = fake.api_base
    client = Recorder(intents(content))
    task = asyncio.create_task(client.start(fake.token))
    try:
        await until(client.is_ready, 30)
        yield client
    finally:
        await client.close()
        await asyncio.gather(task, return_exceptions=True)


async def test_identify_gets_ready_with_the_guild_and_the_intents_asked(fake: FakeDiscord) -> None:
    async with connected(fake) as client:
        assert client.user is not None and str(client.user.id) == BOT_ID
        (guild,) = client.guilds
        assert [c.name for c in guild.text_channels] == ["general"]
        (identify,) = fake.identifies
        wanted = GUILDS | GUILD_MESSAGES | DIRECT_MESSAGES | MESSAGE_CONTENT
        assert identify["intents"] == wanted and identify["token"] == fake.token
    assert ("GET", "/gateway/bot", {}) in fake.requests  # where the websocket is, asked


async def test_messages_arrive_as_dm_guild_channel_and_thread(fake: FakeDiscord) -> None:
    async with connected(fake) as client:
        await asyncio.to_thread(fake.dm, PERSON, "in a DM")
        await asyncio.to_thread(fake.say, GENERAL, PERSON, "in the guild", mention=True)
        thread = await asyncio.to_thread(fake.thread, GENERAL, "topic")
        await asyncio.to_thread(fake.say, thread, PERSON, "in the thread")
        await until(lambda: len(client.seen) == 3, 30)
        dm, guild, threaded = client.seen
        assert isinstance(dm.channel, discord.DMChannel) and dm.content == "in a DM"
        assert isinstance(guild.channel, discord.TextChannel) and client.user in guild.mentions
        assert isinstance(threaded.channel, discord.Thread)
        assert str(threaded.channel.id) == thread and threaded.channel.parent_id == int(GENERAL)


async def test_without_the_content_intent_guild_text_is_withheld(fake: FakeDiscord) -> None:
    async with connected(fake, content=False) as client:
        await asyncio.to_thread(fake.say, GENERAL, PERSON, "secret words")
        await asyncio.to_thread(fake.say, GENERAL, PERSON, "for the bot", mention=True)
        await until(lambda: len(client.seen) == 2, 30)
        assert [m.content for m in client.seen] == ["", f"<@{BOT_ID}> for the bot"]


async def test_a_dropped_connection_resumes_and_replays_what_was_missed(fake: FakeDiscord) -> None:
    async with connected(fake) as client:
        await asyncio.to_thread(fake.drop_connections)
        await asyncio.to_thread(fake.dm, PERSON, "while reconnecting")
        await until(lambda: client.seen, 30)
        assert client.seen[0].content == "while reconnecting"
        assert fake.resumes == 1 and len(fake.identifies) == 1


async def test_sent_messages_keep_the_limit_nonce_and_allowed_mentions(fake: FakeDiscord) -> None:
    async with connected(fake) as client:
        channel = client.get_partial_messageable(int(GENERAL))
        with pytest.raises(discord.HTTPException) as too_long:
            await channel.send("x" * 2001)
        assert too_long.value.status == 400 and too_long.value.code == 50035
        first = await channel.send("@everyone hello", nonce="same-nonce")
        again = await channel.send("@everyone hello", nonce="same-nonce")
        assert first.id == again.id  # enforce_nonce: a repeat is the first message
        (kept,) = fake.sent(GENERAL)
        assert kept["mention_everyone"] is False and kept["allowed_mentions"] == {"parse": []}
        pinged = await channel.send("@everyone now", allowed_mentions=discord.AllowedMentions.all())
        assert fake.message(GENERAL, str(pinged.id))["mention_everyone"] is True
        await first.edit(content="edited")
        assert fake.message(GENERAL, str(first.id))["content"] == "edited"
        await channel.send("a file", file=discord.File(__file__, filename="proof.py"))
        (uploaded,) = fake.sent(GENERAL)[-1]["attachments"]
        assert uploaded["filename"] == "proof.py"
        assert fake.file(uploaded) == Path(__file__).read_bytes()


async def test_a_rate_limit_is_answered_429_with_retry_after(fake: FakeDiscord) -> None:
    async with connected(fake) as client:
        fake.rate_limit("create", times=1, retry_after=0.5)
        started = time.monotonic()
        await client.get_partial_messageable(int(GENERAL)).send("after the wait")
        assert time.monotonic() - started >= 0.5  # discord.py read retry_after and waited
        assert [m["content"] for m in fake.sent(GENERAL)] == ["after the wait"]


async def test_interactions_are_answered_once_and_only_within_three_seconds(
    fake: FakeDiscord,
) -> None:
    async with connected(fake) as client:
        await asyncio.to_thread(fake.slash, GENERAL, PERSON, "help", "all")
        await until(lambda: client.interactions, 30)
        interaction = client.interactions[0]
        assert interaction.data is not None and interaction.data["name"] == "help"
        await interaction.response.defer()
        await interaction.followup.send("the answer")
        assert fake.sent(GENERAL)[-1]["content"] == "the answer"
        late = await asyncio.to_thread(fake.slash, GENERAL, PERSON, "help")
        await until(lambda: len(client.interactions) == 2, 30)
        path = "/interactions/{i}/{token}/callback"
        twice = Route("POST", path, i=interaction.id, token=interaction.token)
        with pytest.raises(discord.HTTPException) as answered:
            await client.http.request(twice, json={"type": 5})
        assert answered.value.code == 40060  # answered already
        fake.interaction_expiry_s = 0.0
        with pytest.raises(discord.NotFound):
            await client.interactions[1].response.defer()
        assert fake.responses(late) == []


async def test_bulk_overwrite_registers_commands_in_discords_spelling(fake: FakeDiscord) -> None:
    async with connected(fake) as client:
        app = client.application_id
        good: list[dict[str, Any]] = [{"name": "dream-log", "description": "the log", "type": 1}]
        await client.http.bulk_upsert_global_commands(app, good)  # type: ignore[arg-type]
        assert [c["name"] for c in fake.commands] == ["dream-log"]
        bad = [{"name": "Dream Log", "description": "x", "type": 1}]
        with pytest.raises(discord.HTTPException):
            await client.http.bulk_upsert_global_commands(app, bad)  # type: ignore[arg-type]
        nowhere = [{"name": "help", "description": "x", "type": 1, "contexts": [7]}]
        with pytest.raises(discord.HTTPException):
            await client.http.bulk_upsert_global_commands(app, nowhere)  # type: ignore[arg-type]


async def test_a_wrong_token_is_refused(fake: FakeDiscord) -> None:
    Route.BASE = fake.api_base
    client = Recorder(intents())
    with pytest.raises(discord.LoginFailure):
        await client.login("not-the-token")
    await client.close()

"""A group chat is the channel's word, never a chat id's shape: through the real gateway, the
line channel's rooms (ids like Matrix's `!team:x`) never see the owner's personal memory, in a
turn, after a restart that replays one from the inbox, in Dream, or when a schedule made there
fires; and a private chat whose id starts with `-` stays private."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

from nanomem.agent import SqliteInbox
from nanomem.audience import Sender
from nanomem.features.dream import Dreaming
from nanomem.home import Home
from nanomem.providers.scripted import ScriptedProvider, call, text
from tests.helpers import until
from tests.helpers.line_channel import LineChannel
from tests.helpers.line_people import (
    ROOM,
    app_for,
    asked,
    connect,
    hear_reply,
    personal,
    running,
    session_header,
)


async def test_a_room_never_sees_personal_memory_and_its_session_says_it_is_one(
    home: Home,
) -> None:
    provider = ScriptedProvider(latency=0.05)
    channel = LineChannel(owner="ada", stored=True)
    async for _ in running(app_for(home, provider), channel):
        ada_in_room = await connect(channel, "ada", f"ROOM {ROOM}")
        bea_in_room = await connect(channel, "bea", f"ROOM {ROOM}")
        await ada_in_room.say("room: what is my door code?")
        assert (await hear_reply(bea_in_room))["text"].endswith("what is my door code?")
        ada = await connect(channel, "ada")
        await ada.say("private: what is my door code?")
        await hear_reply(ada)
    assert not personal(asked(provider, "room: what is my door code?"))
    assert personal(asked(provider, "private: what is my door code?"))  # the same owner, alone
    assert session_header(home, f"line:{ROOM}")["room"] is True
    assert session_header(home, "line:1")["room"] is False  # not a guess: recorded


async def test_a_private_chat_whose_id_starts_with_a_dash_stays_private(home: Home) -> None:
    provider = ScriptedProvider(latency=0.05)
    channel = LineChannel(owner="ada")
    async for _ in running(app_for(home, provider), channel):
        ada = await connect(channel, "ada", "CHAT -7")
        await ada.say("what is my door code?")
        await hear_reply(ada)
    assert personal(asked(provider, "what is my door code?"))
    assert session_header(home, "line:-7")["room"] is False


async def test_a_room_turn_cut_by_a_stop_goes_on_in_the_room_after_the_restart(
    home: Home,
) -> None:
    slow = ScriptedProvider(latency=60.0)
    channel = LineChannel(owner="ada", stored=True)
    async for _ in running(app_for(home, slow, grace_s=0.2), channel):
        bea = await connect(channel, "bea", f"ROOM {ROOM}")
        await bea.say("cut short: the door code?")
        await until(lambda: slow.calls)  # its turn runs: the gateway stops under it
    provider = ScriptedProvider(latency=0.05)
    app = app_for(home, provider)
    async for _ in running(app, LineChannel(owner="ada", stored=True)):
        await until(lambda: app.bus.inbox is not None and app.bus.inbox.count() == 0)
    assert not personal(asked(provider, "cut short: the door code?"))


async def test_a_room_message_replayed_from_the_inbox_after_a_restart_stays_in_the_room(
    home: Home,
) -> None:
    # What an earlier run stored and did not answer: a room member's message, its row saying
    # the channel vouched a room (the restarted channel has no rooms in memory yet).
    inbox = SqliteInbox(home.inbox)
    bea = Sender("bea", "bea", can_answer=True, shared_room=True)
    inbox.add("line", [(ROOM, {"text": "replayed: the door code?", "name": "bea"}, bea)], None)
    inbox.close()
    provider = ScriptedProvider(latency=0.05)
    app = app_for(home, provider)
    async for _ in running(app, LineChannel(owner="ada", stored=True)):
        await until(lambda: any("replayed:" in json.dumps(c) for c in provider.calls))
        await until(lambda: app.bus.inbox is not None and app.bus.inbox.count() == 0)
    assert not personal(asked(provider, "replayed: the door code?"))
    assert session_header(home, f"line:{ROOM}")["room"] is True


async def test_dream_never_carries_a_rooms_history_into_personal_memory(home: Home) -> None:
    provider = ScriptedProvider(latency=0.05)  # echoes, but for the summaries of /new
    channel = LineChannel(owner="ada")
    app = app_for(home, provider)
    async for _ in running(app, channel):
        ada_in_room = await connect(channel, "ada", f"ROOM {ROOM}")
        await ada_in_room.say("the code word is ant")
        await hear_reply(ada_in_room)
        provider.add(text("- 2026-11-27: the team's code word is ant"))
        await ada_in_room.say("/new")
        assert "New session started" in (await ada_in_room.hear())["text"]
        ada = await connect(channel, "ada", "CHAT -7")
        await ada.say("I drink green tea")
        await hear_reply(ada)
        provider.add(text("- 2026-11-27: Ada drinks green tea"))
        await ada.say("/new")
        assert "New session started" in (await ada.hear())["text"]
    before = len(provider.calls)
    provider.add(text("NOTHING"))
    await app.feature(Dreaming).dream.run("cron")
    analysis = json.dumps(provider.calls[before])  # the one request Dream made
    assert "code word" not in analysis  # the room's entry was passed over
    assert "drinks green tea" in analysis  # a private chat's, though its id starts with `-`
    # Each entry carries its chat's stored word, which Dream read.
    entries = [json.loads(line) for line in app.history.path.read_text().splitlines()]
    assert [(e["session"], e.get("room")) for e in entries] == [
        (f"line:{ROOM}", True),
        ("line:-7", False),
    ]


async def test_a_schedule_made_in_a_room_fires_as_one(home: Home) -> None:
    soon = (datetime.now(UTC) + timedelta(seconds=3)).isoformat()
    provider = ScriptedProvider(
        [call("schedule", {"text": "tell the door code", "at": soon}), text("Scheduled.")],
        latency=0.05,
    )
    channel = LineChannel(owner="ada", stored=True)
    async for _ in running(app_for(home, provider), channel):
        ada_in_room = await connect(channel, "ada", f"ROOM {ROOM}")
        await ada_in_room.say("remind the team")
        assert (await hear_reply(ada_in_room))["text"] == "Scheduled."
        made = json.loads(home.schedules.read_text())["schedules"]
        fired = await hear_reply(ada_in_room)
        assert "tell the door code" in fired["text"]
    assert not personal(asked(provider, "tell the door code"))
    assert [s.get("room") for s in made] == [True]  # the word it fires by, stored with it

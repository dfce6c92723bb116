"""Reading Discord's raw events (channels/discord/incoming.py): who wrote, where, whether to
us, and the slash commands made of our command list."""

from __future__ import annotations

from typing import Any

import pytest

from channels.discord.incoming import (
    as_payload,
    fair_press,
    from_payload,
    is_allowed,
    read_interaction,
    read_message,
    sender_of,
    slash_commands,
)
from nanomem.agent import Command

BOT = "1100000000000000001"
PERSON = {"id": "200000000000000002", "username": "ana", "global_name": "Ana"}


def message(**more: Any) -> dict[str, Any]:
    return {"id": "900", "channel_id": "800", "author": PERSON, "content": "hi", "type": 0} | more


def test_a_dm_a_guild_message_and_a_history_message_say_where_they_are() -> None:
    dm = read_message(message(), BOT)
    assert dm is not None and not dm.guild and dm.chat == "800" and dm.name == "Ana (@ana)"
    in_guild = read_message(message(guild_id="700"), BOT)
    assert in_guild is not None and in_guild.guild
    from_history = read_message(message(), BOT, guild=True)  # history has no guild_id
    assert from_history is not None and from_history.guild
    assert sender_of(in_guild, owner=None).shared_room and not sender_of(dm, None).shared_room


def test_a_mention_or_a_reply_to_the_bot_addresses_it() -> None:
    named = read_message(message(mentions=[{"id": BOT}], content=f"<@{BOT}> hi"), BOT)
    assert named is not None and named.addressed
    quoted = read_message(message(referenced_message={"author": {"id": BOT}}), BOT)
    assert quoted is not None and quoted.addressed
    other = read_message(message(mentions=[{"id": "5"}]), BOT)
    assert other is not None and not other.addressed


@pytest.mark.parametrize(
    "data",
    [
        message(author={"id": BOT, "username": "nanomem"}),  # our own
        message(author=PERSON | {"bot": True}),
        message(webhook_id="5"),
        message(type=7),  # a join
        message(author="someone"),
        message(id="not a snowflake"),
        ["a", "list"],
    ],
)
def test_what_is_not_a_persons_message_is_not_read(data: Any) -> None:
    assert read_message(data, BOT) is None


def test_slash_commands_and_presses_read_as_the_text_they_send() -> None:
    slash = {
        "id": "1",
        "type": 2,
        "token": "t",
        "channel_id": "800",
        "guild_id": "700",
        "member": {"user": PERSON},
        "data": {"name": "dream-log", "options": [{"name": "text", "value": "7"}]},
    }
    found = read_interaction(slash)
    assert found is not None and found.kind == "command" and found.text == "/dream-log 7"
    assert found.guild and found.user == PERSON["id"] and found.token == "t"
    press = {
        "id": "2",
        "type": 3,
        "token": "t",
        "channel_id": "800",
        "user": PERSON,
        "message": {"id": "55"},
        "data": {"custom_id": "/shell-allow ab12"},
    }
    pressed = read_interaction(press)
    assert pressed is not None and pressed.kind == "press" and pressed.message_id == "55"
    assert fair_press(pressed) and not pressed.guild
    words = read_interaction(press | {"data": {"custom_id": "delete everything"}})
    assert words is not None and not fair_press(words)
    assert read_interaction(slash | {"data": {"name": "Not A Name"}}) is None
    assert read_interaction(slash | {"token": 5}) is None


def test_a_stored_message_reads_back_the_same_but_without_its_token() -> None:
    found = read_interaction(
        {
            "id": "1",
            "type": 2,
            "token": "secret",
            "channel_id": "800",
            "user": PERSON,
            "data": {"name": "help"},
        }
    )
    assert found is not None
    back = from_payload(as_payload(found))
    assert back.text == "/help" and back.interaction == "1" and back.token == ""
    assert "secret" not in str(as_payload(found))


def test_admission_is_the_owner_allow_from_or_everyone() -> None:
    assert is_allowed([], "1", owner="1")
    assert is_allowed(["2"], "2", owner=None) and not is_allowed(["2"], "3", owner="1")
    assert is_allowed(["*"], "3", owner=None)


def test_our_listed_commands_become_slash_commands_in_discords_spelling() -> None:
    commands = [
        Command("dream-log", "show Dream's log", None, usage="[<n>]"),
        Command("shell-allow", "buttons send it", None, listed=False),
        Command("Bad Name", "not a Discord name", None),
        Command("help", "x" * 300, None),
    ]
    made = slash_commands(commands)
    assert [c["name"] for c in made] == ["dream-log", "help"]
    assert made[0]["options"][0] == {
        "type": 3,
        "name": "text",
        "required": False,
        "description": "[<n>]",
    }
    assert len(made[1]["description"]) == 100
    # servers and the bot's DM, installed in a server: never offered in a group DM
    assert all(c["contexts"] == [0, 1] and c["integration_types"] == [0] for c in made)

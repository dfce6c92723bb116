"""The intake kit (nanomem/agent/intake_kit.py): the pieces every receiving channel shares."""

from __future__ import annotations

import asyncio
import re
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from nanomem.agent import (
    SLASH,
    InboundMessage,
    Mention,
    MessageBus,
    Received,
    Spelling,
    SqliteInbox,
    Strangers,
    addressed,
    receive_until_stored,
    too_big,
    vouched_again,
)
from nanomem.audience import Sender
from tests.conftest import log_lines

OURS = {"help", "dream", "dream-log", "dream-restore", "new"}
TELEGRAM = Spelling("/", underscores=True)
ELEMENT = Spelling("!")  # Element takes `/help` for itself: the command never reaches the bot
BOT = Mention.of_handle("nanomem_bot")


def test_our_text_names_commands_as_each_channel_s_person_types_them() -> None:
    said = "/help — list\n/dream — learn\n/dream-log [id] — show\n/dream-restore <id> undoes one."
    assert TELEGRAM.outbound(said, OURS) == (
        "/help — list\n/dream — learn\n/dream_log [id] — show\n/dream_restore <id> undoes one."
    )
    assert ELEMENT.outbound(said, OURS) == (
        "!help — list\n!dream — learn\n!dream-log [id] — show\n!dream-restore <id> undoes one."
    )
    assert SLASH.outbound(said, OURS) == said
    paths = "see /etc/dream-log and a/dream-log, /newer"
    assert TELEGRAM.outbound(paths, OURS) == ELEMENT.outbound(paths, OURS) == paths
    assert TELEGRAM.name("dream-log") == "dream_log" and ELEMENT.name("dream-log") == "dream-log"


def test_a_channel_s_command_spelling_reaches_the_core_as_ours() -> None:
    assert ELEMENT.inbound("!dream-log abc", OURS) == "/dream-log abc"
    assert ELEMENT.inbound("!important: read this", OURS) == "!important: read this"  # words
    assert ELEMENT.inbound("/help", OURS) == "/help"  # the core reads it as it is
    assert TELEGRAM.inbound("/dream_log", OURS) == "/dream_log"  # the core reads `_` as `-`
    assert TELEGRAM.command("/dream_log@nanomem_bot x") == ("dream-log", "nanomem_bot")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("@nanomem_bot what is 2+2?", "what is 2+2?"),
        ("hey @Nanomem_Bot, help", "hey , help"),
        ("@nanomem_bot", "@nanomem_bot"),  # nothing but the mention: keep it
        ("mail me at a@nanomem_bot.org", "mail me at a@nanomem_bot.org"),
        ("@nanomem_bot_two hi", "@nanomem_bot_two hi"),  # another bot
        ("line one\n@nanomem_bot line two", "line one\nline two"),
        ("@nanomem_bot run:\n    x  =  1", "run:\n    x  =  1"),  # code keeps its spaces
    ],
)
def test_the_mention_is_stripped(text: str, expected: str) -> None:
    assert BOT is not None and BOT.stripped(text) == expected


@pytest.mark.parametrize(
    ("text", "replied", "expected"),
    [
        ("@nanomem_bot hi", False, True),
        ("hi all", True, True),  # a reply to one of ours
        ("hi all", False, False),
        ("/help", False, True),  # one of our commands
        ("/dream_log", False, True),  # ... in the channel's spelling
        ("/weather", False, False),  # another bot's command
        ("/help@other_bot", False, False),  # ours by name, addressed to another bot
        ("/anything@nanomem_bot", False, True),  # addressed to us
    ],
)
def test_a_group_message_is_for_us_when_it_addresses_us(
    text: str, replied: bool, expected: bool
) -> None:
    found = addressed(text, mention=BOT, replied_to_us=replied, commands=OURS, spelling=TELEGRAM)
    assert found is expected


def test_a_room_with_a_mention_pattern_of_its_own() -> None:
    # A Matrix-like mention: the bot's user id or its display name, no command addressees.
    matrix = Mention(re.compile(r"@nanomem:example\.org|\bnanomem\b:?", re.IGNORECASE))
    assert addressed("nanomem: hello", mention=matrix, replied_to_us=False, commands=OURS)
    assert not addressed("nanomemory", mention=matrix, replied_to_us=False, commands=OURS)
    assert addressed("!help", mention=matrix, replied_to_us=False, commands=OURS, spelling=ELEMENT)
    assert matrix.stripped("nanomem: what time is it") == "what time is it"
    assert matrix.stripped("hey @nanomem:example.org what time") == "hey what time"


def test_a_file_over_the_limit_is_refused_before_anything_is_saved() -> None:
    mb = 2**20
    assert too_big([mb, None], 1, "matrix.max_file_mb") is None  # an unknown size: judged later
    refusal = too_big([mb // 2, 3 * mb // 2], 1, "matrix.max_file_mb")
    assert refusal == "That file is 1.5 MB; I accept up to 1 MB (matrix.max_file_mb)."


async def test_received_files_go_to_the_chat_s_folder_with_their_labels(tmp_path: Path) -> None:
    msg = InboundMessage("line", "!team:x", "look", Sender("bea", shared_room=True))
    received = Received(tmp_path, msg.session_key, room=True)
    await received.save("2026-11-27-a.jpg", b"jpeg", "photo")
    await received.save("2026-11-27-b.oga", b"ogg", "voice note", "note.oga", length_s=3.0)
    ready = received.into(msg, msg.content)
    assert ready.content == "[photo]\n[voice note: note.oga]\nlook"
    assert all(path.startswith("rooms/line__team_x/media/") for path in ready.media)
    assert ready.lengths == {ready.media[1]: 3.0}
    assert (tmp_path / ready.media[0]).read_bytes() == b"jpeg"
    alone = Received(tmp_path, "line:1", room=False)
    await alone.save("c.txt", b"x", "document", "c.txt")
    assert alone.media == ["media/c.txt"]


def test_a_stranger_is_logged_once_in_a_bounded_memory() -> None:
    strangers = Strangers("Line", "line.allow_from", limit=2)
    with log_lines("WARNING") as lines:
        for user in (7, 7, 8, 7, 9, 7):
            strangers.refuse(user, f"user{user}")
    assert lines == [
        "refused Line user 7 (user7); add it to line.allow_from",
        "refused Line user 8 (user8); add it to line.allow_from",
        "refused Line user 9 (user9); add it to line.allow_from",  # memory full: forgotten
        "refused Line user 7 (user7); add it to line.allow_from",
    ]


async def test_storing_is_retried_until_it_succeeds_and_nothing_is_dropped(tmp_path: Path) -> None:
    inbox = SqliteInbox(tmp_path / "inbox.db")
    bus = MessageBus(inbox=FullDisk(inbox))
    item = ("5", {"text": "hi"}, Sender("bea"))
    with log_lines("ERROR") as lines:
        seqs = await asyncio.wait_for(receive_until_stored(bus, "line", [item], "a line"), 10)
    assert seqs == [1] and [p.payload for p in inbox.pending("line")] == [{"text": "hi"}]
    said = [line.split("\n")[0] for line in lines]  # each with its traceback
    assert said == ["line: could not store a line; retrying"]


class FullDisk:
    """The inbox behind a disk that is full for the first write: the write fails as SQLite's
    does then, and the next one goes through."""

    def __init__(self, inbox: SqliteInbox) -> None:
        self.inbox, self.full = inbox, True

    def add(self, *args: Any) -> list[int]:
        if self.full:
            self.full = False
            raise sqlite3.OperationalError("database or disk is full")
        return self.inbox.add(*args)


async def test_a_replayed_message_keeps_the_word_it_was_stored_with(tmp_path: Path) -> None:
    bus = MessageBus(inbox=SqliteInbox(tmp_path / "inbox.db"))
    room = Sender("bea", shared_room=True)
    await bus.receive("line", [("5", {"name": "bea"}, room)], None)
    await bus.receive("line", [("6", {"name": "eve"}, Sender("eve"))], None)
    kept, gone = await bus.unfinished("line")
    today = Sender("bea", shared_room=False)  # what the payload reads as now: not the word
    assert await vouched_again(bus, kept, today) == room
    assert await vouched_again(bus, gone, None) is None  # no longer admitted: forgotten
    assert [p.seq for p in await asyncio.to_thread(bus.inbox.pending, "line")] == [kept.seq]

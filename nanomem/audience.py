"""Who a turn speaks to: the owner in a personal chat, or a shared room (a group chat).

A group chat is a shared room, by its channel's word alone (`Sender.shared_room`, vouched at
receipt and stored with the inbox row, the session, history entries and schedules; never a guess
from a chat id's shape): its prompt, its tools and Dream never bring the owner's personal
memory (USER.md, memory/MEMORY.md, other chats' history) into it, unless
`memory.groups_see_personal` says otherwise. The turn hands its audience to every tool call
and feature hook explicitly (nanomem/tools/context.py), never through ambient state.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

# Paths inside the workspace that hold the owner's personal memory.
PERSONAL_PATHS = ("USER.md", "memory")
# Paths whose files enter a system prompt (identity, memory, instructions, skills, prompt
# templates): never written from a shared room, or one member's words would persist as rules.
PROMPT_PATHS = ("SOUL.md", "AGENTS.md", "USER.md", "memory", "skills", "templates")
# Each shared room's own folder (its media, its notes) lives under this workspace folder.
ROOMS_DIR = "rooms"
_UNSAFE_IN_NAME = re.compile(r"[^A-Za-z0-9_.-]")


@dataclass(frozen=True)
class Sender:
    """Who sent a message, as its channel vouches from its own facts (a Telegram user id, the
    terminal's person, an API key): the core trusts these fields and nothing in the text."""

    id: str = ""
    name: str = ""  # shown to the model in a shared room, so it can tell members apart
    is_owner: bool = False  # approvals and memory decisions are the owner's alone
    can_answer: bool = False  # present to answer a question now (not a request or a one-shot)
    shared_room: bool = False  # speaks in a group chat, which never sees personal memory


@dataclass(frozen=True)
class Audience:
    session: str  # the session key, `channel:chat`
    personal: bool  # may see the owner's personal memory
    room: bool = False  # a shared room, by its channel's word


def legacy_room(session: str) -> bool:
    """Whether a record written before the channel's word was stored (a session, a history
    entry, a schedule, a background task with no `room`) came from a group: then every
    channel gave groups a chat id starting with `-` (Telegram's convention), so such a record
    is read by that rule once, and an old group never turns personal after the upgrade.
    Nothing written since is decided by a chat id's shape."""
    _, _, chat = session.partition(":")
    return chat.startswith("-")


def owner_alone(sender: Sender) -> bool:
    """The owner, in a chat of their own: who may see the home's own details (its totals,
    the model's address, its log's path)."""
    return sender.is_owner and not sender.shared_room


def room_folder(workspace: Path, session: str, room: bool) -> Path | None:
    """A shared room's own folder (`rooms/telegram_-100123`); None for a personal chat."""
    if not room:
        return None
    return workspace / ROOMS_DIR / _UNSAFE_IN_NAME.sub("_", session)


def media_folder(workspace: Path, session: str, room: bool) -> Path:
    """Where a chat's files are saved (what it sends, images a tool returned): a group's own
    folder (the only one its turns may open, and no other chat's files are there), else the
    workspace's `media/`."""
    return (room_folder(workspace, session, room) or workspace) / "media"


def audience_of(session: str, room: bool, groups_see_personal: bool = False) -> Audience:
    """A chat's audience; `room` is its channel's word (Sender.shared_room, as stored)."""
    return Audience(session, groups_see_personal or not room, room)

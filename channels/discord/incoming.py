"""What an incoming Discord event is, read from its raw JSON (the gateway's MESSAGE_CREATE and
INTERACTION_CREATE, or a message from the channel's history): free of discord.py, so that
what the inbox stores reads back the same way after a restart."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal

from nanomem.agent import Command, parse_command
from nanomem.audience import Sender
from nanomem.text.utf8 import clean_text

Kind = Literal["message", "command", "press"]
COMMAND, PRESS = 2, 3  # interaction types: an application (slash) command, a button
_MESSAGE_TYPES = (0, 19)  # a message, and a reply: joins, pins and the like are not for us
_NAME = re.compile(r"[-_a-z0-9]{1,32}")  # Discord's spelling of a command's name
_MAX_FILES = 10  # Discord's own limit per message
TEXT_OPTION = "text"  # each slash command's one optional option: what follows its name
_PRIVATE_CHANNEL, _GROUP_DM = 2, 3  # an interaction's context; a channel's type
KEPT_CHARS = 8000  # of a message's text, what the inbox keeps (Discord allows 4000)


@dataclass(frozen=True)
class Attachment:
    url: str
    name: str
    size: int


@dataclass(frozen=True)
class Incoming:
    """A message, slash command or button press we may answer: who, where, what."""

    kind: Kind
    chat: str  # the channel id: a DM, a guild channel or a thread (its own session)
    user: str
    name: str
    text: str
    guild: bool  # in a guild (a channel or a thread): a shared room, from Discord's own fact
    message_id: str = ""  # the person's message; for a press, the message with the buttons
    interaction: str = ""
    token: str = ""  # the interaction's, for its answer (valid 15 minutes)
    addressed: bool = False  # mentions the bot or replies to it (Discord's own facts)
    attachments: tuple[Attachment, ...] = ()
    at: float = 0.0  # when an interaction came (monotonic): its token lives 15 minutes


def read_message(data: Any, bot_id: str, guild: bool | None = None) -> Incoming | None:
    """A person's message (None for a bot's, a webhook's, or a system message). `guild` from
    the channel when the message itself does not say (history has no guild_id)."""
    if not isinstance(data, dict) or data.get("type", 0) not in _MESSAGE_TYPES:
        return None
    author = data.get("author")
    if not isinstance(author, dict) or author.get("bot") or data.get("webhook_id"):
        return None
    user, chat, message_id = _id(author.get("id")), _id(data.get("channel_id")), _id(data.get("id"))
    if not (user and chat and message_id) or user == bot_id:
        return None
    mentions = data.get("mentions")
    named = isinstance(mentions, list) and any(
        isinstance(m, dict) and _id(m.get("id")) == bot_id for m in mentions
    )
    quoted = data.get("referenced_message")
    quoted_author = quoted.get("author") if isinstance(quoted, dict) else None
    replied = isinstance(quoted_author, dict) and _id(quoted_author.get("id")) == bot_id
    text = clean_text(str(data.get("content") or "")[:KEPT_CHARS])
    in_guild = guild if guild is not None else _id(data.get("guild_id")) != ""
    return Incoming(
        "message",
        chat,
        user,
        _name(author),
        text,
        in_guild,
        message_id,
        addressed=named or replied,
        attachments=_attachments(data.get("attachments")),
    )


def read_interaction(data: Any) -> Incoming | None:
    """A slash command (its text as typed: `/name words`) or a button press (its custom_id,
    the command it sends); None for any other interaction."""
    if not isinstance(data, dict) or data.get("type") not in (COMMAND, PRESS):
        return None
    member = data.get("member")
    person = member.get("user") if isinstance(member, dict) else data.get("user")
    body = data.get("data")
    if not isinstance(person, dict) or not isinstance(body, dict):
        return None
    user, chat = _id(person.get("id")), _id(data.get("channel_id"))
    interaction, token = _id(data.get("id")), data.get("token")
    if not (user and chat and interaction) or not isinstance(token, str):
        return None
    guild = _shared_place(data)
    if data["type"] == PRESS:
        message = data.get("message")
        message_id = _id(message.get("id")) if isinstance(message, dict) else ""
        text = clean_text(str(body.get("custom_id") or "")[:100])
        return Incoming(
            "press", chat, user, _name(person), text, guild, message_id, interaction, token
        )
    name = str(body.get("name") or "")
    if not _NAME.fullmatch(name):
        return None
    said = [o.get("value") for o in body.get("options") or [] if isinstance(o, dict)]
    words = " ".join(str(v) for v in said if isinstance(v, str | int | float))
    text = clean_text(f"/{name} {words[:KEPT_CHARS]}".strip())
    return Incoming("command", chat, user, _name(person), text, guild, "", interaction, token)


def _shared_place(data: dict[str, Any]) -> bool:
    """Whether an interaction comes from where others read its answer: a guild, or, for an app
    its person installed on their account, a group DM or their DM with someone else (no
    guild_id there, but `context` 2, PRIVATE_CHANNEL; or a GROUP_DM channel)."""
    channel = data.get("channel")
    group_dm = isinstance(channel, dict) and channel.get("type") == _GROUP_DM
    return _id(data.get("guild_id")) != "" or data.get("context") == _PRIVATE_CHANNEL or group_dm


def fair_press(incoming: Incoming) -> bool:
    """A press sends its button's command: data that is not a command came from no button of
    ours (it would reach the model as the presser's words)."""
    return incoming.kind != "press" or parse_command(incoming.text) is not None


def is_allowed(allow_from: list[str], user: str, owner: str | None) -> bool:
    """The owner always; the user ids in discord.allow_from; everyone with "*"."""
    return user == owner or "*" in allow_from or user in allow_from


def sender_of(incoming: Incoming, owner: str | None) -> Sender:
    """From Discord's facts: the author's id, and whether it speaks in a guild (a channel or a
    thread is a shared room); a person is there to answer a question."""
    return Sender(
        incoming.user,
        incoming.name,
        is_owner=incoming.user == owner,
        can_answer=True,
        shared_room=incoming.guild,
    )


def slash_commands(commands: list[Command]) -> list[dict[str, Any]]:
    """Our listed commands as Discord's application commands (bulk overwrite): the same
    names, which Discord spells as we do (lower case, hyphens), each taking one optional text."""
    registered = []
    for command in commands:
        if not command.listed or not _NAME.fullmatch(command.name):
            continue
        about = (command.summary or command.name)[:100]
        option = {
            "type": 3,
            "name": TEXT_OPTION,
            "required": False,
            "description": (command.usage or "what follows the command")[:100],
        }
        registered.append(
            {"name": command.name, "description": about, "type": 1, "options": [option]}
        )
    return registered[:100]  # Discord's limit of global commands


def as_payload(incoming: Incoming) -> dict[str, Any]:
    """What the inbox keeps: enough to answer it again after a restart."""
    files = [{"url": a.url, "name": a.name, "size": a.size} for a in incoming.attachments]
    return {
        "v": 1,
        "kind": incoming.kind,
        "chat": incoming.chat,
        "user": incoming.user,
        "name": incoming.name,
        "text": incoming.text,
        "guild": incoming.guild,
        "message_id": incoming.message_id,
        "interaction": incoming.interaction,
        "addressed": incoming.addressed,
        "files": files,
    }


def from_payload(payload: dict[str, Any]) -> Incoming:
    """A stored message read back (the interaction's token is not kept: it is stale by then,
    and the answer goes to the channel)."""
    files = tuple(
        Attachment(str(f["url"]), str(f["name"]), int(f["size"])) for f in payload.get("files", [])
    )
    return Incoming(
        payload["kind"],
        str(payload["chat"]),
        str(payload["user"]),
        str(payload["name"]),
        str(payload["text"]),
        bool(payload["guild"]),
        str(payload.get("message_id", "")),
        str(payload.get("interaction", "")),
        "",
        bool(payload.get("addressed")),
        files,
    )


def _attachments(found: Any) -> tuple[Attachment, ...]:
    if not isinstance(found, list):
        return ()
    kept = []
    for item in found[:_MAX_FILES]:
        if not isinstance(item, dict) or not isinstance(item.get("url"), str):
            continue
        size = item.get("size")
        size = size if isinstance(size, int) and not isinstance(size, bool) and size >= 0 else 0
        name = clean_text(str(item.get("filename") or "file"))[:200]
        kept.append(Attachment(item["url"], name, size))
    return tuple(kept)


def _id(value: Any) -> str:
    """A snowflake as Discord sends it (a string of digits), or "" for anything else."""
    text = str(value) if isinstance(value, str | int) and not isinstance(value, bool) else ""
    return text if text.isdigit() and len(text) <= 25 else ""


def _name(user: dict[str, Any]) -> str:
    shown = user.get("global_name") or user.get("username") or ""
    handle = user.get("username") or ""
    name = clean_text(str(shown))[:100]
    return f"{name} (@{handle})" if handle and handle != shown else name

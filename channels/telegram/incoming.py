"""What an incoming Telegram message is, free of python-telegram-bot (duck-typed on its
objects): which chat it belongs to, whether a group message is addressed to us, its file."""

from __future__ import annotations

import io
import re
import warnings
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from loguru import logger

from nanomem.agent import (
    Mention,
    MessageBus,
    Received,
    Spelling,
    addressed,
    parse_command,
    record_failure,
    too_big,
)
from nanomem.audience import Sender

GREETING = "Hi {name}! Write to me and I will answer. /help lists the commands."
MAX_FILE_SETTING = "telegram.max_file_mb"
# Telegram's menu allows no hyphen: /dream_log for /dream-log (both are read as ours).
SPELLING = Spelling("/", underscores=True)
NO_DOWNLOAD = "I could not download that file; please send it again."
UNSUPPORTED = "I can read text, photos, documents, voice notes and audio, not this kind of message."
REFUSED_PRESS = "Only the people this bot serves can use its buttons."
UNREADABLE_KEPT = 4096  # of an update that cannot be read: what the inbox keeps of it
_SUFFIX = re.compile(r"\.[a-z0-9]{1,8}")


@dataclass(frozen=True)
class Incoming:
    """An update we answer: its message, sender, chat key, and place in the inbox (the
    messages and user are python-telegram-bot's)."""

    message: Any
    user: Any
    key: str
    group: bool
    sender: Sender
    seq: int | None = None
    replayed: bool = False
    retry: bool = False  # its handling failed before: tried again, nobody is kept waiting
    press: str | None = None  # a button press: the command it sends
    press_id: str = ""  # ... and the callback query to answer
    rest: tuple[Any, ...] = ()  # an album's other parts' messages, in order

    @property
    def parts(self) -> tuple[Any, ...]:
        return (self.message, *self.rest)


def chat_key(message: Any) -> str:
    """`<chat_id>`, or `<chat_id>:<thread_id>` in a forum topic."""
    if message.is_topic_message and message.message_thread_id:
        return f"{message.chat_id}:{message.message_thread_id}"
    return str(message.chat_id)


def is_addressed(message: Any, bot: Any, our_commands: set[str]) -> bool:
    """In a group: a reply to the bot, an @mention of it, or one of our commands."""
    reply = message.reply_to_message
    to_us = reply is not None and reply.from_user is not None and reply.from_user.id == bot.id
    text = message.text or message.caption or ""
    mention = Mention.of_handle(bot.username or "")
    return addressed(
        text, mention=mention, replied_to_us=to_us, commands=our_commands, spelling=SPELLING
    )


def fair_press(data: str | None, presser: int, message: Any) -> bool:
    """A press is its presser typing a command: in a private chat only that chat's person can
    press (a press naming someone else's chat is forged), and data that is not a command was
    made by no button of ours (it would reach the model as their words)."""
    private = message.chat.type == "private"
    if (private and presser != message.chat_id) or parse_command(data or "") is None:
        logger.warning(
            "telegram: refused a forged button press by user {} (chat {})",
            presser,
            message.chat_id,
        )
        return False
    return True


def attachment(message: Any) -> tuple[str, Any, str, str] | None:
    """(what it is, the Telegram file object, file suffix, original name) of a message's file.
    The suffix says whose words a recording is (features/voice is_own_voice): `.oga` and
    `.note.mp4` only for a voice or video note the person recorded; one they forwarded, and a
    file of any name, are saved as someone else's (`.ogg`, `.fwd.mp4`: still transcribed)."""
    if message.photo:
        return "photo", message.photo[-1], ".jpg", ""
    forwarded = message.forward_origin is not None
    ahead = "forwarded " if forwarded else ""
    for kind, media, default in (
        ("document", message.document, ""),
        (f"{ahead}voice note", message.voice, ".ogg" if forwarded else ".oga"),
        ("audio", message.audio, ".mp3"),
        ("video", message.video, ".mp4"),
        # Its sound is transcribed, a video's not (features/voice VIDEO_NOTE_ENDING).
        (f"{ahead}video note", message.video_note, ".fwd.mp4" if forwarded else ".note.mp4"),
    ):
        if media is not None:
            name = getattr(media, "file_name", None) or ""
            suffix = Path(name).suffix.lower()
            suffix = ".ogg" if suffix == ".oga" else suffix  # a name never makes it their voice
            return kind, media, suffix if _SUFFIX.fullmatch(suffix) else default, name
    return None


def told_length(item: Any) -> float | None:
    """How long Telegram says a voice note, audio, video or video note plays (`duration`, in
    seconds); None for a file without one."""
    with warnings.catch_warnings():  # PTB warns that duration becomes a timedelta
        warnings.simplefilter("ignore")
        told = getattr(item, "duration", None)
    seconds = told.total_seconds() if isinstance(told, timedelta) else told
    if isinstance(seconds, int | float) and not isinstance(seconds, bool) and seconds > 0:
        return float(seconds)
    return None


def oversized(files: list[tuple[str, Any, str, str]], max_mb: int) -> str | None:
    """The note refusing a message whose file (any of an album's) is above telegram.max_file_mb."""
    return too_big((item.file_size or 0 for _, item, _, _ in files), max_mb, MAX_FILE_SETTING)


async def download(received: Received, kind: str, item: Any, suffix: str, file_name: str) -> str:
    """Saved (Received.save: under a fresh temporary name, renamed into place, in the chat's
    media folder as reached without following links) as `<date>-<Telegram's id><suffix>`."""
    name = f"{datetime.now():%Y-%m-%d}-{item.file_unique_id}{suffix}"
    data = io.BytesIO()  # python-telegram-bot holds the whole file in memory either way
    await (await item.get_file()).download_to_memory(data)
    return await received.save(name, data.getvalue(), kind, file_name, told_length(item))


def as_payload(item: Any) -> dict[str, Any]:
    """What the inbox keeps of an update that cannot be read: itself, if it is an object."""
    return item if isinstance(item, dict) else {"item": repr(item)[:UNREADABLE_KEPT]}


def next_offset(items: list[Any], offset: int | None) -> int | None:
    """The getUpdates offset that confirms these updates (the last one's id + 1)."""
    ids = [i["update_id"] for i in items if isinstance(i, dict) and type(i.get("update_id")) is int]
    return max(ids) + 1 if ids else offset


def unknown_chat(payload: dict[str, Any]) -> str:
    """The chat an update that cannot be read names, as far as it can be told."""
    message = payload.get("message")
    chat = message.get("chat") if isinstance(message, dict) else None
    chat_id = chat.get("id") if isinstance(chat, dict) else None
    return str(chat_id) if isinstance(chat_id, int) and not isinstance(chat_id, bool) else "unknown"


async def park_unreadable(
    bus: MessageBus, seq: int, payload: dict[str, Any], exc: Exception, channel: str
) -> None:
    """An update python-telegram-bot cannot read, stored: parked at once (reading it again
    would fail the same way) for the owner to see in `nanomem inbox`."""
    update_id = payload.get("update_id")
    logger.info("telegram: update {} cannot be read: {}: {}", update_id, type(exc).__name__,
                str(exc)[:200])  # fmt: skip
    text = f"update {update_id} that could not be read"
    await record_failure(bus, seq, exc, text, f"{channel}:{unknown_chat(payload)}", park=True)


def stored_text(payload: dict[str, Any]) -> str:
    """A stored update's text, as far as it can be found without reading the update (an
    album's: its first part's)."""
    album = payload.get("album")
    if isinstance(album, list) and album and isinstance(album[0], dict):
        payload = album[0]
    message = payload.get("message")
    text = message.get("text") or message.get("caption") if isinstance(message, dict) else ""
    return text if isinstance(text, str) else ""

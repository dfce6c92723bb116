"""What an incoming Telegram message is, free of python-telegram-bot (duck-typed on its
objects): which chat it belongs to, whether a group message is addressed to us, its file."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from channels.telegram.delivery import mentions

GREETING = "Hi {name}! Write to me and I will answer. /help lists the commands."
TOO_BIG = "That file is {size:.1f} MB; I accept up to {limit} MB (telegram.max_file_mb)."
NO_DOWNLOAD = "I could not download that file; please send it again."
UNSUPPORTED = "I can read text, photos, documents, voice notes and audio, not this kind of message."
REFUSED_PRESS = "Only the people this bot serves can use its buttons."
_SUFFIX = re.compile(r"\.[a-z0-9]{1,8}")
_COMMAND = re.compile(r"/([A-Za-z0-9_-]+)(?:@(\w+))?")


def chat_key(message: Any) -> str:
    """`<chat_id>`, or `<chat_id>:<thread_id>` in a forum topic."""
    if message.is_topic_message and message.message_thread_id:
        return f"{message.chat_id}:{message.message_thread_id}"
    return str(message.chat_id)


def is_addressed(message: Any, bot: Any, our_commands: set[str]) -> bool:
    """In a group: a reply to the bot, an @mention of it, or one of our commands."""
    reply = message.reply_to_message
    if reply is not None and reply.from_user is not None and reply.from_user.id == bot.id:
        return True
    text, username = message.text or message.caption or "", (bot.username or "").lower()
    if mentions(text, username):
        return True
    if (command := _COMMAND.match(text)) is None:
        return False
    name, addressee = command.group(1).lower(), (command.group(2) or "").lower()
    return addressee == username or (not addressee and name.replace("_", "-") in our_commands)


def attachment(message: Any) -> tuple[str, Any, str, str] | None:
    """(what it is, the Telegram file object, file suffix, original name) of a message's file."""
    if message.photo:
        return "photo", message.photo[-1], ".jpg", ""
    for kind, media, default in (
        ("document", message.document, ""),
        ("voice note", message.voice, ".oga"),
        ("audio", message.audio, ".mp3"),
        ("video", message.video, ".mp4"),
        # Saved so (features/voice VIDEO_NOTE_ENDING): its sound is transcribed, a video's not.
        ("video note", message.video_note, ".note.mp4"),
    ):
        if media is not None:
            name = getattr(media, "file_name", None) or ""
            suffix = Path(name).suffix.lower()
            return kind, media, suffix if _SUFFIX.fullmatch(suffix) else default, name
    return None


def stored_text(payload: dict[str, Any]) -> str:
    """A stored update's text, as far as it can be found without reading the update."""
    message = payload.get("message")
    text = message.get("text") or message.get("caption") if isinstance(message, dict) else ""
    return text if isinstance(text, str) else ""

"""Files to a Telegram chat: sendPhoto, sendVoice, sendAudio or sendDocument by the file's
type, with its caption in the chat's markup (Telegram's 1024 at most)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import PurePosixPath
from typing import TYPE_CHECKING

from loguru import logger

from channels.telegram.bot_api import FileKind, SendError
from channels.telegram.format import (
    html_to_plain,
    markdown_to_html,
    utf16_length,
    visible_length,
)
from nanomem.agent import DeliveryLater, File, FileGone, file_bytes

if TYPE_CHECKING:
    from channels.telegram.delivery import Delivery

# How a file goes, by its suffix (Telegram shows each kind its own way); anything else, and
# an image too big for sendPhoto (10 MB), as a document.
PHOTO_SUFFIXES = frozenset({".jpg", ".jpeg", ".png", ".webp"})
VOICE_SUFFIXES = frozenset({".ogg", ".oga", ".opus"})
AUDIO_SUFFIXES = frozenset({".mp3", ".m4a", ".wav", ".flac"})
MAX_PHOTO_BYTES = 10 * 1000 * 1000
CAPTION_LIMIT = 1024  # UTF-16 code units, as Telegram counts


def file_kind(name: str, size: int) -> FileKind:
    suffix = PurePosixPath(name).suffix.lower()
    if suffix in PHOTO_SUFFIXES and size <= MAX_PHOTO_BYTES:
        return "photo"
    if suffix in VOICE_SUFFIXES:
        return "voice"
    return "audio" if suffix in AUDIO_SUFFIXES else "document"


def caption_of(markdown: str) -> tuple[str, bool]:
    """(caption, is_html): the Markdown rendered when that fits Telegram's 1024, else the
    words as plain text, cut to fit."""
    rendered = markdown_to_html(markdown).strip()
    if visible_length(rendered) <= CAPTION_LIMIT:
        return rendered, True
    plain = html_to_plain(rendered)[: CAPTION_LIMIT - 1]
    while utf16_length(plain) > CAPTION_LIMIT - 1:  # an emoji beyond the BMP counts twice
        plain = plain[:-1]
    return plain + "…", False


async def send_file(delivery: Delivery, key: str, part: File, *, kept: bool = False) -> None:
    """A file for the chat while its turn goes on, sent by its kind; a photo Telegram refuses
    (its size or shape) goes again as a document. Tells the chat when it cannot be sent at
    all, and when it cannot be sent now unless it is `kept` (an answer in the inbox, sent
    again at the next start): only then does it raise DeliveryLater. A file from `send_file`
    or a spoken reply is in no inbox: raising would drop it unseen."""
    name = PurePosixPath(part.path).name
    try:  # off the loop: up to 50 MB
        data = await asyncio.to_thread(file_bytes, delivery.workspace, part.path)
    except FileGone as exc:
        logger.warning("telegram: the file for chat {} could not be read: {}", key, exc)
        return await delivery.tell(key, f"The file {name} could not be sent: {exc}")
    kind = file_kind(name, len(data))
    text, html = caption_of(part.caption) if part.caption else ("", False)
    try:
        try:
            await _upload(delivery, key, kind, name, data, text, html)
        except SendError as exc:
            if kind != "photo" or exc.transient or exc.retry_after is not None:
                raise
            logger.warning(
                "telegram: {} refused as a photo in {} ({}); sent as a document", name, key, exc
            )
            await _upload(delivery, key, "document", name, data, text, html)
    except SendError as exc:
        logger.error("telegram: gave up sending the file {} to chat {}: {}", name, key, exc)
        if not (exc.transient or exc.retry_after is not None):
            return await delivery.tell(key, f"The file {name} could not be sent: {exc}")
        if kept:
            raise DeliveryLater(str(exc)) from exc
        await delivery.tell(key, f"The file {name} could not be sent now: {exc}")


async def _upload(
    delivery: Delivery, key: str, kind: FileKind, name: str, data: bytes, caption: str, html: bool
) -> None:
    def attempt(body: str, as_html: bool) -> Callable[[], Awaitable[int]]:
        return lambda: delivery.port.send_file(key, kind, name, data, caption=body, html=as_html)

    await delivery.html_or_plain(key, attempt, caption, html)

"""The Bot API as delivery sees it: the calls it makes and their errors.

Free of python-telegram-bot: `channels/telegram/channel.py` implements the port, tests fake it.
"""

from __future__ import annotations

from typing import Literal, Protocol

from nanomem.agent import Button

FileKind = Literal["photo", "voice", "audio", "document"]


class SendError(Exception):
    """The Bot API refused a call: a flood limit (`retry_after`), a network fault or 5xx
    (`transient`), HTML it cannot parse (`bad_html`), a method the server does not know
    (`unsupported`), or anything else (final)."""

    def __init__(
        self,
        text: str,
        *,
        retry_after: float | None = None,
        transient: bool = False,
        bad_html: bool = False,
        unsupported: bool = False,
    ) -> None:
        super().__init__(text)
        self.retry_after, self.transient, self.bad_html = retry_after, transient, bad_html
        self.unsupported = unsupported

    @property
    def not_modified(self) -> bool:
        """An edit to the text the message already shows: nothing to do."""
        return "not modified" in str(self).lower()


class BotPort(Protocol):
    """The Bot API calls delivery needs; they raise SendError."""

    async def send_text(
        self,
        key: str,
        text: str,
        *,
        html: bool,
        reply_to: int | None = None,
        quiet: bool = False,
        buttons: tuple[Button, ...] = (),
    ) -> int:
        """Send to a chat (or forum topic) key, with inline buttons if any; the message's id."""

    async def edit_text(
        self, key: str, message_id: int, text: str, *, html: bool = False
    ) -> None: ...

    async def delete(self, key: str, message_id: int) -> None: ...

    async def send_draft(self, key: str, draft_id: int, text: str, *, html: bool) -> None:
        """Show (or update) a draft of a message being written, in a private chat."""

    async def typing(self, key: str) -> None: ...

    async def send_file(
        self, key: str, kind: FileKind, name: str, data: bytes, *, caption: str, html: bool
    ) -> int:
        """sendPhoto, sendVoice, sendAudio or sendDocument by `kind`; the message's id."""

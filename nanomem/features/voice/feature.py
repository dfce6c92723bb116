"""Voice as a feature: a message's recordings become the person's words (transcribed once, when
the message is saved), and with voice.reply = "to_voice" a voice note is answered with a voice
note too, after the text."""

from __future__ import annotations

import asyncio
import re
import secrets
from collections.abc import Set
from datetime import datetime
from pathlib import Path, PurePath
from typing import TYPE_CHECKING, Any

from loguru import logger

from nanomem.agent import (
    Core,
    Feature,
    File,
    MediaText,
    OutboundMessage,
    Reach,
    Unreadable,
    plain_text,
    save_media,
)
from nanomem.config import VoiceSettings
from nanomem.features.voice.audio import VIDEO_NOTE_ENDING, clock, is_own_voice, is_spoken
from nanomem.features.voice.client import MAX_UPLOAD_BYTES, AudioClient, VoiceError
from nanomem.features.voice.endpoint import DISABLED, TURN_ON, audio_endpoint
from nanomem.features.voice.length import BrokenOgg, recording_seconds
from nanomem.tools import ToolContext, ToolError, read_checked, untrusted

if TYPE_CHECKING:
    from nanomem.agent import InboundMessage, MessageBus, Templates
    from nanomem.memory import Session

HINT = "voice_heard.md.j2"  # after a transcript of the person's voice, when there is no echo
HEARD_CHARS = 200  # the "heard: ..." line shows this much of a transcript
GENEROUS_BYTES_PER_S = 16_000  # 128 kbit/s: unknown_length_bytes
LASTING_KEPT = "It is kept in the chat's media folder."  # said when a retry cannot help
# The mark a transcript of the person's own voice starts with (see `transcribed`).
SPOKEN = re.compile(r"^\[(?:voice|video) note(?:, [\d:]+)?\] ", re.MULTILINE)


class Voice(Feature):
    name = "voice"

    def __init__(
        self,
        settings: VoiceSettings,
        client: AudioClient | None,
        workspace: Path,
        bus: MessageBus,
        templates: Templates,
    ) -> None:
        self.settings, self.client, self.workspace, self.bus = settings, client, workspace, bus
        self.templates = templates
        self.pushing: Set[str] = frozenset()  # where a spoken reply may go (start)

    async def start(self, reach: Reach) -> None:
        self.pushing = reach.pushing

    async def read_media(self, msg: InboundMessage) -> MediaText | None:
        spoken = [relative for relative in msg.media if is_spoken(relative)]
        if not spoken:
            return None
        if self.client is None:
            raise Unreadable(TURN_ON if self.settings.enabled else DISABLED)
        # All of an album held to the limits before any is sent; each is read again when its
        # turn comes rather than kept, so an album of audio files is never all in memory.
        for relative in spoken:
            await self._checked(relative, msg.lengths.get(relative))
        texts, heard = [], []
        for relative in spoken:
            data, seconds = await self._checked(relative, msg.lengths.get(relative))
            text = await self._transcribe(self.client, relative, data)
            texts.append(transcribed(relative, text, seconds))
            heard.append(text if len(text) <= HEARD_CHARS else text[: HEARD_CHARS - 1] + "…")
        if self.settings.echo:  # the person sees what was heard: nothing to ask of the model
            preface = "\n".join(f"heard: {line}" for line in heard)
            return MediaText("\n\n".join(texts), preface)
        if any(is_own_voice(relative) for relative in spoken):
            texts.append(self.templates.render(HINT).strip())
        return MediaText("\n\n".join(texts))

    async def _checked(self, relative: str, told: float | None) -> tuple[bytes, float | None]:
        """A recording's bytes, and how long it plays when that can be told, once they are
        within voice.max_minutes and the upload limit; Unreadable for good otherwise. `told`:
        the length its channel was told, which only ever makes it longer."""
        root = self.workspace.resolve()
        try:  # as the tools read it: no link a group's shell planted is followed
            data = await asyncio.to_thread(
                read_checked, root, root / relative, relative, MAX_UPLOAD_BYTES + 1
            )
        except ToolError as exc:
            raise Unreadable(f"I could not read that recording ({exc}).") from None
        if len(data) > MAX_UPLOAD_BYTES:  # for good: a /retry would be refused the same way
            raise Unreadable(
                f"That recording is over {MAX_UPLOAD_BYTES // 2**20} MB, more than transcription "
                f"takes, so I cannot transcribe it. {LASTING_KEPT}"
            )
        limit = self.settings.max_minutes
        try:  # bounded: the walk stops soon after the limit, and the file is at most 25 MB
            own = await asyncio.to_thread(recording_seconds, data, stop_s=limit * 60)
        except BrokenOgg as exc:
            raise Unreadable(
                f"That recording is not a whole Ogg file ({exc}), so how long it plays cannot "
                f"be told and I do not transcribe it. {LASTING_KEPT}"
            ) from None
        if not data or own == 0:  # no bytes, or only an Ogg's headers or a WAV's
            raise Unreadable(
                "That recording is empty: there is no sound in it to transcribe. Please record "
                "it again."
            )
        seconds = max((s for s in (own, told) if s is not None), default=None)
        if seconds is not None and seconds > limit * 60:
            raise Unreadable(
                f"That recording is longer than {limit:g} minutes, the most I transcribe "
                f"(voice.max_minutes). {LASTING_KEPT}"
            )
        if own is None and len(data) > unknown_length_bytes(limit):
            raise Unreadable(
                f"How long that recording plays cannot be read from it, and at "
                f"{len(data) / 2**20:.1f} MB it may be longer than {limit:g} minutes, the most "
                f"I transcribe (voice.max_minutes). {LASTING_KEPT}"
            )
        return data, seconds

    async def _transcribe(self, client: AudioClient, relative: str, data: bytes) -> str:
        """The recording's text."""
        try:
            text = await client.transcribe(relative, data, self.settings.model)
        except VoiceError as exc:
            logger.warning("voice: {} was not transcribed: {}", relative, exc)
            # A retry helps when the service or its settings change; not for a lasting refusal.
            kept = LASTING_KEPT if exc.lasting else "It is kept; send /retry to try again."
            raise Unreadable(
                f"I could not transcribe that recording: {str(exc).rstrip('.')}. {kept}"
            ) from None
        if not text:
            raise Unreadable("I could not make out any words in that recording.")
        return text

    async def after_turn(self, session: Session, context: ToolContext) -> None:
        """A reply to a voice note, spoken: synthesized, saved in the chat's media folder and
        sent as a file after the text. A failure is logged and costs nothing else."""
        if self.settings.reply != "to_voice" or self.client is None:
            return
        channel, _, chat = session.key.partition(":")
        if channel not in self.pushing:
            return  # nowhere to send it (`nanomem chat`, the API's answer on its connection)
        text = spoken_reply(session.messages)
        if text is None:
            return
        try:
            audio = await self.client.speak(
                plain_text(text), self.settings.speech_model, self.settings.speech_voice
            )
            name = f"{datetime.now():%Y-%m-%d}-reply-{secrets.token_hex(4)}.ogg"
            room = session.is_room
            path = await asyncio.to_thread(
                save_media, self.workspace, session.key, name, audio, room
            )
        except (VoiceError, OSError) as exc:
            logger.warning("voice: no spoken reply in {}: {}", session.key, exc)
            return
        await self.bus.publish_outbound(OutboundMessage(channel, chat, File(path)))


def unknown_length_bytes(max_minutes: float) -> int:
    """The largest recording whose length cannot be read (not Ogg/Opus or WAV: mp3, m4a, a
    video note) that is still taken: `max_minutes` at 128 kbit/s, more than speech needs."""
    return int(max_minutes * 60 * GENEROUS_BYTES_PER_S)


def transcribed(relative: str, text: str, seconds: float | None) -> str:
    """A recording's text as the model reads it: the person's own voice as their words,
    marked as transcribed; a forwarded audio file as someone else's (untrusted)."""
    length = f", {clock(seconds)}" if seconds is not None else ""
    name = PurePath(relative).name
    if is_own_voice(relative):
        kind = "video note" if name.lower().endswith(VIDEO_NOTE_ENDING) else "voice note"
        return f"[{kind}{length}] {text}"
    return f"[audio {name}{length}, transcribed]\n{untrusted(f'audio {name}', text)}"


def spoken_reply(messages: list[dict[str, Any]]) -> str | None:
    """The last turn's final answer, when the message it answered was the person's own
    voice; None otherwise."""
    last = next(
        (i for i in range(len(messages) - 1, -1, -1) if messages[i].get("role") == "user"), None
    )
    if last is None or not SPOKEN.search(str(messages[last].get("content") or "")):
        return None
    final = messages[-1] if len(messages) > last + 1 else None
    if final is None or final.get("role") != "assistant" or final.get("tool_calls"):
        return None
    if final.get("failed") or final.get("interrupted") or not final.get("content"):
        return None
    return str(final["content"])


def build(core: Core) -> Voice:
    """Always there: with voice off, a voice note is answered with how to turn it on."""
    settings = core.settings.voice
    endpoint = audio_endpoint(core.settings)
    client = None if endpoint is None else AudioClient(endpoint, settings.timeout_s)
    return Voice(settings, client, core.workspace, core.bus, core.templates)

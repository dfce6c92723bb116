"""Where audio goes: voice.api_base and voice.api_key, or else the model connection's when
that is an OpenAI-compatible API. Cheap to import (`nanomem status` asks it)."""

from __future__ import annotations

import os
from dataclasses import dataclass

from nanomem.config import Settings
from nanomem.providers import route

DISABLED = "Voice notes are turned off here (voice.enabled = false)."
TURN_ON = (
    "Voice notes are off: set voice.api_base (and voice.api_key) to an OpenAI-compatible "
    "/audio/transcriptions endpoint, e.g. OpenAI, Groq or a whisper server of your own."
)


@dataclass(frozen=True)
class AudioEndpoint:
    base_url: str  # without a trailing slash: /audio/transcriptions and /audio/speech below it
    api_key: str  # may be empty (a server of one's own)
    source: str  # for `nanomem status`: which settings it came from

    def describe(self) -> str:
        return f"{self.base_url} ({self.source})"


def audio_endpoint(settings: Settings) -> AudioEndpoint | None:
    """The endpoint voice uses, or None when voice is off (disabled, or nowhere to send)."""
    voice = settings.voice
    if not voice.enabled:
        return None
    if voice.api_base:
        key = voice.api_key.get_secret_value() if voice.api_key else ""
        return AudioEndpoint(voice.api_base.rstrip("/"), key, "voice.api_base")
    if not settings.llm.model:
        return None
    chosen = route(settings.llm)
    if chosen.path != "direct":
        return None  # litellm's providers have no /audio/transcriptions of ours to assume
    if voice.api_key is not None:
        key = voice.api_key.get_secret_value()
    elif settings.llm.api_key is not None:
        key = settings.llm.api_key.get_secret_value()
    else:
        key = os.environ.get(chosen.key_variable or "OPENAI_API_KEY", "")
    return AudioEndpoint(chosen.base_url, key, "the model connection, llm.model")

"""Voice notes in and spoken replies out, through OpenAI-compatible audio endpoints."""

from typing import TYPE_CHECKING

from nanomem.exports import lazy_exports

if TYPE_CHECKING:
    from nanomem.features.voice.audio import is_own_voice, is_spoken
    from nanomem.features.voice.client import AudioClient, VoiceError
    from nanomem.features.voice.endpoint import AudioEndpoint, audio_endpoint
    from nanomem.features.voice.feature import Voice, build
    from nanomem.features.voice.length import BrokenOgg, ogg_opus_seconds, recording_seconds

__all__ = [
    "AudioClient",
    "AudioEndpoint",
    "BrokenOgg",
    "Voice",
    "VoiceError",
    "audio_endpoint",
    "build",
    "is_own_voice",
    "is_spoken",
    "ogg_opus_seconds",
    "recording_seconds",
]
__getattr__ = lazy_exports(
    __name__,
    {
        "audio": ("is_own_voice", "is_spoken"),
        "length": ("BrokenOgg", "ogg_opus_seconds", "recording_seconds"),
        "client": ("AudioClient", "VoiceError"),
        "endpoint": ("AudioEndpoint", "audio_endpoint"),
        "feature": ("Voice", "build"),
    },
)

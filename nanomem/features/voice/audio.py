"""Which saved files are sound to transcribe: decided by the name a channel gives the file, so
every channel (Telegram, the agent API's input_audio) only has to save it under its suffix."""

from __future__ import annotations

from pathlib import PurePath

# What OpenAI-compatible /audio/transcriptions endpoints take, and Telegram's voice notes (.oga).
AUDIO_SUFFIXES = frozenset(
    [".oga", ".ogg", ".opus", ".mp3", ".mpga", ".mpeg", ".m4a", ".wav", ".flac", ".webm"]
)
# A Telegram video note is a short round video of someone speaking: its sound is transcribed,
# a plain video's is not. The channel saves it under this ending.
VIDEO_NOTE_ENDING = ".note.mp4"


def is_spoken(path: str) -> bool:
    """A voice note, an audio file or a video note, by the name it was saved under."""
    name = PurePath(path).name.lower()
    return PurePath(name).suffix in AUDIO_SUFFIXES or name.endswith(VIDEO_NOTE_ENDING)

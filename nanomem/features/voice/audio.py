"""Which saved files are sound to transcribe: decided by the name a channel gives the file, so
every channel (Telegram, the agent API's input_audio) only has to save it under its suffix."""

from __future__ import annotations

from pathlib import PurePath

# What OpenAI-compatible /audio/transcriptions endpoints take, and Telegram's voice notes (.oga).
AUDIO_SUFFIXES = frozenset(
    [".oga", ".ogg", ".opus", ".mp3", ".mpga", ".mpeg", ".m4a", ".wav", ".flac", ".webm"]
)
# A Telegram video note is a short round video of someone speaking: its sound is transcribed,
# a plain video's is not. The channel saves the person's own under this ending, and one they
# forwarded (someone else's words) under FORWARDED_NOTE_ENDING.
VIDEO_NOTE_ENDING = ".note.mp4"
FORWARDED_NOTE_ENDING = ".fwd.mp4"
# The person's own voice, recorded for this chat: Telegram saves a voice note as .oga (one that
# was forwarded, or a file sent with that name, as .ogg), and a channel may mark any recording
# so (`x.voice.wav`). Any other sound is someone else's words.
VOICE_MARK = ".voice."


def is_spoken(path: str) -> bool:
    """A voice note, an audio file or a video note, by the name it was saved under."""
    name = PurePath(path).name.lower()
    notes = (VIDEO_NOTE_ENDING, FORWARDED_NOTE_ENDING)
    return PurePath(name).suffix in AUDIO_SUFFIXES or name.endswith(notes)


def is_own_voice(path: str) -> bool:
    """A voice note or video note the person recorded, not a forwarded audio file."""
    name = PurePath(path).name.lower()
    return name.endswith((".oga", VIDEO_NOTE_ENDING)) or VOICE_MARK in name


def clock(seconds: float) -> str:
    """0:12, 3:05, 1:02:03."""
    whole = round(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"

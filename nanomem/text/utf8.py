"""Valid UTF-8 wherever text enters or leaves: lone surrogates become U+FFFD.

Python strings can hold lone surrogates (JSON's `"\\ud83d"`, bytes decoded with
`surrogateescape`), which cannot be encoded as UTF-8: one of them in a reply made the session
append raise and lose the reply. Text is cleaned where it enters (provider replies, input) and
again by every writer, so nothing can make a write fail.
"""

from __future__ import annotations

from typing import Any


def is_valid(text: str) -> bool:
    """True when `text` encodes as UTF-8 (no lone surrogates)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def clean_text(text: str) -> str:
    """`text` with every lone surrogate replaced by U+FFFD (a valid pair is joined)."""
    if is_valid(text):
        return text
    # UTF-16 round trip: adjacent high+low surrogates form their character, the rest fail.
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


def clean_value(value: Any) -> Any:
    """A JSON-like value (str, list, dict, scalars) with all its strings cleaned."""
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, dict):
        return {clean_text(str(k)): clean_value(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [clean_value(v) for v in value]
    return value


def encode(text: str) -> bytes:
    """UTF-8 bytes of `text`; never raises (lone surrogates are replaced)."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return clean_text(text).encode("utf-8")


def decode(data: bytes) -> tuple[str, bool]:
    """Text of UTF-8 `data` and whether it was valid (invalid bytes become U+FFFD)."""
    try:
        return data.decode("utf-8"), True
    except UnicodeDecodeError:
        return data.decode("utf-8", "replace"), False

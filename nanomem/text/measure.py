"""How long a message is, counted the ways platforms count it: UTF-16 code units (Telegram),
bytes of JSON (Matrix's event limit)."""

from __future__ import annotations

import json
from typing import Any


def utf16_units(text: str) -> int:
    """UTF-16 code units: a character beyond the BMP (most emoji) counts two, a lone
    surrogate one."""
    if text.isascii():  # most of what is measured, many times over while a reply is split
        return len(text)
    return len(text.encode("utf-16-le", "surrogatepass")) // 2


def json_bytes(value: Any) -> int:
    """The bytes of `value` as compact UTF-8 JSON, as a server measures what it stores."""
    return len(
        json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8", "replace")
    )

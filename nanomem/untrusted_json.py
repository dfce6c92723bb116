"""JSON from outside (request bodies, a model's tool arguments, files a person may edit), parsed
without letting its nesting depth exhaust Python's stack."""

from __future__ import annotations

import json
import re
from typing import Any

MAX_DEPTH = 64  # far beyond any message, tool call or schedule we read
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.S)
_NOT_A_BRACKET = bytes(c for c in range(256) if c not in b"[]{}")


class TooDeep(ValueError):
    """JSON nested deeper than we parse (a ValueError, like every other bad JSON)."""


def depth_exceeds(raw: str | bytes, max_depth: int = MAX_DEPTH) -> bool:
    """Whether arrays and objects nest deeper than `max_depth` (or their brackets do not pair
    up), without recursion: strings are dropped (brackets inside them do not count), then each
    pass removes the innermost pairs, all of it at C speed."""
    data = raw.encode("utf-8", "surrogatepass") if isinstance(raw, str) else raw
    if data.count(b"[") + data.count(b"{") <= max_depth:
        return False  # the usual case: too few brackets to nest that deep
    brackets = _STRING.sub(b"", data).translate(None, _NOT_A_BRACKET)
    for _ in range(max_depth):
        if not brackets:
            return False
        brackets = brackets.replace(b"[]", b"").replace(b"{}", b"")
    return bool(brackets)


def loads(raw: str | bytes, max_depth: int = MAX_DEPTH) -> Any:
    """json.loads, raising ValueError (never RecursionError) for anything it cannot read."""
    if depth_exceeds(raw, max_depth):
        raise TooDeep(f"JSON nested deeper than {max_depth} levels (or unbalanced)")
    try:
        return json.loads(raw)
    except RecursionError:  # a bound above Python's own stack: refused all the same
        raise TooDeep("JSON nested too deeply to read") from None

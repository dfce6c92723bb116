"""JSON from outside (request bodies, a model's tool arguments, files a person may edit), parsed
without letting its nesting depth exhaust Python's stack."""

from __future__ import annotations

import json
import re
from typing import Any

MAX_DEPTH = 64  # far beyond any message, tool call or schedule we read
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.S)
_NOT_A_BRACKET = bytes(c for c in range(256) if c not in b"[]{}")


class TooDeep(json.JSONDecodeError):
    """JSON nested deeper than we parse: caught wherever bad JSON is (a ValueError)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, "", 0)

    def __str__(self) -> str:
        return self.msg


def depth_exceeds(raw: str | bytes, max_depth: int = MAX_DEPTH) -> bool:
    """Whether arrays and objects nest deeper than `max_depth` (or their brackets do not pair
    up), without recursion: strings are dropped (brackets inside them do not count), then each
    pass removes the innermost pairs, all of it at C speed."""
    if isinstance(raw, str):
        if raw.count("[") + raw.count("{") <= max_depth:
            return False  # the usual case: too few brackets to nest that deep
        data = raw.encode("utf-8", "surrogatepass")
    else:
        data = raw
        if data.count(b"[") + data.count(b"{") <= max_depth:
            return False
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

"""usage.jsonl: one line per answered model call, appended, read from its end.

A line is a versioned record (`"v": 1`) of when the call was answered, whom it was charged to
(the chat's session key, the purpose, the turn) and the model, with its tokens. Appends hold
the home's `usage` lock and are one write each, not fsynced (a power cut may cost the last
counts, never a torn file: a torn last line a crash left is cut first). Readers walk the file
backwards and stop once past the days asked for, so neither a turn nor `/usage` ever reads the
whole file; a line that cannot be read is skipped.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from loguru import logger

from nanomem.durable import append_lines, truncate_torn_tail
from nanomem.providers import ModelCall
from nanomem.text import untrusted_json

VERSION = 1
MAX_LINE = 4096  # a record is ~200 bytes; anything longer is not one of ours
_BLOCK = 64 * 1024
# Processes append side by side, each a call's answer time: lines are in time order only
# roughly. Reading back goes this far past the start asked for before it stops.
SLACK_S = 3600.0
_MAX_NAME = 256  # of a chat key or a model name kept in a record
PURPOSES = ("turn", "consolidation", "dream", "task", "other")


@dataclass(frozen=True)
class Record:
    at: float  # when the call was answered, seconds since the epoch
    chat: str  # session key; "" for the home's own work (Dream)
    purpose: str
    turn: str  # the turn's id ("" outside a turn)
    model: str
    prompt: int  # prompt tokens, cached and cache-written ones included
    completion: int
    cached: int = 0
    cache_write: int = 0

    @classmethod
    def of(cls, call: ModelCall) -> Record:
        usage, charge = call.usage, call.charge
        return cls(
            call.at,
            charge.session[:_MAX_NAME],
            charge.purpose,
            charge.turn,
            call.model[:_MAX_NAME],
            usage.prompt_tokens,
            usage.completion_tokens,
            usage.cached_tokens,
            usage.cache_write_tokens,
        )

    def to_json(self) -> str:
        stamp = datetime.fromtimestamp(self.at, UTC).isoformat(timespec="milliseconds")
        fields = {
            "v": VERSION,
            "ts": stamp,
            "chat": self.chat,
            "purpose": self.purpose,
            "turn": self.turn,
            "model": self.model,
            "prompt": self.prompt,
            "completion": self.completion,
            "cached": self.cached,
            "cache_write": self.cache_write,
        }
        return json.dumps(fields, ensure_ascii=False, separators=(",", ":"))

    @classmethod
    def parse(cls, line: bytes) -> Record | None:
        """The record on this line; None for anything else (torn, edited, a later version)."""
        if not line.strip() or len(line) > MAX_LINE:
            return None
        try:
            data = untrusted_json.loads(line)
            if not isinstance(data, dict) or data.get("v") != VERSION:
                return None
            at = datetime.fromisoformat(data["ts"]).timestamp()
            texts = [data[k] for k in ("chat", "purpose", "turn", "model")]
            counts = [data.get(k, 0) for k in ("prompt", "completion", "cached", "cache_write")]
        except (ValueError, KeyError, TypeError, OverflowError):
            return None
        if not all(isinstance(t, str) for t in texts):
            return None
        if not all(type(n) is int and n >= 0 for n in counts):
            return None
        chat, purpose, turn, model = texts
        prompt, completion, cached, cache_write = counts
        return cls(at, chat, purpose, turn, model, prompt, completion, cached, cache_write)


def append(path: Path, records: list[Record]) -> None:
    """Append records (the caller holds the home's `usage` lock)."""
    if path.exists() and (torn := truncate_torn_tail(path)):
        logger.warning("usage.jsonl: dropped a torn last line ({} bytes)", len(torn))
    append_lines(path, [record.to_json() for record in records], sync=False)


def read_since(path: Path, start: float) -> Iterator[Record]:
    """Records answered at or after `start`, newest first, read from the end of the file."""
    for record in _backwards(path):
        if record.at >= start:
            yield record
        elif record.at < start - SLACK_S:
            return


def _backwards(path: Path) -> Iterator[Record]:
    try:
        fh = path.open("rb")
    except FileNotFoundError:
        return
    with fh:
        position = fh.seek(0, os.SEEK_END)
        remainder = b""  # the start of a line whose beginning is in an earlier block
        while position > 0:
            step = min(_BLOCK, position)
            position -= step
            fh.seek(position)
            lines = (fh.read(step) + remainder).split(b"\n")
            remainder = lines.pop(0)
            if len(remainder) > MAX_LINE:  # not a record: keep only enough to know that
                remainder = remainder[-(MAX_LINE + 1) :]
            for line in reversed(lines):
                if (record := Record.parse(line)) is not None:
                    yield record
        if (record := Record.parse(remainder)) is not None:
            yield record

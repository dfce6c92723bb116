"""Sessions: one append-only JSONL transcript per chat, cached in memory (LRU)."""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from loguru import logger

from nanomem.durable import append_lines, truncate_torn_tail

FORMAT_VERSION = 1
# Keys the model API understands; everything else in a stored message is ours (timestamps).
_WIRE_KEYS = ("role", "content", "tool_calls", "tool_call_id", "name")


def now_iso() -> str:
    return datetime.now(UTC).astimezone().isoformat(timespec="seconds")


def estimate_tokens(message: dict[str, Any]) -> int:
    """A cheap, deliberately generous estimate (≈3 chars a token) when no tokenizer is given."""
    size = len(str(message.get("content") or ""))
    for call in message.get("tool_calls") or ():
        size += len(call["function"]["name"]) + len(call["function"]["arguments"])
    return size // 3 + 8


Counter = Callable[[dict[str, Any]], int]


@dataclass
class Session:
    key: str
    path: Path
    created_at: str
    messages: list[dict[str, Any]] = field(default_factory=list)
    state: dict[str, Any] = field(default_factory=dict)
    counter: Counter = field(default=estimate_tokens, repr=False)
    system_tokens: int | None = None  # size of the system prompt of the last turn (not saved)
    unsaved: bool = False  # a new session: the header goes out with the first write
    _tokens: list[int] = field(default_factory=list, repr=False)
    # Running sum of tokens over messages[_sum_from:_sum_to], kept up to date incrementally.
    _sum_from: int = field(default=0, repr=False)
    _sum_to: int = field(default=0, repr=False)
    _sum: int = field(default=0, repr=False)

    @property
    def replay_from(self) -> int:
        """Index of the first message the model still sees (moved by /new and consolidation)."""
        return int(self.state.get("replay_from", 0))

    def token_count(self, index: int) -> int:
        while len(self._tokens) <= index:
            self._tokens.append(self.counter(self.messages[len(self._tokens)]))
        return self._tokens[index]

    def unconsolidated_tokens(self) -> int:
        """Tokens of everything the model still sees; costs only what changed since last asked."""
        start = self.replay_from
        if start < self._sum_from or start > self._sum_to:
            self._sum_from = self._sum_to = start
            self._sum = 0
        while self._sum_from < start:
            self._sum -= self.token_count(self._sum_from)
            self._sum_from += 1
        while self._sum_to < len(self.messages):
            self._sum += self.token_count(self._sum_to)
            self._sum_to += 1
        return self._sum

    def user_turn_starts(self) -> list[int]:
        return [
            i
            for i in range(self.replay_from, len(self.messages))
            if self.messages[i].get("role") == "user"
        ]

    def history(
        self, budget_tokens: int, end: int | None = None
    ) -> tuple[list[dict[str, Any]], int]:
        """The newest messages before `end` that fit the budget, starting at a user turn, in
        wire format, with their token count. Walks back from the end: the cost depends on the
        window, not on the session's length."""
        end = len(self.messages) if end is None else end
        start = end
        used = 0
        while start > self.replay_from:
            cost = self.token_count(start - 1)
            if used + cost > budget_tokens:
                break
            used += cost
            start -= 1
        while start < end and self.messages[start].get("role") != "user":
            used -= self.token_count(start)
            start += 1
        return to_wire(self.messages[start:end]), used


def to_wire(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Strip our own fields and drop tool calls left without results (a crash mid-turn)."""
    answered = {m.get("tool_call_id") for m in messages if m.get("role") == "tool"}
    called: set[str] = set()
    wire: list[dict[str, Any]] = []
    for message in messages:
        out = {k: message[k] for k in _WIRE_KEYS if k in message}
        if out.get("tool_calls"):
            calls = [c for c in out["tool_calls"] if c.get("id") in answered]
            called.update(c["id"] for c in calls)
            if calls:
                out["tool_calls"] = calls
            else:
                del out["tool_calls"]
                if not out.get("content"):
                    continue
        if out.get("role") == "tool" and out.get("tool_call_id") not in called:
            continue
        wire.append(out)
    return wire


def session_filename(key: str) -> str:
    """Readable, collision-free and traversal-proof: a sanitised key plus a hash of the real one."""
    readable = re.sub(r"[^A-Za-z0-9_-]+", "_", key).strip("_")[:60] or "session"
    digest = hashlib.sha256(key.encode("utf-8")).hexdigest()[:12]
    return f"{readable}-{digest}.jsonl"


class SessionStore:
    """Loads each transcript once, then only appends to it."""

    def __init__(
        self, directory: Path, *, counter: Counter = estimate_tokens, cache_size: int = 256
    ) -> None:
        self.directory = directory
        self.counter = counter
        self._cache: OrderedDict[str, Session] = OrderedDict()
        self._cache_size = cache_size
        # A turn and a background consolidation may append to one file at the same time.
        self._write_locks: dict[Path, asyncio.Lock] = {}

    async def get(self, key: str) -> Session:
        session = self._cache.get(key)
        if session is None:
            session = await asyncio.to_thread(self._load, key)
            self._cache[key] = session
            while len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
        self._cache.move_to_end(key)
        return session

    async def append(self, session: Session, messages: list[dict[str, Any]]) -> None:
        """Persist new messages durably, then add them to the in-memory session."""
        if not messages:
            return
        stamped = [m if "ts" in m else {**m, "ts": now_iso()} for m in messages]
        lines = [json.dumps(m, ensure_ascii=False) for m in stamped]
        async with self._write_lock(session):
            await asyncio.to_thread(append_lines, session.path, self._header(session) + lines)
            session.messages.extend(stamped)

    async def update_state(self, session: Session, **changes: Any) -> None:
        record = {"_type": "state", **changes, "ts": now_iso()}
        async with self._write_lock(session):
            lines = [*self._header(session), json.dumps(record)]
            await asyncio.to_thread(append_lines, session.path, lines)
            session.state.update(changes)

    @staticmethod
    def _header(session: Session) -> list[str]:
        """The versioned first line, for a session that has no file yet."""
        if not session.unsaved:
            return []
        session.unsaved = False
        header = {"_type": "session", "version": FORMAT_VERSION, "key": session.key}
        return [json.dumps({**header, "created_at": session.created_at})]

    def _write_lock(self, session: Session) -> asyncio.Lock:
        return self._write_locks.setdefault(session.path, asyncio.Lock())

    @property
    def cached(self) -> int:
        return len(self._cache)

    def count(self) -> int:
        if not self.directory.is_dir():
            return 0
        return sum(1 for _ in self.directory.glob("*.jsonl"))

    def _load(self, key: str) -> Session:
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self.directory / session_filename(key)
        if not path.exists():
            return Session(key, path, now_iso(), counter=self.counter, unsaved=True)
        torn = truncate_torn_tail(path)
        if torn:
            logger.warning("session {}: dropped a torn last line ({} bytes)", key, len(torn))
        session = Session(key=key, path=path, created_at="", counter=self.counter)
        with path.open(encoding="utf-8") as fh:
            for number, line in enumerate(fh, start=1):
                try:
                    record = json.loads(line)
                except json.JSONDecodeError:
                    logger.warning("session {}: skipped unreadable line {}", key, number)
                    continue
                kind = record.pop("_type", None)
                if kind == "session":
                    session.created_at = record.get("created_at", "")
                    if record.get("version", FORMAT_VERSION) > FORMAT_VERSION:
                        logger.warning("session {}: written by a newer nanomem", key)
                elif kind == "state":
                    record.pop("ts", None)
                    session.state.update(record)
                elif kind is None and "role" in record:
                    session.messages.append(record)
        return session

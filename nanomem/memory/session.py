"""Sessions: one append-only JSONL transcript per chat, cached in memory (LRU).

Several processes may serve one home (the gateway, `chat -m`, a second terminal): a lease, a
lock file per session, lets one process at a time work on a session, and a process that takes
it reloads the transcript if another process changed the file meanwhile."""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
import weakref
from bisect import bisect_left, bisect_right
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from loguru import logger

from nanomem.audience import legacy_room
from nanomem.durable import append_lines, truncate_torn_tail
from nanomem.locks import FileLock, to_thread_to_the_end
from nanomem.providers import WireMessage
from nanomem.text import untrusted_json
from nanomem.text.masking import redact_message
from nanomem.text.utf8 import clean_value, is_valid

# Version 2: the header (or a state record) says whether the chat is a shared room (`room`).
FORMAT_VERSION = 2
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
    """A transcript plus running indexes over it, so a turn costs the same at 10 messages as at
    100,000: token prefix sums (the replay window is a binary search), the positions of user
    turns, and each finished turn's wire form, computed once. Messages are only ever appended."""

    key: str
    path: Path
    created_at: str
    messages: list[dict[str, Any]] = field(default_factory=list)
    state: dict[str, Any] = field(default_factory=dict)
    counter: Counter = field(default=estimate_tokens, repr=False)
    system_tokens: int | None = None  # size of the system prompt of the last turn (not saved)
    unsaved: bool = False  # a new session: the header goes out with the first write
    # A shared room (a group chat), as its channel said when its first message was saved; None
    # in a file written before that was recorded (`is_room` reads the old rule for it).
    room: bool | None = None
    version: int = FORMAT_VERSION  # of the file's header
    # The file's (inode, size) after this process last read or wrote it: if it differs when a
    # lease is taken, another process changed the transcript.
    on_disk: tuple[int, int] | None = field(default=None, repr=False)
    # The indexes cover messages[_base:]: what was consolidated before they were built is never
    # counted. _cumulative[i] = tokens of messages[_base : _base + i].
    _base: int = field(default=0, repr=False)
    _cumulative: list[int] = field(default_factory=lambda: [0], repr=False)
    _user_turns: list[int] = field(default_factory=list, repr=False)  # absolute indices
    _wire: list[WireMessage | None] = field(default_factory=list, repr=False)

    def changed_on_disk(self) -> bool:
        """Another process changed the file since this one last read or wrote it (one stat)."""
        return _on_disk(self.path) != self.on_disk

    @property
    def is_room(self) -> bool:
        """A shared room: the stored word of its channel, or for a session from before it was
        stored, the rule of then (audience.legacy_room)."""
        if self.room is not None:
            return self.room
        return self.version < 2 and legacy_room(self.key)

    @property
    def replay_from(self) -> int:
        """Index of the first message the model still sees (moved by /new and consolidation);
        never past the end, even when a corrupt line was skipped on load."""
        return min(int(self.state.get("replay_from", 0)), len(self.messages))

    def _index(self, upto: int | None = None) -> None:
        """Count and classify messages up to `upto` (default: all), each exactly once."""
        if self.replay_from < self._base or len(self._cumulative) == 1:
            self._base, self._cumulative = self.replay_from, [0]
            self._user_turns, self._wire = [], []
        upto = len(self.messages) if upto is None else upto
        cumulative = self._cumulative
        for index in range(self._base + len(cumulative) - 1, upto):
            message = self.messages[index]
            cumulative.append(cumulative[-1] + self.counter(message))
            if message.get("role") == "user":
                self._user_turns.append(index)

    def recount(self) -> None:
        """Forget the token counts (the counter changed); the next use counts again, once."""
        self._cumulative = [0]
        self.system_tokens = None

    def tokens_between(self, start: int, end: int) -> int:
        self._index(end)
        return self._cumulative[end - self._base] - self._cumulative[start - self._base]

    def unconsolidated_tokens(self) -> int:
        """Tokens of everything the model still sees."""
        return self.tokens_between(self.replay_from, len(self.messages))

    def user_turn_starts(self) -> list[int]:
        self._index()
        return self._user_turns[bisect_left(self._user_turns, self.replay_from) :]

    def history(
        self, budget_tokens: int, end: int | None = None
    ) -> tuple[list[dict[str, Any]], int]:
        """The newest messages before `end` that fit the budget, starting at a user turn, in
        wire format, with their token count."""
        end = max(self.replay_from, len(self.messages) if end is None else end)
        total = self.tokens_between(self.replay_from, end)
        base, cumulative = self._base, self._cumulative
        # The oldest start whose messages up to `end` fit: cumulative[start] ≥ total − budget.
        target = cumulative[end - base] - min(budget_tokens, total)
        start = base + bisect_left(cumulative, target, self.replay_from - base, end - base)
        turn = bisect_left(self._user_turns, start)
        start = min(self._user_turns[turn], end) if turn < len(self._user_turns) else end
        return self._wire_forms(start, end), self.tokens_between(start, end)

    def _wire_forms(self, start: int, end: int) -> list[dict[str, Any]]:
        """messages[start:end] for the model. A turn is final once the next user message
        exists (no tool result can follow it), so finished turns are converted once."""
        self._index(end)
        cached_to = self._base + len(self._wire)
        turns = self._user_turns
        for boundary in turns[bisect_right(turns, cached_to) : bisect_right(turns, end)]:
            self._wire.extend(wire_forms(self.messages[cached_to:boundary]))
            cached_to = boundary
        stop = min(cached_to, end)
        head = self._wire[start - self._base : stop - self._base] if start < stop else []
        tail = wire_forms(self.messages[max(start, cached_to) : end])
        return [form for form in (*head, *tail) if form is not None]


def wire_forms(messages: list[dict[str, Any]]) -> list[WireMessage | None]:
    """Each message as the model API takes it (our own fields stripped), or None where it must
    be left out: a tool call without a result (a crash mid-turn), or a result without a call."""
    answered = {m.get("tool_call_id") for m in messages if m.get("role") == "tool"}
    called: set[str] = set()
    forms: list[WireMessage | None] = []
    for message in messages:
        out = {k: message[k] for k in _WIRE_KEYS if k in message}
        if out.get("tool_calls"):
            calls = [c for c in out["tool_calls"] if c.get("id") in answered]
            called.update(c["id"] for c in calls)
            if calls:
                out["tool_calls"] = calls
            else:
                del out["tool_calls"]
        orphan_call = bool(message.get("tool_calls")) and not out.get("tool_calls")
        orphan_result = out.get("role") == "tool" and out.get("tool_call_id") not in called
        orphan = (orphan_call and not out.get("content")) or orphan_result
        forms.append(None if orphan else WireMessage(out))
    return _asides_after_results(messages, forms, answered)


def _asides_after_results(
    messages: list[dict[str, Any]], forms: list[WireMessage | None], answered: set[Any]
) -> list[WireMessage | None]:
    """An aside (a background task's result) saved while a turn waited for an API client's
    tool results goes after those results: a model takes nothing between a call and its
    result. Only moved within the turn, so each turn keeps its length."""
    if not any(m.get("aside") for m in messages):
        return forms
    order: list[int] = []
    held: list[int] = []
    due: set[Any] = set()  # the calls of the last assistant message whose results come later
    for index, message in enumerate(messages):
        if message.get("aside") and due:
            held.append(index)
            continue
        if message.get("role") == "tool":
            due.discard(message.get("tool_call_id"))
        elif held:  # anything else ends the results
            order += held
            held, due = [], set()
        order.append(index)
        if message.get("tool_calls"):
            due = {c.get("id") for c in message["tool_calls"]} & answered
        if held and not due:
            order += held
            held = []
    return [forms[i] for i in order + held]


def to_wire(messages: list[dict[str, Any]]) -> list[WireMessage]:
    """Strip our own fields and drop tool calls left without results (a crash mid-turn)."""
    return [form for form in wire_forms(messages) if form is not None]


def session_filename(key: str) -> str:
    """Readable, collision-free and traversal-proof: a sanitised key plus a hash of the real one."""
    readable = re.sub(r"[^A-Za-z0-9_-]+", "_", key).strip("_")[:60] or "session"
    digest = hashlib.sha256(key.encode("utf-8")).hexdigest()[:12]
    return f"{readable}-{digest}.jsonl"


@dataclass
class _Lease:
    lock: FileLock
    gate: asyncio.Lock = field(default_factory=asyncio.Lock)
    users: int = 0
    held: bool = False


class SessionStore:
    """Loads each transcript once, then only appends to it."""

    def __init__(
        self,
        directory: Path,
        *,
        counter: Counter = estimate_tokens,
        cache_size: int = 256,
        lock_dir: Path | None = None,
    ) -> None:
        self.directory = directory
        self.counter = counter
        self.lock_dir = lock_dir or directory / ".locks"
        self._cache: OrderedDict[str, Session] = OrderedDict()
        self._cache_size = cache_size
        # A turn and a background consolidation may append to one file at the same time.
        # Weak: a lock lives while someone holds or awaits it, so the map never outgrows use.
        self._write_locks: weakref.WeakValueDictionary[Path, asyncio.Lock] = (
            weakref.WeakValueDictionary()
        )
        self._leases: dict[str, _Lease] = {}

    @asynccontextmanager
    async def lease(self, key: str) -> AsyncIterator[None]:
        """Work on one session, exclusively across processes. Shared within this process (a
        turn and its session's background consolidation hold it together); whoever takes it
        first reloads the session if another process changed its file."""
        lease = self._leases.get(key)
        if lease is None:
            name = session_filename(key).removesuffix(".jsonl")
            lease = self._leases[key] = _Lease(FileLock(self.lock_dir / f"{name}.lock"))
        lease.users += 1
        try:
            async with lease.gate:
                if not lease.held:
                    await lease.lock.acquire()
                    lease.held = True
                    await self._refresh(key)
            yield
        finally:
            lease.users -= 1
            if not lease.users:
                if lease.held:
                    lease.lock.release()
                    lease.held = False
                del self._leases[key]

    async def _refresh(self, key: str) -> None:
        session = self._cache.get(key)
        if session is None:
            return
        if session.changed_on_disk():  # one stat (~2 us): less than a hop to a thread (~50)
            logger.info("session {}: changed by another process; reloading", key)
            self._cache[key] = await asyncio.to_thread(self._load, key)

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
        # The one place a transcript is written: a known secret (typed by the person, repeated
        # by the model) is masked here, and memory holds what the file holds.
        messages = [redact_message(m) for m in messages]
        stamped = [m if "ts" in m else {**m, "ts": now_iso()} for m in messages]
        lines = [json.dumps(m, ensure_ascii=False) for m in stamped]
        for i, line in enumerate(lines):
            if not is_valid(line):  # a lone surrogate: memory must hold what the file holds
                stamped[i] = clean_value(stamped[i])
                lines[i] = json.dumps(stamped[i], ensure_ascii=False)
        async with self._write_lock(session):
            await to_thread_to_the_end(self._write, session, lines)
            session.messages.extend(stamped)

    async def mark_room(self, session: Session, room: bool) -> None:
        """Record what the channel says of the chat as its first message is saved (in the
        header of a new file, else as a state record). Once a room, always a room: a message
        that says otherwise never opens personal memory to the chat."""
        if session.room is None and session.unsaved:
            session.room = room  # the header, written with the message, carries it
        elif session.room is None or (room and not session.room):
            await self.update_state(session, room=room or session.is_room)

    async def update_state(self, session: Session, **changes: Any) -> None:
        record = {"_type": "state", **changes, "ts": now_iso()}
        async with self._write_lock(session):
            await to_thread_to_the_end(self._write, session, [json.dumps(record)])
            session.state.update(changes)
            if isinstance(room := changes.get("room"), bool):
                session.room = room

    @staticmethod
    def _write(session: Session, lines: list[str]) -> None:
        """Append, with the versioned header first for a session that has no file yet (never
        twice, even if another process created the file meanwhile). The header counts as
        written only once a write succeeded: a failed one must not leave the file without it."""
        if session.unsaved:
            existing = _on_disk(session.path)
            if existing is None or existing[1] == 0:
                header = {"_type": "session", "version": FORMAT_VERSION, "key": session.key}
                if session.room is not None:
                    header["room"] = session.room
                lines = [json.dumps({**header, "created_at": session.created_at}), *lines]
        append_lines(session.path, lines)
        session.unsaved = False
        session.on_disk = _on_disk(session.path)

    def _write_lock(self, session: Session) -> asyncio.Lock:
        return self._write_locks.setdefault(session.path, asyncio.Lock())

    def recount(self) -> None:
        """The counter changed (byte bounds became exact counts): count every session again."""
        for session in self._cache.values():
            session.recount()

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
        # A file without a readable header is read as the oldest version.
        session = Session(key=key, path=path, created_at="", counter=self.counter, version=1)
        with path.open(encoding="utf-8") as fh:
            for number, line in enumerate(fh, start=1):
                try:
                    record = untrusted_json.loads(line)
                except json.JSONDecodeError:
                    logger.warning("session {}: skipped unreadable line {}", key, number)
                    continue
                kind = record.pop("_type", None)
                if kind == "session":
                    session.created_at = record.get("created_at", "")
                    version = record.get("version", 1)
                    session.version = version if isinstance(version, int) else 1
                    if isinstance(room := record.get("room"), bool):
                        session.room = room
                    if record.get("version", FORMAT_VERSION) > FORMAT_VERSION:
                        logger.warning("session {}: written by a newer nanomem", key)
                elif kind == "state":
                    record.pop("ts", None)
                    session.state.update(record)
                    if isinstance(room := record.get("room"), bool):
                        session.room = room
                elif kind is None and "role" in record:
                    session.messages.append(record)
        session.on_disk = _on_disk(path)
        return session


def _on_disk(path: Path) -> tuple[int, int] | None:
    try:
        info = path.stat()
    except FileNotFoundError:
        return None
    return (info.st_ino, info.st_size)

"""memory/history.jsonl: the append-only archive the Consolidator writes and Dream reads."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, Literal

from loguru import logger
from pydantic import Field

from nanomem.audience import current
from nanomem.durable import append_lines, atomic_write_text, truncate_torn_tail
from nanomem.tools import Tool, read_only_tool
from nanomem.utf8 import clean_text

FORMAT_VERSION = 1
EntryKind = Literal["summary", "raw"]
_BLOCK = 64 * 1024


@dataclass(frozen=True)
class HistoryEntry:
    cursor: int
    timestamp: str
    session: str
    content: str
    kind: EntryKind
    ref: str = ""  # the consolidation that wrote it, for crash recovery
    part: int = 1
    parts: int = 1
    v: int = FORMAT_VERSION

    def to_json(self) -> str:
        return json.dumps(asdict(self), ensure_ascii=False)

    @classmethod
    def from_json(cls, line: str | bytes) -> HistoryEntry | None:
        try:
            data = json.loads(line)
            known = {k: data[k] for k in cls.__dataclass_fields__ if k in data}
            entry = cls(**known)
            return (
                entry if isinstance(entry.cursor, int) and isinstance(entry.content, str) else None
            )
        except (ValueError, TypeError, KeyError):
            return None


@dataclass(frozen=True)
class NewEntry:
    session: str
    content: str
    kind: EntryKind
    ref: str = ""
    part: int = 1
    parts: int = 1


def now_iso() -> str:
    return datetime.now(UTC).astimezone().isoformat(timespec="seconds")


class HistoryStore:
    """Appends are serialised and fsynced; reads walk the file backwards or binary-search it,
    so no per-turn operation re-parses the whole archive."""

    def __init__(self, memory_dir: Path) -> None:
        self.path = memory_dir / "history.jsonl"
        self.cursor_path = memory_dir / ".cursor"
        self.dream_cursor_path = memory_dir / ".dream_cursor"
        self._lock = asyncio.Lock()
        self._last_cursor: int | None = None
        self._recent: dict[str, tuple[tuple[Any, ...], list[HistoryEntry]]] = {}
        self._newest_of: dict[str, int] = {}  # per chat, the newest cursor this process wrote

    # -- writing -------------------------------------------------------------------------

    async def append(self, entries: list[NewEntry]) -> list[HistoryEntry]:
        async with self._lock:
            return await asyncio.to_thread(self._append, entries)

    def _append(self, entries: list[NewEntry]) -> list[HistoryEntry]:
        last = self.last_cursor()
        stamp = now_iso()
        written = [
            HistoryEntry(
                last + i, stamp, e.session, clean_text(e.content), e.kind, e.ref, e.part, e.parts
            )
            for i, e in enumerate(entries, start=1)
        ]
        self.path.parent.mkdir(parents=True, exist_ok=True)
        append_lines(self.path, [entry.to_json() for entry in written])
        for entry in written:
            self._newest_of[entry.session] = entry.cursor
        if written:
            self._last_cursor = written[-1].cursor
            atomic_write_text(self.cursor_path, f"{self._last_cursor}\n")
        return written

    def last_cursor(self) -> int:
        """The newest cursor; the file is the truth, `.cursor` only a cache of it."""
        if self._last_cursor is None:
            self._last_cursor = self._recover_cursor()
        return self._last_cursor

    def _recover_cursor(self) -> int:
        if self.path.exists():
            torn = truncate_torn_tail(self.path)
            if torn:
                logger.warning("history.jsonl: dropped a torn last line ({} bytes)", len(torn))
        from_file = next((e.cursor for e in self.iter_backwards()), 0)
        cached = _read_int(self.cursor_path)
        if cached != from_file:
            if cached is not None:
                logger.warning(
                    "memory/.cursor was {}, the history says {}; fixed", cached, from_file
                )
            if from_file or cached is not None:
                atomic_write_text(self.cursor_path, f"{from_file}\n")
        return from_file

    # -- reading -------------------------------------------------------------------------

    def dream_cursor(self) -> int:
        return _read_int(self.dream_cursor_path) or 0

    def advance_dream_cursor(self, cursor: int) -> None:
        """Written atomically, and only forward: a restore never makes Dream re-read history."""
        if cursor > self.dream_cursor():
            atomic_write_text(self.dream_cursor_path, f"{cursor}\n")

    def iter_backwards(self, stop_at_cursor: int = 0) -> Iterator[HistoryEntry]:
        """Newest first, down to (not including) `stop_at_cursor`; unreadable lines skipped."""
        if not self.path.exists():
            return
        with self.path.open("rb") as fh:
            fh.seek(0, os.SEEK_END)
            position = fh.tell()
            remainder = b""
            while position > 0:
                step = min(_BLOCK, position)
                position -= step
                fh.seek(position)
                lines = (fh.read(step) + remainder).split(b"\n")
                remainder = lines.pop(0)  # may be a partial line: completed by the next block
                for line in reversed(lines):
                    entry = self._parse(line)
                    if entry is None:
                        continue
                    if entry.cursor <= stop_at_cursor:
                        return
                    yield entry
            entry = self._parse(remainder)
            if entry is not None and entry.cursor > stop_at_cursor:
                yield entry

    def read_after(self, cursor: int, limit: int) -> list[HistoryEntry]:
        """Oldest first, the entries after `cursor` (for Dream): a binary search, then a read."""
        if not self.path.exists():
            return []
        found: list[HistoryEntry] = []
        with self.path.open("rb") as fh:
            fh.seek(self._offset_after(fh, cursor))
            for line in fh:
                entry = self._parse(line)
                if entry is not None and entry.cursor > cursor:
                    found.append(entry)
                    if len(found) >= limit:
                        break
        return found

    def _offset_after(self, fh: Any, cursor: int) -> int:
        """Offset of a line start at or before the first entry with a cursor above `cursor`."""
        fh.seek(0, os.SEEK_END)
        low, high = 0, fh.tell()
        while high - low > _BLOCK:
            middle = (low + high) // 2
            fh.seek(middle)
            fh.readline()  # skip to the next line start
            start = fh.tell()
            entry = None
            while entry is None:
                line = fh.readline()
                if not line:
                    break
                entry = self._parse(line)
            if entry is None or entry.cursor > cursor:
                high = middle
            else:
                low = start
        return low  # a line start whose entry is at or before `cursor`: safe to read from

    def recent(self, session: str, max_chars: int, *, scan_limit: int = 5000) -> list[HistoryEntry]:
        """This chat's entries that Dream has not digested yet, newest first, within a size cap.

        Cached until this chat archives something or the Dream cursor moves (other chats'
        archiving changes nothing here), so a turn costs one small file read.
        """
        digested = self.dream_cursor()
        key = (session, max_chars, self._newest_of.get(session), digested)
        cached = self._recent.get(session)
        if cached is not None and cached[0] == key:
            return cached[1]
        picked: list[HistoryEntry] = []
        used = 0
        for scanned, entry in enumerate(self.iter_backwards(digested)):
            if scanned >= scan_limit:
                break
            if entry.session != session:
                continue
            used += len(entry.content)
            if used > max_chars:
                break
            picked.append(entry)
        self._recent[session] = (key, picked)
        return picked

    def search(self, query: str, limit: int = 10, *, only: str | None = None) -> list[HistoryEntry]:
        """Newest first; `only` keeps one session's entries (a group searches its own)."""
        needle = query.casefold()
        hits = []
        for entry in self.iter_backwards():
            if only is not None and entry.session != only:
                continue
            if needle in entry.content.casefold():
                hits.append(entry)
                if len(hits) >= limit:
                    break
        return hits

    def tools(self) -> list[Tool]:
        return [Tool.from_function(self.search_history)]

    @read_only_tool
    def search_history(
        self,
        query: Annotated[str, Field(min_length=1, description="Words to look for")],
        limit: Annotated[int, Field(ge=1, le=50, description="Most entries to return")] = 10,
    ) -> str:
        """Search the archive of earlier conversations (case-insensitive), newest first."""
        seen_by = current()
        only = None if seen_by is None or seen_by.personal else seen_by.session
        hits = self.search(query, limit, only=only)
        if not hits:
            return f"No history entries match {query!r}."
        return "\n\n".join(f"[{e.timestamp}] ({e.session})\n{e.content}" for e in hits)

    @staticmethod
    def _parse(line: bytes | str) -> HistoryEntry | None:
        if not line.strip():
            return None
        entry = HistoryEntry.from_json(line)
        if entry is None:
            logger.warning("history.jsonl: skipped an unreadable line")
        return entry


def _read_int(path: Path) -> int | None:
    try:
        return int(path.read_text(encoding="utf-8").strip())
    except (FileNotFoundError, ValueError):
        return None

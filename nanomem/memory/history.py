"""memory/history.jsonl: the append-only archive the Consolidator writes and Dream reads."""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from loguru import logger

from nanomem.audience import legacy_room
from nanomem.durable import append_lines, atomic_write_text, truncate_torn_tail
from nanomem.locks import FileLock, in_thread_holding
from nanomem.text import untrusted_json
from nanomem.text.masking import redact
from nanomem.text.utf8 import clean_text

FORMAT_VERSION = 1
RECENT_CHATS = 4096  # chats whose prompt entries are cached
EntryKind = Literal["summary", "raw"]
_BLOCK = 64 * 1024
TEMP_FILE_AGE_S = 60  # an atomic write takes milliseconds: an older temp file is a leftover


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
    imported: str = ""  # the agent it was moved in from (`nanomem import`); its time is theirs
    # From a shared room, by its channel's word; None in an entry written before that was.
    room: bool | None = None

    @property
    def is_room(self) -> bool:
        """From a shared room: as recorded, or by the rule of its time (legacy_room)."""
        return self.room if self.room is not None else legacy_room(self.session)

    def to_json(self) -> str:
        fields = asdict(self)
        if not self.imported:
            del fields["imported"]  # written only where it says something
        if self.room is None:
            del fields["room"]
        return json.dumps(fields, ensure_ascii=False)

    @classmethod
    def from_json(cls, line: str | bytes) -> HistoryEntry | None:
        try:
            data = untrusted_json.loads(line)
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
    timestamp: str = ""  # when it happened, if not now (an imported entry's own time)
    imported: str = ""
    room: bool | None = None  # from a shared room (the session's stored word)


def now_iso() -> str:
    return datetime.now(UTC).astimezone().isoformat(timespec="seconds")


@dataclass
class _Recent:
    """One chat's undigested entries, newest first, as of the archive's newest cursor."""

    max_chars: int
    digested: int
    seen: tuple[int, int, int]  # the file's inode, size and mtime when last looked at
    scanned_to: int  # the newest cursor in the archive at that time
    entries: list[HistoryEntry]


class HistoryStore:
    """Appends hold the home's history lock (across processes) and are fsynced; the newest
    cursor is read from the file under that lock, never from a cache, so any number of
    processes can append. Reads walk the file backwards or binary-search it, so no per-turn
    operation re-parses the whole archive."""

    def __init__(
        self, memory_dir: Path, lock: FileLock | None = None, *, within: Path | None = None
    ) -> None:
        # `within`: the workspace. A shell command may write there, so no link below it is
        # followed when we write (a planted memory/ -> ~/.bashrc.d gets an OSError instead).
        self.within = within
        self.path = memory_dir / "history.jsonl"
        self.cursor_path = memory_dir / ".cursor"
        self.dream_cursor_path = memory_dir / ".dream_cursor"
        self.lock = lock or FileLock(memory_dir / ".history.lock")
        self._lock = asyncio.Lock()  # this process's writers queue here, not by polling
        self._recovered = False
        self._recent: dict[str, _Recent] = {}
        # Run in a worker thread after each append, outside the lock (the recall index).
        self.after_append: list[Callable[[], None]] = []

    # -- writing -------------------------------------------------------------------------

    async def append(self, entries: list[NewEntry]) -> list[HistoryEntry]:
        async with self._lock:
            written = await in_thread_holding(self.lock, self._append, entries)
        for hook in self.after_append:
            await asyncio.to_thread(hook)
        return written

    def append_sync(self, entries: list[NewEntry]) -> list[HistoryEntry]:
        """`append` for a command's own thread (`nanomem import`); the lock is re-entrant there."""
        with self.lock.hold_sync():
            written = self._append(entries)
        for hook in self.after_append:
            hook()
        return written

    def _append(self, entries: list[NewEntry]) -> list[HistoryEntry]:
        """Runs holding the history lock."""
        if not self._recovered:
            self._recover()
        elif self.path.exists() and truncate_torn_tail(self.path, within=self.within):  # died
            logger.warning("history.jsonl: dropped a torn last line")
        last = self.last_cursor()
        stamp = now_iso()
        written = [
            HistoryEntry(
                # A known secret never enters the archive (a summary may quote one).
                last + i,
                e.timestamp or stamp,
                e.session,
                redact(clean_text(e.content)),
                e.kind,
                e.ref,
                e.part,
                e.parts,
                imported=e.imported,
                room=e.room,
            )
            for i, e in enumerate(entries, start=1)
        ]
        self.path.parent.mkdir(parents=True, exist_ok=True)
        append_lines(self.path, [entry.to_json() for entry in written], within=self.within)
        if written:
            atomic_write_text(self.cursor_path, f"{written[-1].cursor}\n", within=self.within)
        return written

    def recover(self) -> None:
        """Repair what a crash may have left: a torn last line, a stale `.cursor`, temp files."""
        with self.lock.hold_sync():
            self._recover()

    def last_cursor(self) -> int:
        """The newest cursor, read from the file (`.cursor` is only a copy of it)."""
        return next((e.cursor for e in self.iter_backwards()), 0)

    def _recover(self) -> None:
        self._recovered = True
        clean_temp_files(self.path.parent)
        if self.path.exists():
            torn = truncate_torn_tail(self.path, within=self.within)
            if torn:
                logger.warning("history.jsonl: dropped a torn last line ({} bytes)", len(torn))
        from_file = self.last_cursor()
        cached = _read_int(self.cursor_path)
        if cached != from_file:
            if cached is not None:
                logger.warning(
                    "memory/.cursor was {}, the history says {}; fixed", cached, from_file
                )
            if from_file or cached is not None:
                atomic_write_text(self.cursor_path, f"{from_file}\n", within=self.within)

    # -- reading -------------------------------------------------------------------------

    def dream_cursor(self) -> int:
        """Always read from the file: another process's Dream may have moved it."""
        return _read_int(self.dream_cursor_path) or 0

    def advance_dream_cursor(self, cursor: int) -> None:
        """Written atomically, and only forward: a restore never makes Dream re-read history.
        The caller holds the Dream lock."""
        if cursor > self.dream_cursor():
            atomic_write_text(self.dream_cursor_path, f"{cursor}\n", within=self.within)

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

        Cached while the archive's file and the Dream cursor stay the same; when the file grew
        (any process may append), only the entries added since are read, so a turn costs a
        stat and a small read.
        """
        digested = self.dream_cursor()
        seen = self._stat()
        cached = self._recent.get(session)
        if cached is not None and cached.max_chars == max_chars:
            if cached.seen == seen and cached.digested == digested:
                return cached.entries
            grown = cached.seen[0] == seen[0] and cached.seen[1] <= seen[1]
            added = self.read_after(cached.scanned_to, scan_limit) if grown else []
            if grown and len(added) < scan_limit:
                # Only appended to. What was cut before is older than all of it, so it stays
                # out: digested, or over the cap. A scan may have seen entries newer than
                # `scanned_to` already: those are not added twice.
                known = cached.entries[0].cursor if cached.entries else 0
                mine = [e for e in reversed(added) if e.session == session and e.cursor > known]
                newest = added[-1].cursor if added else cached.scanned_to
                picked = _within([*mine, *cached.entries], digested, max_chars)
                self._remember(session, _Recent(max_chars, digested, seen, newest, picked))
                return picked
        newest = self.last_cursor()
        scanned = []
        for count, entry in enumerate(self.iter_backwards(digested)):
            if count >= scan_limit:
                break
            if entry.session == session:
                scanned.append(entry)
        picked = _within(scanned, digested, max_chars)
        self._remember(session, _Recent(max_chars, digested, seen, newest, picked))
        return picked

    def _remember(self, session: str, recent: _Recent) -> None:
        """Most recently used chats first to stay: the map never outgrows RECENT_CHATS."""
        self._recent.pop(session, None)
        while len(self._recent) >= RECENT_CHATS:
            del self._recent[next(iter(self._recent))]
        self._recent[session] = recent

    def _stat(self) -> tuple[int, int, int]:
        try:
            info = self.path.stat()
        except FileNotFoundError:
            return (0, 0, 0)
        return (info.st_ino, info.st_size, info.st_mtime_ns)

    @staticmethod
    def _parse(line: bytes | str) -> HistoryEntry | None:
        if not line.strip():
            return None
        entry = HistoryEntry.from_json(line)
        if entry is None:
            logger.warning("history.jsonl: skipped an unreadable line")
        return entry


def _within(entries: list[HistoryEntry], digested: int, max_chars: int) -> list[HistoryEntry]:
    """The newest of `entries` (newest first) that Dream has not digested, within the cap."""
    picked: list[HistoryEntry] = []
    used = 0
    for entry in entries:
        if entry.cursor <= digested:
            break
        used += len(entry.content)
        if used > max_chars:
            break
        picked.append(entry)
    return picked


def clean_temp_files(folder: Path, older_than_s: float = TEMP_FILE_AGE_S) -> None:
    """Remove the temp files (`.<name>.*.tmp`) that `atomic_write_text` leaves when a process
    dies mid-write. Young ones may belong to a write in progress in another process. A folder
    that is a link (a shell command may plant `memory` -> elsewhere) is not ours to clean."""
    if folder.is_symlink():
        logger.warning("{} is a link; its temp files are left alone", folder)
        return
    cutoff = time.time() - older_than_s
    for leftover in folder.glob(".*.tmp"):
        try:
            if leftover.is_file() and leftover.stat().st_mtime < cutoff:
                leftover.unlink()
                logger.info("removed a leftover temp file {}", leftover)
        except FileNotFoundError:
            continue


def _read_int(path: Path) -> int | None:
    try:
        return int(path.read_text(encoding="utf-8").strip())
    except (FileNotFoundError, ValueError):
        return None

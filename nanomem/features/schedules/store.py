"""`$NANOMEM_HOME/schedules.json`: the schedules the chats made, kept across restarts.

Rewritten whole (temp file, fsync, rename) under the home's `schedules` lock, and read fresh
for every change. A person may edit it by hand, so it is read within bounds and entry by entry:

- an entry that cannot be armed (a bad zone, a time out of range or more than ten years
  ahead, an over-long text, beyond `schedule.max_per_chat` or `schedule.max_total`) is left
  in the file exactly as written, also when the file is rewritten, and reported;
- a file that cannot be read at all (over MAX_FILE_BYTES, not JSON, another shape) is left
  alone, reported, and nothing is written over it until a person has fixed it.

A read is kept while the file is unchanged (same inode, size and modification time; every write
is a rename). Firings look their schedule up in it: when each firing parsed and checked the
whole file, a thousand entries firing together held a thousand parses (531 MB) and logged every
bad entry once per firing.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from nanomem.config import ScheduleSettings
from nanomem.durable import atomic_write_text
from nanomem.features.schedules.rules import FORMAT_VERSION, ID_PATTERN, Schedule, ScheduleError
from nanomem.home import Home
from nanomem.locks import FileLock
from nanomem.text import untrusted_json
from nanomem.text.plural import plural

MAX_FILE_BYTES = 1024 * 1024
MAX_FILE_TEXT = "1 MiB"


@dataclass(frozen=True)
class Rejected:
    """An entry of the file that is not armed: kept in the file as it was written."""

    id: str  # its id, or "#N" (its place in the file) when it has none that can be shown
    reason: str
    raw: Any


@dataclass(frozen=True)
class StoredSchedules:
    entries: tuple[Schedule | Rejected, ...] = ()
    problem: str | None = None  # why the file could not be read at all

    @property
    def schedules(self) -> list[Schedule]:
        return [e for e in self.entries if isinstance(e, Schedule)]

    @property
    def rejected(self) -> list[Rejected]:
        return [e for e in self.entries if isinstance(e, Rejected)]


_Key = tuple[int, int, int]


class ScheduleStore:
    """Blocking calls, each holding the home's `schedules` lock: run them in a worker thread."""

    def __init__(
        self, path: Path, lock: FileLock, *, max_per_chat: int = 50, max_total: int = 1000
    ) -> None:
        self.path, self.lock = path, lock
        self.max_per_chat, self.max_total = max_per_chat, max_total
        self._cache: tuple[_Key, StoredSchedules] | None = None

    @classmethod
    def of(cls, home: Home, limits: ScheduleSettings) -> ScheduleStore:
        """The home's schedules.json, within the configured bounds."""
        return cls(
            home.schedules,
            home.lock("schedules"),
            max_per_chat=limits.max_per_chat,
            max_total=limits.max_total,
        )

    def read(self) -> StoredSchedules:
        with self.lock.hold_sync():
            return self._read()

    def read_unlocked(self) -> StoredSchedules:
        """For a reader that must not create the lock file (`nanomem import`'s dry run); each
        write is a rename, so what it reads is a whole file."""
        return self._read()

    def load(self) -> list[Schedule]:
        return self.read().schedules

    def get(self, schedule_id: str) -> Schedule | None:
        return next((s for s in self.load() if s.id == schedule_id), None)

    def add(self, schedule: Schedule) -> None:
        with self.lock.hold_sync():
            stored = self._readable()
            schedules = stored.schedules
            mine = sum(1 for s in schedules if s.session == schedule.session)
            if mine >= self.max_per_chat:
                raise ScheduleError(
                    f"this chat has {plural(mine, 'schedule')}, the most allowed "
                    "(schedule.max_per_chat); cancel one first"
                )
            if len(schedules) >= self.max_total:
                raise ScheduleError(
                    f"this home holds {plural(len(schedules), 'schedule')}, the most allowed in "
                    "all (schedule.max_total)"
                )
            self._write((*stored.entries, schedule))

    def add_all(self, new: list[Schedule]) -> None:
        """Add these (`nanomem import`) in one write, within the same bounds, or none of them."""
        with self.lock.hold_sync():
            stored = self._readable()
            chats = Counter(s.session for s in stored.schedules)
            ids = {s.id for s in stored.schedules}
            for schedule in new:
                self._check_bounds(schedule, chats, ids)
                chats[schedule.session] += 1
                ids.add(schedule.id)
            self._write((*stored.entries, *new))

    def remove(
        self, schedule_id: str, session: str | None = None, made_by: str | None = None
    ) -> Schedule | None:
        """The removed schedule; None when there is none by that id (in that chat's, and made
        by that sender, if given)."""
        with self.lock.hold_sync():
            stored = self._readable()
            found = next((s for s in stored.schedules if s.id == schedule_id), None)
            if found is None or (session is not None and found.session != session):
                return None
            if made_by is not None and found.made_by != made_by:
                return None
            self._write(tuple(e for e in stored.entries if e is not found))
            return found

    def stamp(self) -> _Key | None:
        """Changes whenever the file is written (every write is a rename); None: no file."""
        try:
            info = self.path.stat()
        except FileNotFoundError:
            return None
        return (info.st_ino, info.st_size, info.st_mtime_ns)

    def summary(self) -> str:
        """One line for `nanomem status`: the entries, and those that cannot be armed, why."""
        stored = self.read()
        if stored.problem is not None:
            return stored.problem
        line = f"{len(stored.entries)} in {self.path.name}"
        if rejected := stored.rejected:
            named = "; ".join(f"{r.id} ({r.reason})" for r in rejected[:10])
            more = f"; and {len(rejected) - 10} more" if len(rejected) > 10 else ""
            line += f", {len(rejected)} cannot be armed: {named}{more}"
        return line

    # -- reading and writing, under the lock ------------------------------------------------

    def _readable(self) -> StoredSchedules:
        stored = self._read()
        if stored.problem is not None:  # never written over: a person has to look at it
            raise ScheduleError(stored.problem)
        return stored

    def _read(self) -> StoredSchedules:
        try:
            with self.path.open("rb") as fh:
                info = _key(fh.fileno())
                if self._cache is not None and self._cache[0] == info:
                    return self._cache[1]
                data = fh.read(MAX_FILE_BYTES + 1)  # never more, whatever the file holds
        except FileNotFoundError:
            return StoredSchedules()
        if len(data) > MAX_FILE_BYTES:
            stored = StoredSchedules(problem=self._unread(f"is over {MAX_FILE_TEXT}"))
        else:
            stored = self._parse(data)
        self._cache = (info, stored)
        return stored

    def _unread(self, why: str) -> str:
        return f"{self.path.name} {why}; no schedule in it is armed or changed until it is fixed"

    def _parse(self, data: bytes) -> StoredSchedules:
        try:
            body = untrusted_json.loads(data)  # a hand edit may nest deep enough to recurse
        except UnicodeDecodeError:
            return StoredSchedules(problem=self._unread("is not UTF-8 text"))
        except ValueError as exc:
            return StoredSchedules(problem=self._unread(f"is not valid JSON ({exc})"))
        items = body.get("schedules") if isinstance(body, dict) else None
        if not isinstance(items, list):
            return StoredSchedules(problem=self._unread('is not an object with a "schedules" list'))
        now = datetime.now(UTC)
        entries: list[Schedule | Rejected] = []
        chats: Counter[str] = Counter()
        ids: set[str] = set()
        for place, item in enumerate(items, 1):
            try:
                schedule = Schedule.from_dict(item, now)
                self._check_bounds(schedule, chats, ids)
            except ScheduleError as exc:
                entries.append(Rejected(_label(item, place), str(exc), item))
                continue
            chats[schedule.session] += 1
            ids.add(schedule.id)
            entries.append(schedule)
        return StoredSchedules(tuple(entries))

    def _check_bounds(self, schedule: Schedule, chats: Counter[str], ids: set[str]) -> None:
        if schedule.id in ids:
            raise ScheduleError("an earlier entry has the same id")
        if chats.total() >= self.max_total:
            raise ScheduleError(f"beyond schedule.max_total ({self.max_total} in all)")
        if chats[schedule.session] >= self.max_per_chat:
            raise ScheduleError(
                f"beyond schedule.max_per_chat ({self.max_per_chat} in {schedule.session})"
            )

    def _write(self, entries: tuple[Schedule | Rejected, ...]) -> None:
        items = [e.to_dict() if isinstance(e, Schedule) else e.raw for e in entries]
        text = json.dumps({"v": FORMAT_VERSION, "schedules": items}, ensure_ascii=False, indent=1)
        if len(text.encode("utf-8", "surrogatepass")) >= MAX_FILE_BYTES:
            raise ScheduleError(
                f"{self.path.name} would be over {MAX_FILE_TEXT}; cancel some schedules first"
            )
        atomic_write_text(self.path, text + "\n")
        with self.path.open("rb") as fh:
            self._cache = (_key(fh.fileno()), StoredSchedules(entries))


def _key(fd: int) -> _Key:
    info = os.fstat(fd)
    return (info.st_ino, info.st_size, info.st_mtime_ns)


def _label(item: Any, place: int) -> str:
    """How a rejected entry is named: by its id when that can be shown as it is."""
    found = item.get("id") if isinstance(item, dict) else None
    return found if isinstance(found, str) and ID_PATTERN.fullmatch(found) else f"#{place}"

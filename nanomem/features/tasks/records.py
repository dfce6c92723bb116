"""The record of background tasks: `<home>/tasks.json`, so a restart loses none of them.

Every process that runs tasks holds a run lock (`<home>/locks/tasks-run-<run>.lock`) while it
lives; a task recorded as running under a run whose lock is free was left by a process that is
gone (a flock vanishes with its process, even after SIGKILL; a pid can be reused, in a container
even by the very next start). Changes are read-modify-write under the home's `tasks` lock, and
written whole with a rename (nanomem/durable.py): readers see the old record or the new one.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from dataclasses import asdict, dataclass, field, fields, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from loguru import logger

from nanomem.audience import legacy_room
from nanomem.durable import atomic_write_text
from nanomem.locks import FileLock, LockBusy
from nanomem.text import untrusted_json

FORMAT_VERSION = 1
State = Literal["running", "done", "failed", "limit", "stopped", "interrupted"]
KEEP_FINISHED = 50  # finished tasks kept for /tasks (the newest), once their chat was told


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


@dataclass(frozen=True)
class TaskRecord:
    id: str
    label: str
    session: str  # the chat that started it (`channel:chat`), told of its result
    started_by: str  # the sender's id: who (besides the owner) may stop it in a group
    started_by_name: str
    run: str  # the process that runs it (its run lock's name)
    started_at: str
    state: State = "running"
    ended_at: str = ""
    steps: int = 0
    tokens: int = 0
    result: str = ""  # its final text, or why it failed
    told: bool = False  # its chat was told how it ended
    # Started in a shared room, by its channel's word; None in a record from before that.
    room: bool | None = None

    @property
    def is_room(self) -> bool:
        return self.room if self.room is not None else legacy_room(self.session)

    @property
    def running(self) -> bool:
        return self.state == "running"

    @property
    def task_session(self) -> str:
        """Its own transcript's session key (a chat's key never contains '#')."""
        return task_session(self.session, self.id)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TaskRecord:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


def task_session(chat: str, task_id: str) -> str:
    return f"{chat}#task-{task_id}"


@dataclass
class TaskStore:
    path: Path
    lock: FileLock  # the home's `tasks` lock: every process on the home writes under it
    locks: Path  # the home's lock folder, for run locks
    run: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    _run_lock: FileLock | None = None

    # -- this process's run --------------------------------------------------------------

    async def claim_run(self) -> None:
        """Hold this process's run lock (at its first task): its tasks count as alive."""
        if self._run_lock is None:
            lock = FileLock(self._run_path(self.run))
            await lock.acquire(wait_s=0)
            self._run_lock = lock

    def release_run(self) -> None:
        lock, self._run_lock = self._run_lock, None
        if lock is not None:
            lock.release()
            lock.path.unlink(missing_ok=True)

    def _run_path(self, run: str) -> Path:
        return self.locks / f"tasks-run-{run}.lock"

    def _gone(self, run: str) -> bool:
        """The process of that run has ended (its lock is free); never this one."""
        if run == self.run:
            return False
        lock = FileLock(self._run_path(run))
        try:
            lock.acquire_sync(wait_s=0)
        except LockBusy:
            return False
        try:
            lock.path.unlink(missing_ok=True)
        finally:
            lock.release()
        return True

    # -- reading and changing the record ---------------------------------------------------

    def read(self) -> list[TaskRecord]:
        """Every task recorded, oldest first; an unreadable file counts as empty (logged)."""
        try:
            data = untrusted_json.loads(self.path.read_text(encoding="utf-8"))
            return [TaskRecord.from_dict(item) for item in data["tasks"]]
        except FileNotFoundError:
            return []
        except (ValueError, KeyError, TypeError) as exc:
            logger.error("tasks: {} is unreadable ({}); starting a new record", self.path, exc)
            return []

    def _write(self, records: list[TaskRecord]) -> None:
        finished = [r for r in records if not r.running and r.told]
        dropped = {r.id for r in finished[: max(0, len(finished) - KEEP_FINISHED)]}
        kept = [asdict(r) for r in records if r.id not in dropped]
        text = json.dumps({"v": FORMAT_VERSION, "tasks": kept}, ensure_ascii=False, indent=1)
        atomic_write_text(self.path, text + "\n", mode=0o600)

    async def add(self, record: TaskRecord) -> TaskRecord:
        """Record a new task under an id no other task has; the record as stored."""

        def add() -> TaskRecord:
            with self.lock.hold_sync():
                records = self.read()
                taken = {r.id for r in records}
                stored = record
                while stored.id in taken:
                    stored = replace(stored, id=uuid.uuid4().hex[:4])
                self._write([*records, stored])
                return stored

        return await asyncio.to_thread(add)

    async def update(self, task_id: str, **changes: Any) -> None:
        def update() -> None:
            with self.lock.hold_sync():
                records = self.read()
                self._write([replace(r, **changes) if r.id == task_id else r for r in records])

        await asyncio.to_thread(update)

    async def orphans(self) -> list[TaskRecord]:
        """Tasks whose chat was not told how they ended, left by processes that are gone;
        those still recorded as running are marked interrupted first."""

        def orphans() -> list[TaskRecord]:
            with self.lock.hold_sync():
                records = self.read()
                gone = {run for run in {r.run for r in records if not r.told} if self._gone(run)}
                ended = now_iso()
                changed = [
                    replace(r, state="interrupted", ended_at=ended)
                    if r.running and r.run in gone
                    else r
                    for r in records
                ]
                if changed != records:
                    self._write(changed)
                return [r for r in changed if not r.told and r.run in gone]

        return await asyncio.to_thread(orphans)

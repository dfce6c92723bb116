"""Planning an import against a home and carrying it out.

Everything is read and checked first (the plan); then, holding the home's memory, history and
schedules locks (the ones the gateway's own writers take, so nothing it writes races this),
the plan is made again from what the home holds now and written: skill folders (each written
to a temporary folder, then renamed into place), schedules (one write of schedules.json),
history (one append) and the memory files, which become one memory version. A write that fails
midway (a full disk) leaves what was written; the same import run again finds it (by its
heading, folder, entry or schedule id) and adds only the rest.
"""

from __future__ import annotations

import secrets
import shutil
from dataclasses import dataclass
from pathlib import Path

from nanomem.durable import write_below
from nanomem.features.schedules import ScheduleStore
from nanomem.home import Home
from nanomem.importers.found import Found
from nanomem.importers.plan import ImportPlan, make_plan, trailer
from nanomem.locks import LockBusy
from nanomem.memory import GitStore, HistoryStore, Version

LOCK_WAIT_S = 60.0


@dataclass(frozen=True)
class Target:
    """Where an import goes: the home's stores, as the app builds them."""

    home: Home
    workspace: Path
    git: GitStore
    history: HistoryStore
    schedules: ScheduleStore
    session: str

    @property
    def skills_dir(self) -> Path:
        return self.workspace / "skills"


def plan(found: Found, target: Target) -> ImportPlan:
    # Read without taking the lock: a dry run must not even create the lock file, and every
    # write of schedules.json is a rename, so the file read is a whole one.
    scheduled = {s.id for s in target.schedules.read_unlocked().schedules}
    current = target.git.read_workspace()
    return make_plan(found, current, target.workspace, target.history, target.session, scheduled)


def apply(found: Found, target: Target) -> tuple[ImportPlan, Version | None]:
    """Blocking (run it in a worker thread or a command). The plan as carried out, and the
    memory version it made (None when no memory file changed)."""
    with (
        target.git.writing(),
        target.history.lock.hold_sync(LOCK_WAIT_S),
        target.schedules.lock.hold_sync(LOCK_WAIT_S),
    ):
        target.git.ensure()
        target.git.commit_manual_edits()  # so undoing the import undoes only the import
        done = plan(found, target)
        if done.schedules:  # first: the one step that may still refuse (schedule.max_total)
            target.schedules.add_all(done.schedules)
        for skill in done.skills:
            _copy_skill(target.skills_dir, skill.name, skill.files)
        for rel, data in done.files.items():
            write_below(target.workspace, Path(rel), data, mode=0o600)
        if done.history:
            before = target.history.last_cursor()
            written = target.history.append_sync(done.history)
            done.notes.append(_spare_dream(target, before, written[-1].cursor))
        version = None
        if done.memory:
            files = target.git.read_workspace() | done.memory
            target.git.write_files(files)
            version = target.git.commit_files(
                files, f"import from {found.project}", trailer=trailer(done)
            )
    return done, version


def _spare_dream(target: Target, before: int, last: int) -> str:
    """Mark the imported entries as digested: their lessons came with the imported memory
    files, and Dream reading thousands of them again would spend tokens to learn it twice. Only
    when no history of ours waits for Dream (the cursor only marks everything up to a point),
    and only when no Dream run is going (tried once, never waited for: we hold the memory lock,
    which a run takes after its own)."""
    if target.history.dream_cursor() < before:
        return "Dream will read the imported history with the other new history waiting for it."
    lock = target.home.lock("dream")
    try:
        lock.acquire_sync(0)
    except LockBusy:
        return "Dream is running; it will read the imported history too."
    try:
        target.history.advance_dream_cursor(last)
    finally:
        lock.release()
    return "Dream will not read the imported history again: its lessons came with the memory files."


def _copy_skill(skills_dir: Path, name: str, files: dict[str, bytes]) -> None:
    """Written in full under a temporary name, then renamed: a skill is there whole or not."""
    skills_dir.mkdir(parents=True, exist_ok=True)
    temporary = f".{name}.{secrets.token_hex(4)}.importing"
    try:
        for rel, data in files.items():
            write_below(skills_dir, Path(temporary) / rel, data, mode=0o600)
        (skills_dir / temporary).rename(skills_dir / name)  # fails if the name was taken since
    except BaseException:
        shutil.rmtree(skills_dir / temporary, ignore_errors=True)
        raise

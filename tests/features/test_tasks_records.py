"""The record of background tasks on disk: a task counts as running while the process that
runs it holds its run lock; once that process is gone, the next start finds it, once."""

from __future__ import annotations

from nanomem.features.tasks import TaskRecord, TaskStore
from nanomem.home import Home


def store(home: Home) -> TaskStore:
    return TaskStore(home.tasks, home.lock("tasks"), home.locks)


async def test_a_task_is_an_orphan_only_once_its_process_is_gone(home: Home) -> None:
    running, starting = store(home), store(home)  # two processes on one home
    await running.claim_run()
    record = TaskRecord("3f2a", "notes", "telegram:1", "1", "Ann", running.run, "2026-11-25")
    taken = await running.add(record)
    again = await running.add(record)  # the same id is never given twice
    assert taken.id == "3f2a" and again.id != "3f2a"
    assert await starting.orphans() == []  # its process runs it still
    running.release_run()  # that process is gone
    orphans = await starting.orphans()
    assert {r.id for r in orphans} == {"3f2a", again.id}
    assert {r.state for r in orphans} == {"interrupted"}
    await starting.update("3f2a", told=True)
    assert [r.id for r in await starting.orphans()] == [again.id]


async def test_an_unreadable_record_counts_as_empty(home: Home) -> None:
    home.tasks.write_text("{not json")
    assert store(home).read() == []

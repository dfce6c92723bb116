"""The record of background tasks on disk: a task counts as running while the process that
runs it holds its run lock; once that process is gone, the next start finds it, once."""

from __future__ import annotations

import pytest

from nanomem.agent import Reach
from nanomem.app import build_app
from nanomem.config import ConfigError
from nanomem.features.tasks import BackgroundTasks, TaskRecord, TaskStore
from nanomem.home import Home
from nanomem.providers.scripted import ScriptedProvider
from tests.conftest import make_app, settings_for


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


async def test_the_terminal_leaves_other_chats_orphans_to_the_gateway(home: Home) -> None:
    """`nanomem chat` (no inbox) tells only its own chat of a task a dead process left; the
    gateway tells every chat: a message on a channel that pushes, and the transcript."""
    gone = store(home)
    await gone.claim_run()
    await gone.add(TaskRecord("3f2a", "notes", "telegram:1", "1", "Ann", gone.run, "2026-11-25"))
    gone.release_run()
    terminal = make_app(home, ScriptedProvider())
    tasks = terminal.feature(BackgroundTasks)
    await terminal.start_features(Reach(frozenset({"cli"}), lambda chat, _: chat == "cli:direct"))
    assert tasks.orphans_told is not None
    await tasks.orphans_told
    assert [r.told for r in store(home).read()] == [False]
    await terminal.stop_features(grace_s=0)
    gateway = build_app(settings_for(home), home, provider=ScriptedProvider(), durable=True)
    await gateway.start_features(Reach(frozenset({"telegram"})))
    told = gateway.feature(BackgroundTasks).orphans_told
    assert told is not None
    await told
    notice = "task 3f2a (notes) was interrupted by a restart; ask again to rerun it"
    sent = gateway.bus.outbox("telegram").get_nowait()
    assert (sent.chat_id, sent.content) == ("1", notice)
    session = await gateway.sessions.get("telegram:1")
    assert session.messages[-1]["content"] == notice and session.messages[-1]["aside"]
    assert [r.told for r in store(home).read()] == [True]
    await gateway.stop_features(grace_s=0)
    await gateway.aclose()


def test_the_setting_bounds_tasks_and_zero_switches_them_off(home: Home) -> None:
    with pytest.raises(ConfigError, match=r"agent\.max_background_tasks.*less than or equal"):
        settings_for(home, agent={"max_background_tasks": 65})
    assert "spawn" in make_app(home, ScriptedProvider()).tools.names
    off = make_app(home, ScriptedProvider(), agent={"max_background_tasks": 0})
    assert "spawn" not in off.tools.names
    assert "tasks" not in {command.name for command in off.loop.commands.all()}

"""Dream's edit → commit → cursor step, recovered from every state a kill can leave, and a
person's edit made while a run thinks."""

import os

import pytest

from nanomem.app import App
from nanomem.features.dream import Dreaming
from nanomem.features.dream.dream import NOTHING_NEW
from nanomem.features.dream.journal import CURSOR_TRAILER, Edit, Journal, Staging, journal_of
from nanomem.home import Home
from nanomem.providers.provider import Reply
from nanomem.providers.scripted import ScriptedProvider, call, text
from tests.helpers.dream import LEARN, USER_BEFORE, app_with_history, dream


def pending(app: App) -> Journal:
    """What the LEARN run would journal for the two history entries."""
    staging = Staging(app.git.read_workspace())
    staging.apply(Edit("USER.md", "edit", USER_BEFORE, USER_BEFORE + "- Name: Ada\n"))
    staging.apply(Edit("memory/MEMORY.md", "append", "", "- 2026-11-22: Ada started Apollo"))
    return journal_of(2, app.git.head_sha(), staging)


def write_journal(app: App, journal: Journal) -> None:
    app.feature(Dreaming).dream.journal.path.write_text(journal.to_json() + "\n")


def killed_after_the_journal(app: App, journal: Journal) -> None:
    write_journal(app, journal)


def killed_after_one_file(app: App, journal: Journal) -> None:
    write_journal(app, journal)
    (app.workspace / "USER.md").write_bytes(journal.contents()["USER.md"] or b"")


def killed_after_the_commit(app: App, journal: Journal) -> None:
    write_journal(app, journal)
    app.git.write_files(journal.contents())
    app.git.commit_files(journal.contents(), "dream", f"{CURSOR_TRAILER}: {journal.cursor}")


def killed_before_deleting_the_journal(app: App, journal: Journal) -> None:
    killed_after_the_commit(app, journal)
    app.history.advance_dream_cursor(journal.cursor)


def killed_after_the_commit_and_journal_lost(app: App, journal: Journal) -> None:
    killed_after_the_commit(app, journal)
    app.feature(Dreaming).dream.journal.path.unlink()


def assert_applied_once(app: App, home: Home) -> None:
    user = (app.workspace / "USER.md").read_text()
    memory = (app.workspace / "memory" / "MEMORY.md").read_text()
    assert user.count("- Name: Ada") == 1
    assert memory.count("Ada started Apollo") == 1
    assert app.history.dream_cursor() == 2
    assert not home.dream_journal.exists()
    assert app.git.files_at(app.git.head_sha()) == app.git.read_workspace()
    trailers = [v for v in app.git.log() if f"{CURSOR_TRAILER}: 2" in v.message]
    assert len(trailers) == 1


@pytest.mark.parametrize(
    "kill",
    [
        killed_after_the_journal,
        killed_after_one_file,
        killed_after_the_commit,
        killed_before_deleting_the_journal,
        killed_after_the_commit_and_journal_lost,
    ],
)
async def test_the_next_run_finishes_what_a_kill_interrupted(home: Home, kill) -> None:  # type: ignore[no-untyped-def]
    app = await app_with_history(home, ScriptedProvider([]))
    kill(app, pending(app))
    assert await dream(app) == NOTHING_NEW  # the batch was consumed, once
    assert_applied_once(app, home)


async def test_a_restore_first_finishes_an_interrupted_run(home: Home) -> None:
    app = await app_with_history(home, ScriptedProvider([]))
    killed_after_one_file(app, pending(app))
    initial = app.git.log(limit=1)[0]
    reply = await dream(app, f"/dream-restore {initial.short}")
    assert "first version" in reply  # refused, but the interrupted run was finished first
    assert_applied_once(app, home)


async def test_the_run_edits_a_staging_copy_until_it_has_succeeded(home: Home) -> None:
    user = home.workspace / "USER.md"
    seen: list[str] = []

    async def look(messages):  # type: ignore[no-untyped-def]
        seen.append(user.read_text())  # after the edit call ran, before the run ends
        return text("done")

    steps = [*LEARN[:3], look]
    app = await app_with_history(home, ScriptedProvider(steps))
    before = user.read_text()
    assert (await dream(app)).startswith("Learned from 2")
    assert seen == [before]
    assert "- Name: Ada" in user.read_text()


async def test_a_persons_edit_during_the_run_is_kept_and_the_run_applied_on_top(
    home: Home,
) -> None:
    user = home.workspace / "USER.md"

    async def person_edits(messages):  # type: ignore[no-untyped-def]
        user.write_text(user.read_text() + "- Works at night\n")
        return text("done")

    app = await app_with_history(home, ScriptedProvider([*LEARN[:3], person_edits]))
    assert (await dream(app)).startswith("Learned from 2")
    content = user.read_text()
    assert content.count("- Name: Ada") == 1 and content.count("- Works at night") == 1
    summaries = [v.summary for v in app.git.log(limit=2)]
    assert summaries[0].startswith("dream:") and summaries[1] == "manual edit: USER.md +1 -0"
    assert app.git.files_at(app.git.head_sha()) == app.git.read_workspace()
    assert app.history.dream_cursor() == 2


async def test_a_run_whose_edits_no_longer_apply_changes_nothing(home: Home) -> None:
    user = home.workspace / "USER.md"

    async def person_rewrites(messages):  # type: ignore[no-untyped-def]
        user.write_text("# About me\n- I prefer tea\n")  # the text Dream edits is gone
        return text("done")

    app = await app_with_history(home, ScriptedProvider([*LEARN[:3], person_rewrites]))
    reply = await dream(app)
    assert reply.startswith("Dream failed and changed nothing") and "no longer apply" in reply
    assert user.read_text() == "# About me\n- I prefer tea\n"
    assert "Apollo" not in (home.workspace / "memory" / "MEMORY.md").read_text()
    assert app.history.dream_cursor() == 0 and not home.dream_journal.exists()
    assert app.git.log(limit=1)[0].summary.startswith("manual edit: USER.md")


async def test_leftover_temp_files_are_removed(home: Home) -> None:
    memory = home.workspace / "memory"
    leftovers = [memory / ".cursor.abc123.tmp", home.root / ".dream.json.x1.tmp"]
    young = memory / ".MEMORY.md.now.tmp"  # may be another process's write in progress
    for path in [*leftovers, young]:
        path.write_text("partial")
    for path in leftovers:
        os.utime(path, (1, 1))
    app = await app_with_history(home, ScriptedProvider([text("NOTHING"), text("ok")]))
    await dream(app)
    assert [p.exists() for p in leftovers] == [False, False]
    assert young.exists()


async def test_edits_of_one_step_in_parallel_are_all_kept(home: Home) -> None:
    lines = [f"- fact {i}" for i in range(8)]
    calls = tuple(
        call("append_memory", {"file": "memory/MEMORY.md", "line": line}, f"c{i}").tool_calls[0]
        for i, line in enumerate(lines)
    )
    step = Reply(None, calls)
    app = await app_with_history(home, ScriptedProvider([text("a"), step, text("done")]))
    await dream(app)
    memory = (home.workspace / "memory" / "MEMORY.md").read_text()
    assert sorted(line for line in memory.splitlines() if line.startswith("- fact")) == lines

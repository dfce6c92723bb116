"""Dream with a scripted model: learning, caps, rollback, the lock, restore, and the proof
that something told once is known later."""

import asyncio
import json

import pytest

from nanomem.agent.bus import InboundMessage
from nanomem.app import App
from nanomem.audience import Sender
from nanomem.features.dream import Dreaming
from nanomem.features.dream.commands import SHELL, MemoryCommands
from nanomem.features.dream.dream import NOTHING_NEW
from nanomem.home import Home
from nanomem.memory.history import NewEntry
from nanomem.providers.provider import ProviderError, Reply
from nanomem.providers.scripted import ScriptedProvider, call, text
from tests.conftest import make_app
from tests.helpers.dream import LEARN, app_with_history, dream


async def test_dream_learns_commits_and_advances_the_cursor(home: Home) -> None:
    app = await app_with_history(home, ScriptedProvider(LEARN))
    reply = await dream(app)
    assert reply.startswith("Learned from 2 history entries")
    assert "USER.md: +2 -2" in reply and "memory/MEMORY.md: +1 -0" in reply
    assert "- Name: Ada" in (app.workspace / "USER.md").read_text()
    assert "Apollo" in (app.workspace / "memory" / "MEMORY.md").read_text()
    latest = app.git.log(limit=1)[0]
    assert latest.summary == "dream: USER.md +2 -2, memory/MEMORY.md +1 -0"
    assert app.history.dream_cursor() == 2
    assert json.loads(home.dream_state.read_text())["status"] == "changed"
    assert await dream(app) == NOTHING_NEW


async def test_dream_log_shows_the_diff_and_restore_undoes_it(home: Home) -> None:
    app = await app_with_history(home, ScriptedProvider(LEARN))
    original_user = (app.workspace / "USER.md").read_text()
    await dream(app)
    learned = app.git.log(limit=1)[0]
    log = await dream(app, "/dream-log")
    assert log.startswith(f"`{learned.short}`") and "+- Name: Ada" in log and "```diff" in log
    assert await dream(app, f"/dream_log {learned.sha[:5]}") == log
    listing = await dream(app, "/dream-restore")
    assert learned.short in listing and "initial memory" in listing
    restored = await dream(app, f"/dream-restore {learned.sha[:7]}")
    assert restored.startswith("Restored USER.md, memory/MEMORY.md to before")
    assert (app.workspace / "USER.md").read_text() == original_user
    assert "Apollo" not in (app.workspace / "memory" / "MEMORY.md").read_text()
    assert app.history.dream_cursor() == 2  # the same history is not dreamed again
    restore_sha = app.git.log(limit=1)[0].short
    assert restore_sha in restored
    redo = await dream(app, f"/dream-restore {restore_sha}")
    assert "Restored" in redo and "- Name: Ada" in (app.workspace / "USER.md").read_text()
    assert len(app.git.log()) == 4


async def test_a_run_tells_each_phase_as_it_begins(home: Home) -> None:
    app = await app_with_history(home, ScriptedProvider(LEARN))
    phases: list[str] = []
    result = await app.feature(Dreaming).dream.run("cli", phases.append)
    assert result.status == "changed"
    assert phases == [
        "reading 2 history entries",
        "analysing",
        "editing USER.md",
        "editing memory/MEMORY.md",
        "committing",
    ]


async def test_the_templates_placeholder_goes_with_the_first_real_edit(home: Home) -> None:
    app = await app_with_history(home, ScriptedProvider(LEARN))
    user = app.workspace / "USER.md"
    assert "Nothing is known yet." in user.read_text()
    await dream(app)
    assert user.read_text() == (
        "# User\n- Name: Ada\n- Drinks green tea\n\n"
        "Facts about the person (name, work, preferences, time zone) are added here as they "
        "come up.\n"
    )


async def test_an_older_homes_placeholder_sentence_goes_and_untouched_files_keep_it(
    home: Home,
) -> None:
    only_memory = [
        text("NEW: MEMORY.md: Apollo"),
        call("append_memory", {"file": "memory/MEMORY.md", "line": "- Apollo started"}),
        text("Noted Apollo."),
    ]
    app = await app_with_history(home, ScriptedProvider(only_memory + LEARN))
    user = app.workspace / "USER.md"
    older = "# User\n\nNothing is known yet. Facts about the person (name, work)\nare added here.\n"
    user.write_text(older)
    await app.feature(Dreaming).dream.run()
    assert user.read_text() == older  # the run did not touch USER.md: it is still true
    await app.history.append([NewEntry("cli:direct", "- Ada drinks green tea", "summary")])
    await app.feature(Dreaming).dream.run()
    assert user.read_text() == (
        "# User\n- Name: Ada\n- Drinks green tea\n\nFacts about the person (name, work)\n"
        "are added here.\n"
    )


async def test_the_shell_gets_the_same_texts_in_plain_words(home: Home) -> None:
    app = await app_with_history(home, ScriptedProvider(LEARN))
    await dream(app)
    learned = app.git.log(limit=1)[0]
    shell = MemoryCommands(app.feature(Dreaming).dream, app.git, SHELL)
    log = shell.log_text()
    assert log.startswith(f"{learned.short} ") and "+- Name: Ada" in log and "`" not in log
    assert shell.versions_text().endswith("\nnanomem memory restore <id> undoes one.")
    assert (await dream(app, "/dream-restore")).endswith("\n/dream-restore <id> undoes one.")
    restored = shell.restore_text(learned.short)
    assert f"nanomem memory restore {app.git.log(limit=1)[0].short} undoes this restore" in restored


@pytest.mark.parametrize("argument", ["zzzz", "abc", "00000000"])
async def test_bad_version_ids_change_nothing(home: Home, argument: str) -> None:
    app = await app_with_history(home, ScriptedProvider(LEARN))
    await dream(app)
    before = app.git.log()
    for command in ("/dream-log", "/dream-restore"):
        reply = await dream(app, f"{command} {argument}")
        assert "not a version id" in reply or "no memory version" in reply.lower()
    assert app.git.log() == before


async def test_manual_edits_are_committed_and_kept(home: Home) -> None:
    app = await app_with_history(home, ScriptedProvider(LEARN))
    memory = app.workspace / "memory" / "MEMORY.md"
    memory.write_text(memory.read_text() + "- my own note\n")
    await dream(app)
    summaries = [v.summary for v in app.git.log()]
    assert summaries[1] == "manual edit: memory/MEMORY.md +1 -0"
    assert summaries[0].startswith("dream:")
    assert "- my own note" in memory.read_text() and "Apollo" in memory.read_text()


async def snapshot(app: App) -> tuple[dict[str, bytes | None], int, int]:
    return app.git.read_workspace(), app.history.dream_cursor(), len(app.git.log())


async def test_a_failing_run_leaves_files_and_cursor_untouched(home: Home) -> None:
    steps = [*LEARN[:2], ProviderError("server", "down")]
    app = await app_with_history(home, ScriptedProvider(steps), llm={"max_retries": 0})
    before = await snapshot(app)
    reply = await dream(app)
    assert reply.startswith("Dream failed and changed nothing")
    assert await snapshot(app) == before


async def test_a_runaway_run_hits_the_step_cap_and_is_rolled_back(home: Home) -> None:
    loop_forever = [
        call("append_memory", {"file": "USER.md", "line": f"- junk {i}"}) for i in range(50)
    ]
    app = await app_with_history(
        home, ScriptedProvider([text("analysis"), *loop_forever]), dream={"max_iterations": 3}
    )
    before = await snapshot(app)
    reply = await dream(app)
    assert "step cap (3)" in reply
    assert await snapshot(app) == before


async def test_the_token_cap_stops_a_run(home: Home) -> None:
    from nanomem.providers.provider import Usage

    heavy = [
        Reply(None, call("read_memory", {"file": "USER.md"}).tool_calls, Usage(900, 200))
        for _ in range(20)
    ]
    app = await app_with_history(
        home, ScriptedProvider([text("analysis"), *heavy]), dream={"max_tokens": 3000}
    )
    before = await snapshot(app)
    assert "token cap (3000)" in await dream(app)
    assert await snapshot(app) == before


async def test_the_time_cap_stops_a_run(home: Home) -> None:
    async def slow(messages):  # type: ignore[no-untyped-def]
        await asyncio.sleep(30)

    app = await app_with_history(
        home, ScriptedProvider([*LEARN[:2], slow]), dream={"max_wall_s": 0.5}
    )
    before = await snapshot(app)
    assert "time cap (0.5 s)" in await dream(app)
    assert await snapshot(app) == before


async def test_destructive_edits_are_rejected(home: Home) -> None:
    soul = home.workspace / "SOUL.md"
    original = soul.read_text()
    wipe = call("edit_memory", {"file": "SOUL.md", "old_text": original.strip(), "new_text": "x"})
    app = await app_with_history(home, ScriptedProvider([text("a"), wipe, text("done")]))
    before = await snapshot(app)
    reply = await dream(app)
    assert "would delete" in reply and "SOUL.md" in reply
    assert await snapshot(app) == before


async def test_dream_tools_cannot_touch_other_files(home: Home) -> None:
    sneaky = call("edit_memory", {"file": "memory/history.jsonl", "old_text": "{", "new_text": ""})
    provider = ScriptedProvider([text("a"), sneaky, text("done")])
    app = await app_with_history(home, provider)
    history_before = app.history.path.read_bytes()
    await dream(app)
    assert app.history.path.read_bytes() == history_before
    observation = provider.calls[-1][-1]
    assert observation["role"] == "tool" and "invalid arguments" in observation["content"]
    assert {t["function"]["name"] for t in provider.tools_seen[-1] or []} == {
        "read_memory",
        "edit_memory",
        "append_memory",
    }


async def test_a_batch_with_nothing_to_learn_still_advances(home: Home) -> None:
    app = await app_with_history(
        home, ScriptedProvider([text("NOTHING TO CHANGE"), text("Nothing.")])
    )
    reply = await dream(app)
    assert reply == "Read 2 history entries; nothing worth changing in memory."
    assert app.history.dream_cursor() == 2 and len(app.git.log()) == 1


async def test_a_second_dream_is_refused_while_one_runs(home: Home) -> None:
    started = asyncio.Event()

    async def slow(messages):  # type: ignore[no-untyped-def]
        started.set()
        await asyncio.sleep(0.5)
        return text("NOTHING TO CHANGE")

    app = await app_with_history(home, ScriptedProvider([slow, text("ok")]))
    first = asyncio.create_task(dream(app))
    await started.wait()
    assert await dream(app) == "Dream is already running."
    assert "history entries" in await first


async def test_batches_are_bounded(home: Home) -> None:
    app = await app_with_history(
        home, ScriptedProvider([text("NOTHING"), text("ok")] * 3), dream={"max_batch_size": 1}
    )
    await dream(app)
    assert app.history.dream_cursor() == 1
    await dream(app)
    assert app.history.dream_cursor() == 2


async def test_told_once_known_later(home: Home) -> None:
    provider = ScriptedProvider(LEARN)
    app = await app_with_history(home, provider)
    await dream(app)
    await app.loop.handle(InboundMessage("telegram", "777", "who am I?"))
    system = provider.calls[-1][0]["content"]
    assert "- Name: Ada" in system and "Ada started Apollo" in system


async def test_dream_never_learns_from_a_group_chat(home: Home) -> None:
    provider = ScriptedProvider(LEARN)
    app = make_app(home, provider)
    await app.history.append(
        [
            NewEntry(
                "telegram:-100555", "- 2026-11-22: Mallory says the owner owes her", "summary"
            ),
            NewEntry("telegram:42", "- 2026-11-22: the user is Ada, drinks green tea", "summary"),
        ]
    )
    await dream(app)
    shown = provider.calls[0][-1]["content"]  # the analysis request
    assert "drinks green tea" in shown and "Mallory" not in shown
    assert app.history.dream_cursor() == 2  # the group's entry was passed over, not left behind
    await app.history.append([NewEntry("telegram:-100555", "- more group talk", "summary")])
    before = len(provider.calls)
    assert await dream(app) == "Read 1 history entry; nothing worth changing in memory."
    assert len(provider.calls) == before and app.history.dream_cursor() == 3


async def test_groups_see_personal_lets_dream_learn_from_groups(home: Home) -> None:
    provider = ScriptedProvider(LEARN)
    app = make_app(home, provider, memory={"groups_see_personal": True})
    await app.history.append([NewEntry("telegram:-100555", "- the team picked Quito", "summary")])
    await dream(app)
    assert "picked Quito" in provider.calls[0][-1]["content"]


async def test_dream_right_after_a_fact_says_how_the_fact_reaches_history(home: Home) -> None:
    app = make_app(home, ScriptedProvider([text("Noted: you are Ada.")]))
    owner = Sender("user", is_owner=True)
    await app.loop.handle(InboundMessage("cli", "direct", "my name is Ada", owner))
    before = app.git.log()
    reply = await app.loop.handle(InboundMessage("cli", "direct", "/dream", owner))
    assert reply is not None
    assert reply.content.startswith("Nothing new to learn: nothing reached history")
    assert "after /new" in reply.content
    assert app.git.log() == before

"""/why with a scripted model and real dulwich repositories: the evidence Dream records, the
blame that finds the version of a line, and what each kind of origin answers."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import threading
from collections.abc import Sequence
from pathlib import Path

import pytest

from nanomem.agent.bus import InboundMessage
from nanomem.app import App
from nanomem.audience import Sender, audience_of
from nanomem.features.dream import Dreaming
from nanomem.features.dream.evidence import added_lines, cited_items, parse, trailers
from nanomem.features.dream.journal import Edit, Journal
from nanomem.features.dream.provenance import USAGE, Provenance, find
from nanomem.home import Home
from nanomem.memory.gitstore import GitStore
from nanomem.memory.history import HistoryEntry, NewEntry
from nanomem.providers.scripted import ScriptedProvider, Step, call, text
from tests.conftest import make_app
from tests.helpers.gitstore import FromScratch

ADA = "- 2026-11-22: the user is Ada, she moved to Quito last month"
APOLLO = "- 2026-11-22: Ada started project Apollo with Grace"
CITED = [
    text(
        "NEW:\n- USER.md: lives in Quito [entry 1]\n"
        "- memory/MEMORY.md, ## Projects: Apollo, started with Grace [entries 2]\n"
        "CORRECT: NOTHING\nREMOVE: NOTHING"
    ),
    call(
        "edit_memory",
        {"file": "USER.md", "old_text": "# User\n", "new_text": "# User\n- Lives in Quito\n"},
    ),
    call(
        "edit_memory",
        {
            "file": "memory/MEMORY.md",
            "old_text": "## Projects",
            "new_text": "## Projects\n- Apollo, started with Grace",
        },
    ),
    text("Added Quito and Apollo."),
]
UNCITED = [text("NEW: USER.md: lives in Quito"), *CITED[1:]]


async def dreamed(home: Home, steps: Sequence[Step], **sections: dict[str, object]) -> App:
    app = make_app(home, ScriptedProvider(steps), **sections)
    await app.history.append(
        [NewEntry("telegram:42", ADA, "summary"), NewEntry("telegram:43", APOLLO, "summary")]
    )
    result = await app.feature(Dreaming).dream.run()
    assert result.status == "changed", result.reason
    return app


async def why(app: App, words: str, session: str = "cli:direct") -> str:
    channel, _, chat = session.partition(":")
    # The owner: a group member's /why is refused when groups see personal memory.
    owner = Sender(is_owner=True, shared_room=chat.startswith("-"))  # as Telegram says
    reply = await app.loop.handle(InboundMessage(channel, chat, f"/why {words}".rstrip(), owner))
    assert reply is not None
    return reply.content


# -- the evidence Dream records --------------------------------------------------------------


def test_citations_are_read_in_their_usual_forms_and_nothing_else_counts() -> None:
    analysis = (
        "- lives in Quito [entry 3]\n"
        "- likes tea (entries 4, 5)\n"
        "- Apollo [6-8]\n"
        "- on 2026-11-22 (2026-11-22) nothing cited\n"
        "- a number that is no entry of the run [99]\n"
        "- no citation at all"
    )
    items = cited_items(analysis, known={3, 4, 5, 6, 7, 8, 11, 22})
    assert [cursors for _, cursors in items] == [(3,), (4, 5), (6, 7, 8)]


def test_only_the_lines_an_edit_brings_in_are_its_own() -> None:
    edit = Edit("USER.md", "edit", "## Places\n- Old line", "## Places\n- New line\n- Old line")
    assert added_lines(edit) == ["- New line"]
    assert added_lines(Edit("USER.md", "append", "", "- Appended")) == ["- Appended"]


def test_trailers_round_trip_and_an_uncited_line_has_no_source() -> None:
    entries = [
        HistoryEntry(7, "2026-11-22T10:00:00+00:00", "telegram:42", ADA, "summary"),
        HistoryEntry(8, "2026-11-22T11:00:00+00:00", "cli:my laptop", APOLLO, "summary"),
    ]
    edits = [
        Edit("USER.md", "append", "", "- Lives in Quito"),
        Edit("USER.md", "append", "", '- Likes "quoted" words'),
    ]
    lines = trailers(
        (6, 8),
        entries,
        "- USER.md: lives in Quito [entry 7]",
        edits,
        {"USER.md": '- Lives in Quito\n- Likes "quoted" words\n'},
    )
    found = parse(
        "dream: USER.md +2 -0\n\n+- Lives in Quito\n\nDream-Cursor: 8\n" + "\n".join(lines)
    )
    assert found.cursor == 8 and found.read == (6, 8)
    assert found.entries[8].session == "cli:my laptop"
    assert found.cited("USER.md", "- Lives in Quito") == (7,)
    assert found.cited("USER.md", '- Likes "quoted" words') == ()


def test_a_journal_keeps_its_evidence_through_a_crash() -> None:
    journal = Journal(3, None, {"USER.md": "x\n"}, [], ["Dream-Read: 1-3"])
    assert Journal.from_json(journal.to_json()).evidence == ["Dream-Read: 1-3"]
    older = json.loads(journal.to_json())
    del older["evidence"]  # a journal written before evidence existed still loads
    assert Journal.from_json(json.dumps(older)).evidence == []


async def test_a_dream_commit_carries_its_evidence_where_git_reads_it(home: Home) -> None:
    app = await dreamed(home, CITED)
    message = app.git.log(limit=1)[0].message
    assert "Dream-Cursor: 2" in message and "Dream-Read: 1-2" in message
    assert "Dream-Entry: 1 " in message and " telegram:42" in message
    assert 'Dream-Source: USER.md 1 "- Lives in Quito"' in message
    git = shutil.which("git")
    if git:
        listed = subprocess.run(
            [
                git,
                f"--git-dir={home.memory_git}",
                "log",
                "-1",
                "--format=%(trailers:key=Dream-Source,valueonly)",
            ],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        assert 'memory/MEMORY.md 2 "- Apollo, started with Grace"' in listed


# -- finding the line ------------------------------------------------------------------------


def test_a_substring_wins_then_the_closest_words() -> None:
    files = {"USER.md": "# User\n- Lives in Quito\n- Likes quiet mornings\n"}
    line, _ = find("quito", files)
    assert line is not None and line.number == 2
    line, _ = find("why do you think I live in Quito?", files)
    assert line is not None and line.text == "- Lives in Quito"
    line, closest = find("favourite colour", files)
    assert line is None and len(closest) == 2
    assert find("colour", {"USER.md": "# User\n"}) == (None, [])  # headings are not lines
    line, closest = find("lives on Mars", files)
    assert line is None or line.text == "- Lives in Quito"


# -- what /why answers -----------------------------------------------------------------------


async def test_a_learned_line_names_the_chat_and_quotes_the_entry_it_was_cited_from(
    home: Home,
) -> None:
    app = await dreamed(home, CITED)
    version = app.git.log(limit=1)[0]
    answer = await why(app, "Apollo")
    assert answer.splitlines()[0] == "memory/MEMORY.md, line 10: “- Apollo, started with Grace”"
    assert f"by Dream run {version.short}" in answer and answer.splitlines()[1].endswith("from:")
    assert "telegram chat 43, 20" in answer and "Ada started project Apollo with Grace" in answer
    assert "telegram chat 42" not in answer  # the other entry taught it something else
    quito = await why(app, "do you think I live in quito")
    assert "telegram chat 42" in quito and "moved to Quito" in quito


async def test_a_run_that_cited_nothing_falls_back_to_the_entries_it_read(home: Home) -> None:
    app = await dreamed(home, UNCITED)
    answer = await why(app, "Quito")
    assert "read 2 history entries and did not say which one" in answer
    assert answer.splitlines()[2].startswith("- telegram chat 42") and "moved to Quito" in answer
    assert "telegram chat 43" not in answer  # an entry that shares no word with the line


async def test_a_run_from_before_the_evidence_records_is_traced_by_its_cursor(
    home: Home,
) -> None:
    app = make_app(home, ScriptedProvider([]))
    await app.history.append(
        [NewEntry("telegram:42", ADA, "summary"), NewEntry("telegram:43", APOLLO, "summary")]
    )
    files = app.git.read_workspace()
    files["USER.md"] = b"# User\n- Lives in Quito\n"
    app.git.write_files(files)
    old = app.git.commit_files(files, "dream", "Dream-Cursor: 2")  # as Dream wrote them before
    assert old is not None
    answer = await why(app, "Quito")
    assert (
        f"by Dream run {old.short}" in answer and "from history up to entry 2; probably:" in answer
    )
    assert "telegram chat 42" in answer and "telegram chat 43" not in answer


async def test_lines_written_by_hand_say_so(home: Home) -> None:
    app = await dreamed(home, CITED)
    user = app.workspace / "USER.md"
    user.write_text(user.read_text() + "- Allergic to cats\n")
    uncommitted = await why(app, "cats")
    assert "Written by hand" in uncommitted and "not saved as a version yet" in uncommitted
    saved = app.git.commit_manual_edits()
    assert saved is not None
    committed = await why(app, "cats")
    assert f"saved as manual edit {saved.short}" in committed
    assert "Dream run" in await why(app, "Quito")  # the line above it is still Dream's
    template = await why(app, "Confirm before doing anything irreversible")
    assert "Not learned by Dream" in template


async def test_a_line_a_restore_brought_back_is_traced_to_the_dream_that_wrote_it(
    home: Home,
) -> None:
    app = await dreamed(home, CITED)
    learned = app.git.log(limit=1)[0]
    undone = app.git.restore(learned.sha)
    assert "Apollo" not in (app.workspace / "memory" / "MEMORY.md").read_text()
    assert (await why(app, "Apollo")).startswith("No remembered line matches")
    redone = app.git.restore(undone.version.sha)
    answer = await why(app, "Apollo")
    assert f"Put back by restore {redone.version.short}" in answer
    assert f"by Dream run {learned.short}" in answer and "telegram chat 43" in answer


async def test_no_match_lists_the_closest_lines_and_no_words_get_the_usage(home: Home) -> None:
    app = await dreamed(home, CITED)
    answer = await why(app, "Quito Ecuador Andes mountains")
    assert answer.startswith("No remembered line matches")
    assert "- USER.md: “- Lives in Quito”" in answer
    assert await why(app, "") == USAGE
    assert await why(app, "   ") == USAGE


async def test_a_group_asks_only_about_what_it_may_see(home: Home) -> None:
    steps = [
        text("NEW: SOUL.md: greet in Spanish [entry 1]"),
        call("append_memory", {"file": "SOUL.md", "line": "- Greets in Spanish, since Quito"}),
        call("append_memory", {"file": "USER.md", "line": "- Lives in Quito"}),
        text("done"),
    ]
    app = await dreamed(home, steps)
    group = "telegram:-100555"
    hidden = await why(app, "Lives in Quito", session=group)
    assert "USER.md" not in hidden and not hidden.startswith("USER.md")
    soul = await why(app, "Greets in Spanish", session=group)
    assert soul.startswith("SOUL.md") and "another conversation" in soul
    assert "telegram chat 42" not in soul and "moved to Quito" not in soul
    private = await why(app, "Greets in Spanish", session="telegram:42")
    assert "telegram chat 42" in private and "moved to Quito" in private


async def test_a_group_sees_everything_when_groups_see_personal(home: Home) -> None:
    app = await dreamed(home, CITED, memory={"groups_see_personal": True})
    answer = await why(app, "Quito", session="telegram:-100555")
    assert answer.startswith("USER.md") and "moved to Quito" in answer


def test_the_shell_is_the_owner(home: Home) -> None:
    app = make_app(home, ScriptedProvider([]))
    provenance = Provenance(app.git, app.history)
    assert provenance.answer("Confirm before").startswith("SOUL.md, line 12")
    assert audience_of("telegram:-1", True).personal is False  # the rule the chat command applies


@pytest.mark.parametrize("words", ["", "  "])
def test_usage_for_no_words(home: Home, words: str) -> None:
    app = make_app(home, ScriptedProvider([]))
    assert Provenance(app.git, app.history).answer(words) == USAGE


def test_blame_on_the_bare_repository_names_the_version_of_each_line(tmp_path: Path) -> None:
    workspace = tmp_path / "workspace"
    (workspace / "memory").mkdir(parents=True)
    memory = workspace / "memory" / "MEMORY.md"
    memory.write_text("# Memory\n")
    git = GitStore(tmp_path / "memory.git", workspace)
    git.ensure()
    first = git.log(limit=1)[0].sha
    memory.write_text("# Memory\n- one\n")
    second = git.commit_if_changed("manual edit")
    memory.write_text("# Memory\n- one\n- two\n")
    third = git.commit_if_changed("manual edit")
    assert second is not None and third is not None
    assert git.blame("memory/MEMORY.md") == [
        (first, "# Memory"),
        (second.sha, "- one"),
        (third.sha, "- two"),
    ]
    assert git.blame("memory/MEMORY.md", at=second.sha) == [
        (first, "# Memory"),
        (second.sha, "- one"),
    ]
    assert git.blame("USER.md") == []  # not in any version
    assert git.parents(third.sha) == [second.sha]


class WatchedBlame(GitStore):
    """Notes how many blames run at once; the first waits a while for company."""

    def __init__(self, git: GitStore) -> None:
        super().__init__(git.git_dir, git.workspace, lock=git.lock)
        self.count_lock, self.running, self.most = threading.Lock(), 0, 0
        self.company = threading.Event()

    def blame(self, rel: str, at: str | None = None) -> list[tuple[str, str]]:
        with self.count_lock:
            self.running += 1
            self.most = max(self.most, self.running)
            if self.running > 1:
                self.company.set()
        try:
            self.company.wait(2)  # a second blame arrives at once when nothing serialises them
            return super().blame(rel, at)
        finally:
            with self.count_lock:
                self.running -= 1


async def test_a_burst_of_why_traces_one_line_at_a_time(home: Home) -> None:
    app = await dreamed(home, CITED)
    watched = WatchedBlame(app.git)
    provenance = Provenance(watched, app.history)
    asked = [InboundMessage("telegram", "42", f"/why Quito {i}") for i in range(3)]
    answers = await asyncio.gather(*(provenance._why(m, "Quito") for m in asked))
    assert all(a.startswith("USER.md") for a in answers)
    assert watched.most == 1


async def test_blame_reads_the_whole_history_once_and_follows_new_versions_from_there(
    home: Home,
) -> None:
    app = await dreamed(home, CITED)
    counted = FromScratch(app.git)
    provenance = Provenance(counted, app.history)
    first = provenance.answer("Quito")
    assert provenance.answer("Lives in Quito") == first and counted.count == 1
    user = app.workspace / "USER.md"
    user.write_text(user.read_text() + "- Likes tea\n")
    assert app.git.commit_manual_edits() is not None
    assert provenance.answer("Quito") == first  # the line is still Dream's
    assert "manual edit" in provenance.answer("Likes tea")
    assert counted.count == 1  # the new version's blame came from the one before
    fresh = Provenance(FromScratch(app.git), app.history)  # control: nothing kept
    assert fresh.answer("Likes tea") == provenance.answer("Likes tea")


async def test_a_line_by_its_number_has_the_why_of_its_words_as_data(home: Home) -> None:
    """The web app's Memory page asks by line number; its answer is /why's own, as data."""
    app = await dreamed(home, CITED)
    provenance = app.feature(Dreaming).provenance
    found = provenance.line_at("memory/MEMORY.md", 10)
    assert found is not None
    line, live = found
    answer = await provenance.traced(line, live)
    assert answer.text() == await why(app, "Apollo")
    assert answer.version == app.git.log(limit=1)[0]
    (source,) = answer.sources
    assert (source.session, source.where) == ("telegram:43", "telegram chat 43")
    assert source.quote == APOLLO and not source.missing
    assert provenance.line_at("memory/MEMORY.md", 1) is None  # a heading: nothing to ask
    assert provenance.line_at("USER.md", 999) is None
    assert provenance.line_at("config.toml", 1) is None


async def test_an_edit_made_in_the_web_app_is_said_to_be_yours(home: Home) -> None:
    from nanomem.memory import save_edit, shown

    app = await dreamed(home, CITED)
    now = shown(app.git)
    text = (now.files["USER.md"] or b"").decode() + "- Allergic to cats\n"
    edited = save_edit(app.git, "USER.md", text, "cats", now.head or "", now.digests["USER.md"])
    answer = await why(app, "cats")
    assert f"Edited by you in the web app: version {edited.short}" in answer
    assert answer.endswith("“cats”.")

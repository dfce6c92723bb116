"""The data behind the Memory, Timeline and Dream review pages: diffs as coloured lines, a
file as lines each with its why, facts counted per version once and per day."""

from __future__ import annotations

from datetime import date, timedelta
from pathlib import Path

import pytest

from channels.web.diffs import changed_lines, parse
from channels.web.memory_chart import FactCounts
from channels.web.memory_page import blocks
from nanomem.features.dream.review import diff_of
from nanomem.memory.gitstore import GitStore

GIT_DIFF = """diff --git a/USER.md b/USER.md
index 1111111..2222222 100644
--- a/USER.md
+++ b/USER.md
@@ -1,2 +1,3 @@
 # User
--- a line that looks like a header
+- Name: Ada
+<script>alert(1)</script>
diff --git a/memory/MEMORY.md b/memory/MEMORY.md
new file mode 100644
--- /dev/null
+++ b/memory/MEMORY.md
@@ -0,0 +1 @@
+- Apollo
"""


def test_a_git_diff_becomes_files_of_classed_lines() -> None:
    diff = parse(GIT_DIFF)
    assert [f.path for f in diff.files] == ["USER.md", "memory/MEMORY.md"]
    user, memory = diff.files
    assert [(line.kind, line.text) for line in user.lines] == [
        ("hunk", "@@ -1,2 +1,3 @@"),
        ("ctx", " # User"),
        ("del", "--- a line that looks like a header"),  # inside a hunk: content
        ("add", "+- Name: Ada"),
        ("add", "+<script>alert(1)</script>"),
    ]
    assert (user.added, user.removed, memory.added) == (2, 1, 1)
    assert diff.cut == 0


def test_a_review_diff_from_difflib_parses_alike() -> None:
    text, stats = diff_of(
        {"USER.md": b"# User\n", "SOUL.md": b"a\n"},
        {"USER.md": b"# User\n- Ada\n", "SOUL.md": b"b\n"},
    )
    files = {f.path: (f.added, f.removed) for f in parse(text).files}
    assert files == stats == {"SOUL.md": (1, 1), "USER.md": (1, 0)}


def test_a_huge_diff_is_cut_with_its_count_and_long_lines_are_clipped() -> None:
    lines = [f"+line {i}" for i in range(1000)] + ["+" + "x" * 50_000]
    diff = parse("--- a/USER.md\n+++ b/USER.md\n@@ -0,0 +1,1001 @@\n" + "\n".join(lines), 100)
    (user,) = diff.files
    assert len(user.lines) == 100 and diff.cut == 1 + 1001 - 100
    assert user.added == 1001  # counted whole, shown in part
    whole = parse("--- a/U\n+++ b/U\n@@ -0,0 +1 @@\n+" + "x" * 50_000)
    assert len(whole.files[0].lines[-1].text) < 2_100


def test_changed_lines_are_the_texts_added_and_removed() -> None:
    added, removed = changed_lines(GIT_DIFF)
    assert added == ["- Name: Ada", "<script>alert(1)</script>", "- Apollo"]
    assert removed == ["-- a line that looks like a header"]


def test_each_line_is_a_block_with_its_number_and_a_code_block_stays_whole() -> None:
    text = "# User\n\n- Name: <b>Ada</b>\nplain words\n```\ncode\n```\n---\n"
    found = blocks(text)
    assert [(b.number, b.askable) for b in found] == [
        (1, False),  # a heading: nothing to ask
        (3, True),
        (4, True),
        (5, False),  # the fenced block, whole
        (8, False),  # a rule has no words
    ]
    assert "&lt;b&gt;Ada&lt;/b&gt;" in found[1].html  # raw HTML stays text
    assert "<code>code" in found[3].html
    assert found[0].html.startswith("<h3>")  # below the page's h1 and the file's h2
    assert blocks("###### deep")[0].html.startswith("<h6>")
    assert found[1].hash != found[2].hash


@pytest.fixture
def store(tmp_path: Path) -> GitStore:
    root = tmp_path / "ws"
    (root / "memory").mkdir(parents=True)
    (root / "SOUL.md").write_text("# Soul\n- kind\n")
    (root / "USER.md").write_text("# User\n")
    (root / "memory" / "MEMORY.md").write_text("# Memory\n")
    git = GitStore(tmp_path / "memory.git", root)
    git.ensure()
    return git


class Counting(FactCounts):
    """Counts how often a version is read (the costly part)."""

    reads = 0

    def count(self, sha: str):  # type: ignore[no-untyped-def]
        before = dict(self._counted)
        counted = super().count(sha)
        if sha not in before:
            self.reads += 1
        return counted


def test_facts_per_day_are_counted_once_per_version(store: GitStore) -> None:
    workspace = store.workspace
    (workspace / "USER.md").write_text("# User\n- Ada\n- tea\n")
    store.commit_manual_edits()
    (workspace / "USER.md").write_text("# User\n- Ada\n- coffee\n\n")
    store.commit_manual_edits()
    counts = Counting(store)
    today = date.today()
    days = counts.daily(days=3, today=today)
    assert [d.day for d in days] == [today - timedelta(days=2), today - timedelta(days=1), today]
    assert [(d.added, d.removed, d.facts) for d in days] == [(0, 0, 0), (0, 0, 0), (4, 1, 3)]
    assert counts.reads == 3
    counts.daily(days=3, today=today)
    assert counts.reads == 3  # versions never change: read once
    later = counts.daily(days=3, today=today + timedelta(days=5))
    assert [(d.added, d.removed, d.facts) for d in later] == [(0, 0, 3)] * 3  # carried over


def test_a_young_memory_is_drawn_over_a_week(store: GitStore) -> None:
    days = FactCounts(store).daily()
    assert len(days) == 7 and days[-1].day == date.today()
    assert days[-1].facts == 1 and days[0].facts == 0

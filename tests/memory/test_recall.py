import json
import sqlite3
from pathlib import Path
from time import monotonic

import pytest

from nanomem.audience import audience_of
from nanomem.features.recall.matches import TimedOut, newest, ranked
from nanomem.features.recall.recall import Recall
from nanomem.memory.history import HistoryEntry, HistoryStore, NewEntry
from nanomem.tools import OUTSIDE, ToolContext
from nanomem.tools.registry import ToolError
from tests.conftest import log_lines


@pytest.fixture
def store(tmp_path: Path) -> HistoryStore:
    return HistoryStore(tmp_path / "memory")


@pytest.fixture
def recall(store: HistoryStore, tmp_path: Path) -> Recall:
    found = Recall(store, tmp_path / "index" / "history.sqlite3")
    store.after_append.append(found.sync_quietly)
    return found


def entry(text: str, session: str = "telegram:1") -> NewEntry:
    return NewEntry(session, text, "summary")


def cursors(recall: Recall, query: str, **kwargs: object) -> list[int]:
    return [hit.cursor for hit in recall.search(query, **kwargs).hits]  # type: ignore[arg-type]


def write(store: HistoryStore, entries: list[HistoryEntry]) -> None:
    store.path.parent.mkdir(parents=True, exist_ok=True)
    store.path.write_text("".join(e.to_json() + "\n" for e in entries))


async def test_words_in_any_order_and_the_better_match_first(
    store: HistoryStore, recall: Recall
) -> None:
    await store.append(
        [
            entry("- the notebook is in the attic"),
            entry("- bought a new notebook"),
            entry("- cleaned the attic; the attic notebook of grandpa, a notebook on birds"),
            entry("- nothing about it"),
        ]
    )
    assert cursors(recall, "attic notebook") == [3, 1]  # more of both words ranks higher
    assert cursors(recall, "NOTEBOOK Attic") == [3, 1]


async def test_prefix_and_phrase(store: HistoryStore, recall: Recall) -> None:
    await store.append([entry("- the notebook is in the attic"), entry("- attics are dusty")])
    await store.append([entry("- in the garden, the attic key")])
    assert sorted(cursors(recall, "attic*")) == [1, 2, 3]
    assert cursors(recall, '"in the attic"') == [1]
    assert cursors(recall, '"attic is in"') == []


async def test_no_entry_with_every_word_falls_back_to_any(
    store: HistoryStore, recall: Recall
) -> None:
    await store.append([entry("- mum's birthday is in May"), entry("- the dentist on Friday")])
    assert cursors(recall, "when is mum birthday") == [1]


async def test_since_and_until(store: HistoryStore, recall: Recall) -> None:
    write(
        store,
        [
            HistoryEntry(1, "2026-01-05T10:00:00+00:00", "telegram:1", "- tea in January", "raw"),
            HistoryEntry(2, "2026-02-05T10:00:00+00:00", "telegram:1", "- tea in February", "raw"),
            HistoryEntry(3, "2026-03-05T10:00:00+00:00", "telegram:1", "- tea in March", "raw"),
        ],
    )
    chat = ToolContext(audience=audience_of("telegram:1", False))
    assert sorted(cursors(recall, "tea")) == [1, 2, 3]
    feb = recall.search_history(chat, "tea", since="2026-02-01", until="2026-02-28")
    assert "February" in feb and "January" not in feb and "March" not in feb
    assert "January" not in recall.search_history(chat, "tea", since="2026-02-05")
    assert "March" not in recall.search_history(chat, "tea", until="2026-02-05")
    with pytest.raises(ToolError):
        recall.search_history(chat, "tea", since="last tuesday")


def test_dates_without_an_offset_are_read_in_the_agents_time_zone(
    store: HistoryStore, tmp_path: Path
) -> None:
    # 23:30 UTC on 1 March is already 2 March in Tokyo (UTC+9).
    late = HistoryEntry(1, "2026-03-01T23:30:00+00:00", "telegram:1", "- tea late at night", "r")
    write(store, [late])
    chat = ToolContext(audience=audience_of("telegram:1", False))
    tokyo = Recall(store, tmp_path / "tokyo.sqlite3", "Asia/Tokyo")
    utc = Recall(store, tmp_path / "utc.sqlite3", "UTC")
    assert "late at night" in tokyo.search_history(chat, "tea", since="2026-03-02")
    assert "late at night" not in tokyo.search_history(chat, "tea", until="2026-03-01")
    assert "late at night" in utc.search_history(chat, "tea", until="2026-03-01")  # control
    assert "late at night" not in utc.search_history(chat, "tea", since="2026-03-02")


async def test_an_entry_stamped_out_of_order_never_shows_outside_the_dates(
    store: HistoryStore, recall: Recall
) -> None:
    write(
        store,
        [
            HistoryEntry(1, "2026-01-05T10:00:00+00:00", "telegram:1", "- tea in January", "raw"),
            HistoryEntry(2, "2026-03-05T10:00:00+00:00", "telegram:1", "- tea in March", "raw"),
            # The clock was set back before this one was written.
            HistoryEntry(3, "2026-02-05T10:00:00+00:00", "telegram:1", "- tea in February", "raw"),
        ],
    )
    chat = ToolContext(audience=audience_of("telegram:1", False))
    march = recall.search_history(chat, "tea", since="2026-03-01")
    assert "March" in march and "February" not in march and "January" not in march


async def test_a_group_searches_only_its_own_entries(store: HistoryStore, recall: Recall) -> None:
    await store.append(
        [
            entry("- the owner's locker code is 9876", "telegram:1"),
            entry("- the group's code word is ant", "telegram:-5"),
            entry("- another group's code is bee", "telegram:-6"),
        ]
    )
    chat = ToolContext(audience=audience_of("telegram:-5", True))
    answer = recall.search_history(chat, "code")
    assert "ant" in answer and "9876" not in answer and "bee" not in answer
    chat = ToolContext(
        audience=audience_of("telegram:1", False)
    )  # the owner's private chat sees everything
    answer = recall.search_history(chat, "code")
    assert "ant" in answer and "9876" in answer and "bee" in answer


async def test_results_say_when_and_where_and_quote_the_match(
    store: HistoryStore, recall: Recall
) -> None:
    long = " ".join(f"filler{i}" for i in range(200))
    await store.append([entry(f"- {long} the attic key is blue {long}", "telegram:7")])
    chat = ToolContext(audience=audience_of("telegram:7", False))
    answer = recall.search_history(chat, "attic")
    header, quote = answer.split("\n", 1)
    stamp = json.loads(store.path.read_text().splitlines()[0])["timestamp"]
    assert header == f"[{stamp}] (telegram:7) #1"
    assert "the attic key is blue" in quote and len(quote) < 400 and "…" in quote


HOSTILE = [
    *['"', 'a"b', "AND", "OR NOT", "(", ")", "*", "-attic", "attic:", "col:attic", "NEAR(a b)"],
    *["^attic", "{content}: x", "'", "\\", "a AND OR b", "\x00", "+", "attic**", '""""'],
]


@pytest.mark.parametrize(
    "query",
    HOSTILE,
)
async def test_fts_syntax_in_a_query_never_raises(
    store: HistoryStore, recall: Recall, query: str
) -> None:
    await store.append([entry("- the attic: a NEAR miss (and OR not)")])
    answer = recall.search_history(OUTSIDE, query)
    assert answer.startswith(("No history entries match", "[", f"{query!r} has no words"))


async def test_a_nul_in_a_query_is_a_space(store: HistoryStore, recall: Recall) -> None:
    await store.append([entry("- the notebook is in the attic")])
    assert cursors(recall, "attic\x00notebook") == [1]
    assert cursors(recall, '"the attic\x00') == [1]


async def test_index_follows_appends_by_another_process(
    store: HistoryStore, recall: Recall, tmp_path: Path
) -> None:
    await store.append([entry("- first, about the attic")])
    assert cursors(recall, "attic") == [1]
    other = HistoryStore(tmp_path / "memory")  # another process: no hook to our index
    await other.append([entry("- second, about the attic too")])
    assert sorted(cursors(recall, "attic")) == [1, 2]


async def test_two_processes_share_one_index_without_rebuilding_it(
    store: HistoryStore, recall: Recall, tmp_path: Path
) -> None:
    with log_lines() as lines:
        other = HistoryStore(tmp_path / "memory")
        theirs = Recall(other, recall.path)  # another process, the same index file
        other.after_append.append(theirs.sync_quietly)
        await store.append([entry("- ours, about the attic")])
        assert cursors(theirs, "attic") == [1]
        await other.append([entry("- theirs, about the attic")])
        await store.append([entry("- ours again, the attic")])
        assert sorted(cursors(recall, "attic")) == [1, 2, 3]
        assert sorted(cursors(theirs, "attic")) == [1, 2, 3]
        assert not [line for line in lines if "rebuilding" in line]
        theirs.close()


async def test_missing_or_broken_index_is_rebuilt(store: HistoryStore, recall: Recall) -> None:
    await store.append([entry("- the attic"), entry("- the cellar")])
    recall.close()
    recall.path.unlink()
    assert cursors(recall, "cellar") == [2]
    recall.close()
    for suffix in ("-wal", "-shm"):
        recall.path.with_name(recall.path.name + suffix).unlink(missing_ok=True)
    recall.path.write_bytes(b"this is not a database" * 100)
    assert cursors(recall, "attic") == [1]


async def test_an_index_of_another_version_is_rebuilt(store: HistoryStore, recall: Recall) -> None:
    recall.path.parent.mkdir(parents=True)
    older = sqlite3.connect(recall.path)
    older.executescript(
        "CREATE VIRTUAL TABLE entries USING fts5(content, session UNINDEXED);"
        "CREATE TABLE meta (name TEXT PRIMARY KEY, value TEXT NOT NULL);"
        "INSERT INTO meta VALUES ('cursor', '1'), ('stamp', 'x');"
    )
    older.close()
    await store.append([entry("- the attic"), entry("- the cellar")])
    assert cursors(recall, "cellar") == [2]


async def test_a_replaced_history_file_rebuilds_the_index(
    store: HistoryStore, recall: Recall
) -> None:
    await store.append([entry("- the attic"), entry("- the cellar"), entry("- the roof")])
    assert cursors(recall, "roof") == [3]
    # Restored from an older backup: fewer entries, so the index is ahead of the file.
    write(store, [HistoryEntry(1, "2026-01-01T00:00:00+00:00", "telegram:1", "- a barn", "raw")])
    assert cursors(recall, "roof") == []
    assert cursors(recall, "barn") == [1]
    # Replaced by another archive with as many entries: the stamps differ.
    write(
        store,
        [
            HistoryEntry(1, "2026-02-01T00:00:00+00:00", "telegram:1", "- a boat", "raw"),
        ],
    )
    assert cursors(recall, "barn") == []
    assert cursors(recall, "boat") == [1]


async def test_an_empty_archive(recall: Recall) -> None:
    assert recall.search_history(OUTSIDE, "anything") == "No history entries match 'anything'."


async def test_past_its_time_limit_a_search_stops_with_a_note(
    store: HistoryStore, tmp_path: Path
) -> None:
    await store.append([entry(f"- the attic, box {i} of many notebooks") for i in range(500)])
    hurried = Recall(store, tmp_path / "index" / "history.sqlite3", time_limit_s=1e-9)
    answer = hurried.search_history(OUTSIDE, "attic notebooks box")
    assert answer.startswith("The search stopped at its time limit (1e-09 s)"), answer
    hurried.close()
    patient = Recall(store, tmp_path / "index" / "history.sqlite3")  # control: the same search
    assert patient.search_history(OUTSIDE, "attic notebooks box").startswith("[")
    patient.close()


async def test_ranking_out_of_time_gives_way_to_the_newest_matches(
    store: HistoryStore, recall: Recall
) -> None:
    await store.append([entry(f"- the attic, box {i}") for i in range(2000)])
    recall.sync()
    db = sqlite3.connect(recall.path)
    match = 'content : ("attic")'
    with pytest.raises(TimedOut):
        ranked(db, match, 5, None, None, deadline=monotonic() - 1)
    found = newest(db, match, 5, None, None, deadline=monotonic() + 60)
    assert [hit.cursor for hit in found] == [2000, 1999, 1998, 1997, 1996]
    db.close()

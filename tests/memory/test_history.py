import asyncio
import json
import os
from pathlib import Path

import pytest

from nanomem.memory.history import RECENT_CHATS, HistoryStore, NewEntry, clean_temp_files


@pytest.fixture
def store(tmp_path: Path) -> HistoryStore:
    return HistoryStore(tmp_path / "memory")


def entry(text: str, session: str = "cli:direct") -> NewEntry:
    return NewEntry(session, text, "summary")


async def test_cursors_increase_and_lines_are_versioned(store: HistoryStore) -> None:
    first = await store.append([entry("a"), entry("b")])
    second = await store.append([entry("c")])
    assert [e.cursor for e in first + second] == [1, 2, 3]
    lines = [json.loads(line) for line in store.path.read_text().splitlines()]
    assert [line["cursor"] for line in lines] == [1, 2, 3]
    assert all(line["v"] == 1 and line["kind"] == "summary" for line in lines)
    assert lines[0]["timestamp"][-6] in "+-"  # ISO-8601 with a zone
    assert store.cursor_path.read_text().strip() == "3"


async def test_torn_line_and_stale_cursor_are_recovered(store: HistoryStore) -> None:
    await store.append([entry("a"), entry("b")])
    with store.path.open("a") as fh:
        fh.write('{"cursor": 3, "content": "tor')  # the process died mid-write
    store.cursor_path.write_text("garbage")
    fresh = HistoryStore(store.path.parent)
    assert fresh.last_cursor() == 2
    fresh.recover()
    assert fresh.cursor_path.read_text().strip() == "2"
    written = await fresh.append([entry("c")])
    assert written[0].cursor == 3
    assert [e.content for e in fresh.iter_backwards()] == ["c", "b", "a"]


async def test_cursor_file_behind_the_archive_is_corrected(store: HistoryStore) -> None:
    await store.append([entry("a"), entry("b"), entry("c")])
    store.cursor_path.write_text("1\n")  # a crash between the append and the cursor write
    assert HistoryStore(store.path.parent).last_cursor() == 3


async def test_backward_reading_crosses_block_boundaries(store: HistoryStore) -> None:
    texts = [f"entry {i} " + "x" * 700 for i in range(300)]  # ~210 KB: several 64 KB blocks
    await store.append([entry(t) for t in texts])
    assert [e.content for e in store.iter_backwards()] == texts[::-1]
    assert [e.cursor for e in store.iter_backwards(stop_at_cursor=295)] == [300, 299, 298, 297, 296]


async def test_read_after_finds_the_same_entries_as_a_full_scan(store: HistoryStore) -> None:
    await store.append([entry(f"e{i} " + "y" * 300) for i in range(2000)])
    for cursor in (0, 1, 2, 999, 1500, 1999, 2000, 5000):
        expected = list(range(cursor + 1, min(cursor + 25, 2000) + 1))
        assert [e.cursor for e in store.read_after(cursor, 25)] == expected


async def test_recent_is_this_chats_undigested_entries_newest_first(store: HistoryStore) -> None:
    await store.append([entry("old"), entry("other", "telegram:9"), entry("mid"), entry("new")])
    store.dream_cursor_path.write_text("1\n")
    assert [e.content for e in store.recent("cli:direct", 1000)] == ["new", "mid"]
    assert [e.content for e in store.recent("cli:direct", 4)] == ["new"]
    assert [e.content for e in store.recent("telegram:9", 1000)] == ["other"]


async def test_recent_notices_new_entries_and_dream_progress(store: HistoryStore) -> None:
    await store.append([entry("one")])
    assert [e.content for e in store.recent("cli:direct", 1000)] == ["one"]
    await store.append([entry("two")])
    assert [e.content for e in store.recent("cli:direct", 1000)] == ["two", "one"]
    store.dream_cursor_path.write_text("2\n")
    assert store.recent("cli:direct", 1000) == []


async def test_recent_notices_what_another_process_appended(store: HistoryStore) -> None:
    await store.append([entry("mine")])
    assert [e.content for e in store.recent("cli:direct", 1000)] == ["mine"]
    other = HistoryStore(store.path.parent)  # another process on the same home
    await other.append([entry("theirs", "telegram:9"), entry("mine, from there")])
    assert [e.content for e in store.recent("cli:direct", 1000)] == ["mine, from there", "mine"]
    assert [e.cursor for e in await store.append([entry("next")])] == [4]  # no cached cursor
    assert [e.content for e in store.recent("cli:direct", 22)] == ["next", "mine, from there"]


async def test_recent_reads_only_what_was_appended(store: HistoryStore) -> None:
    await store.append([entry("mine")])
    assert [e.content for e in store.recent("cli:direct", 1000)] == ["mine"]
    # Rewritten behind the store's back, before the end it has read: a rescan would show it.
    store.path.write_text(store.path.read_text().replace("mine", "MINE"))
    await store.append([entry("theirs", "telegram:9"), entry("new")])
    assert [e.content for e in store.recent("cli:direct", 1000)] == ["new", "mine"]


def test_the_per_chat_cache_stays_bounded(tmp_path: Path) -> None:
    store = HistoryStore(tmp_path / "memory")
    asyncio.run(store.append([NewEntry("cli:a", "- a fact", "summary")]))
    for n in range(RECENT_CHATS + 50):
        store.recent(f"telegram:{n}", 1000)
    assert len(store._recent) == RECENT_CHATS
    assert [e.content for e in store.recent("cli:a", 1000)] == ["- a fact"]  # still right


def test_temp_files_are_not_cleaned_through_a_folder_planted_as_a_link(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    theirs = elsewhere / ".notes.1234.tmp"
    theirs.write_text("someone else's")
    os.utime(theirs, (0, 0))  # old enough to look like a leftover of ours
    (tmp_path / "memory").symlink_to(elsewhere)
    clean_temp_files(tmp_path / "memory")
    assert theirs.read_text() == "someone else's"
    ours = tmp_path / "real"
    ours.mkdir()
    leftover = ours / ".notes.1234.tmp"
    leftover.write_text("")
    os.utime(leftover, (0, 0))
    clean_temp_files(ours)  # the positive control: a real folder's leftover goes
    assert not leftover.exists()

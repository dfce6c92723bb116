"""The web app's index of the chats' own messages: ranked, each hit at its place in its chat,
following appended, replaced and removed session files; and the marks on a snippet's words."""

from __future__ import annotations

import json
from pathlib import Path

from nanomem.features.recall import MessageIndex, marked
from nanomem.memory.session import SessionStore, session_filename


def index_of(tmp_path: Path) -> MessageIndex:
    return MessageIndex(tmp_path / "sessions", tmp_path / "index" / "messages.sqlite3")


async def chat(tmp_path: Path, key: str, *texts: str, room: bool | None = None) -> None:
    """Messages saved as the agent saves them: the user's with the runtime line first."""
    store = SessionStore(tmp_path / "sessions")
    session = await store.get(key)
    if room is not None:
        await store.mark_room(session, room)
    messages = []
    for i, text in enumerate(texts):
        if i % 2 == 0:
            runtime = "[runtime · 2026-11-22 10:03:00 CET (UTC+0100) · Sunday · channel telegram]"
            messages.append({"role": "user", "content": f"{runtime}\n\n{text}"})
        else:
            messages.append({"role": "assistant", "content": text})
    await store.append(session, messages)


async def test_a_message_is_found_at_its_place_in_its_chat_best_match_first(
    tmp_path: Path,
) -> None:
    await chat(tmp_path, "telegram:42", "where is the notebook?", "The notebook is in the attic.")
    await chat(tmp_path, "cli:direct", "hello", "hi", "attic notebook attic notebook", "noted")
    found = index_of(tmp_path).search("attic notebook")
    assert [(h.session, h.index, h.role) for h in found.hits] == [
        ("cli:direct", 2, "user"),
        ("telegram:42", 1, "assistant"),
    ]
    assert found.hits[0].snippet == "attic notebook attic notebook"  # no runtime line
    assert not any(h.room for h in found.hits)


async def test_the_runtime_line_and_tool_output_are_not_searched(tmp_path: Path) -> None:
    await chat(tmp_path, "telegram:1", "hello there")
    store = SessionStore(tmp_path / "sessions")
    session = await store.get("telegram:1")
    await store.append(session, [{"role": "tool", "tool_call_id": "x", "content": "zebra"}])
    index = index_of(tmp_path)
    assert index.search("runtime").hits == []
    assert index.search("zebra").hits == []
    assert [h.index for h in index.search("hello").hits] == [0]


async def test_appended_messages_are_found_and_a_removed_chat_is_not(tmp_path: Path) -> None:
    index = index_of(tmp_path)
    await chat(tmp_path, "telegram:1", "first apples")
    assert [h.index for h in index.search("apples").hits] == [0]
    await chat(tmp_path, "telegram:1", "more apples please")
    assert sorted(h.index for h in index.search("apples").hits) == [0, 1]
    (tmp_path / "sessions" / session_filename("telegram:1")).unlink()
    assert index.search("apples").hits == []


async def test_a_replaced_file_is_read_again_from_its_start(tmp_path: Path) -> None:
    index = index_of(tmp_path)
    await chat(tmp_path, "telegram:1", "old pears", "older pears")
    assert len(index.search("pears").hits) == 2
    path = tmp_path / "sessions" / session_filename("telegram:1")
    replaced = path.with_suffix(".new")
    header = {"_type": "session", "version": 2, "key": "telegram:1", "created_at": ""}
    lines = [header, {"role": "user", "content": "only plums now"}]
    replaced.write_text("".join(json.dumps(line) + "\n" for line in lines))
    replaced.replace(path)
    assert index.search("pears").hits == []
    assert [h.index for h in index.search("plums").hits] == [0]


async def test_a_half_written_last_line_waits_and_a_bad_line_is_skipped(tmp_path: Path) -> None:
    await chat(tmp_path, "telegram:1", "kiwis")
    path = tmp_path / "sessions" / session_filename("telegram:1")
    with path.open("a") as fh:
        fh.write("not json\n")
        fh.write('{"role": "assistant", "content": "more kiw')
    index = index_of(tmp_path)
    assert [h.index for h in index.search("kiwis").hits] == [0]
    with path.open("a") as fh:
        fh.write('is"}\n')
    assert sorted(h.index for h in index.search("kiwis").hits) == [0, 1]


async def test_a_room_is_labelled_as_its_channel_said(tmp_path: Path) -> None:
    await chat(tmp_path, "telegram:-100", "group figs", room=True)
    await chat(tmp_path, "telegram:5", "private figs", room=False)
    rooms = {h.session: h.room for h in index_of(tmp_path).search("figs").hits}
    assert rooms == {"telegram:-100": True, "telegram:5": False}


async def test_an_unreadable_index_is_built_again(tmp_path: Path) -> None:
    await chat(tmp_path, "telegram:1", "grapes")
    path = tmp_path / "index" / "messages.sqlite3"
    path.parent.mkdir(parents=True)
    path.write_bytes(b"not a database at all" * 100)
    assert [h.index for h in index_of(tmp_path).search("grapes").hits] == [0]


async def test_hostile_queries_are_text_and_bounded(tmp_path: Path) -> None:
    await chat(tmp_path, "telegram:1", "the quick fox (AND) NEAR me")
    index = index_of(tmp_path)
    for query in ['fox" OR *', "a\x00fox", "(AND)", "NEAR(", "x" * 100_000, "*" * 1000, ""]:
        found = index.search(query)
        assert isinstance(found.hits, list)
    assert [h.index for h in index.search('fox" OR *').hits] == [0]
    assert any("cut" in note for note in index.search("fox " * 1000).notes)


def test_matched_words_are_marked_as_the_index_compares_them() -> None:
    assert marked("The Café in the attic; attics too", "cafe attic*") == [
        ("The ", False),
        ("Café", True),
        (" in the ", False),
        ("attic", True),
        ("; ", False),
        ("attics", True),
        (" too", False),
    ]
    assert marked("an exact phrase here", '"exact phrase"') == [
        ("an ", False),
        ("exact", True),
        (" ", False),
        ("phrase", True),
        (" here", False),
    ]
    assert marked("<script>alert(1)</script>", "script") == [
        ("<", False),
        ("script", True),
        (">alert(1)</", False),
        ("script", True),
        (">", False),
    ]
    assert marked("nothing", "") == [("nothing", False)]


async def test_a_chat_longer_than_a_read_block_is_indexed_whole(tmp_path: Path) -> None:
    # 5 MB of one message: more than a block (4 MiB) is read before its line ends.
    await chat(tmp_path, "telegram:1", "haystack " + "x" * 5_000_000, "the needle is here")
    index = index_of(tmp_path)
    assert [h.index for h in index.search("needle").hits] == [1]
    assert [h.index for h in index.search("haystack").hits] == [0]

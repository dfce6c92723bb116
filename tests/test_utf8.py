"""Everything written is valid UTF-8: lone surrogates become U+FFFD; no write fails on them."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from nanomem.durable import append_lines, atomic_write_text
from nanomem.memory.history import HistoryStore, NewEntry
from nanomem.memory.session import SessionStore
from nanomem.text.utf8 import clean_text, clean_value, decode

LONE = "\ud83d"  # half of 😀 (U+1F600 is \ud83d\ude00)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("plain", "plain"),
        ("😀 ok", "😀 ok"),
        (f"a{LONE}b", "a\ufffdb"),
        ("\udc80\udcff", "\ufffd\ufffd"),  # bytes decoded with surrogateescape
        (f"{LONE}\ude00", "😀"),  # a pair that arrived as two halves is joined
        (f"\ude00{LONE}", "\ufffd\ufffd"),  # halves in the wrong order are not
    ],
)
def test_clean_text(text: str, expected: str) -> None:
    assert clean_text(text) == expected


def test_clean_value_walks_json_values() -> None:
    value = {"a": [LONE, {"b": LONE}], LONE: 1, "n": None}
    assert clean_value(value) == {"a": ["\ufffd", {"b": "\ufffd"}], "\ufffd": 1, "n": None}


def test_decode_reports_invalid_bytes() -> None:
    assert decode("café".encode()) == ("café", True)
    assert decode(b"caf\xe9") == ("caf\ufffd", False)


def test_writers_never_fail_on_a_lone_surrogate(tmp_path: Path) -> None:
    append_lines(tmp_path / "log.jsonl", [f"one {LONE}", "two"])
    atomic_write_text(tmp_path / "file.md", f"three {LONE}")
    assert (tmp_path / "log.jsonl").read_bytes().decode("utf-8") == "one \ufffd\ntwo\n"
    assert (tmp_path / "file.md").read_bytes().decode("utf-8") == "three \ufffd"


async def test_session_append_keeps_a_reply_with_a_lone_surrogate(tmp_path: Path) -> None:
    store = SessionStore(tmp_path)
    session = await store.get("telegram:42")
    reply = {"role": "assistant", "content": f"half {LONE}", "tool_calls": None}
    await store.append(session, [{"role": "user", "content": "hi"}, reply])
    assert session.messages[-1]["content"] == "half \ufffd"  # memory holds what the file holds
    reloaded = await SessionStore(tmp_path).get("telegram:42")
    assert [m["content"] for m in reloaded.messages] == ["hi", "half \ufffd"]
    assert reloaded.created_at


async def test_a_failed_first_write_does_not_lose_the_header(tmp_path: Path) -> None:
    store = SessionStore(tmp_path)
    session = await store.get("cli:direct")
    session.path.mkdir()  # the first write fails (a folder where the file should be)
    with pytest.raises(OSError):
        await store.append(session, [{"role": "user", "content": "lost"}])
    shutil.rmtree(session.path)
    await store.append(session, [{"role": "user", "content": "kept"}])
    first = json.loads(session.path.read_text(encoding="utf-8").splitlines()[0])
    assert first["_type"] == "session" and first["key"] == "cli:direct"
    reloaded = await SessionStore(tmp_path).get("cli:direct")
    assert reloaded.created_at and [m["content"] for m in reloaded.messages] == ["kept"]


async def test_history_entries_are_valid_utf8(tmp_path: Path) -> None:
    store = HistoryStore(tmp_path / "memory")
    written = await store.append([NewEntry("cli:direct", f"- fact {LONE}", "summary")])
    assert written[0].content == "- fact \ufffd"
    line = store.path.read_bytes().decode("utf-8")
    assert json.loads(line)["content"] == "- fact \ufffd"
    assert [e.content for e in store.iter_backwards()] == ["- fact \ufffd"]

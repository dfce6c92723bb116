"""The Chat page's data: conversations listed from the home's sessions, a session a page at a
time, what open pages are sent, and files in and out."""

from __future__ import annotations

import asyncio
import io
import os
from pathlib import Path
from typing import Any, SupportsIndex

import pytest

from channels.web.chat_files import SentFiles, kind_of, saved_name, shown_name
from channels.web.conversations import PAGE, Conversations, entries, page_before, person_text
from channels.web.live import PAGES_PER_CHAT, QUEUED, Live
from nanomem.agent import File
from nanomem.features.voice import is_own_voice, is_spoken
from nanomem.memory import SessionStore

PNG = bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
    "1f15c4890000000d49444154789c6360f8cf000000030101005c6b6a0f0000000049454e44ae426082"
)


async def saved(folder: Path, key: str, messages: list[dict[str, Any]], room: bool = False) -> None:
    store = SessionStore(folder)
    session = await store.get(key)
    await store.mark_room(session, room)
    await store.append(session, messages)


async def test_conversations_are_listed_newest_first_with_their_first_words(
    tmp_path: Path,
) -> None:
    runtime = "[runtime · 2026-11-28 · Saturday · channel telegram]\n[attachments: a.png]\n\n"
    await saved(
        tmp_path,
        "telegram:-1007",
        [{"role": "user", "content": runtime + "plan the trip"}],
        room=True,
    )
    await saved(
        tmp_path,
        "cli:default",
        [{"role": "user", "content": "one two three four five six seven eight nine ten"}],
    )
    await saved(tmp_path, "web:abcdefgh12", [{"role": "assistant", "content": "hello"}])
    (tmp_path / "notes.jsonl").write_text("not a session\n")
    now = 2_000_000_000
    for age, name in enumerate(sorted(tmp_path.glob("*.jsonl"))):
        os.utime(name, (now - age, now - age))
    found = Conversations(tmp_path).newest()
    keys = {c.key: c for c in found}
    assert set(keys) == {"telegram:-1007", "cli:default", "web:abcdefgh12"}
    assert [c.when for c in found] == sorted((c.when for c in found), reverse=True)
    assert keys["telegram:-1007"].title == "plan the trip" and keys["telegram:-1007"].room
    assert keys["cli:default"].title == "one two three four five six seven eight …"
    assert keys["web:abcdefgh12"].title == "" and keys["web:abcdefgh12"].writable
    assert not keys["cli:default"].writable
    assert keys["telegram:-1007"].url == "/chat/c/telegram%3A-1007"
    assert len(Conversations(tmp_path).newest(count=1)) == 1


def test_the_persons_words_are_shown_without_the_runtime_line() -> None:
    assert person_text("[runtime · now · channel web]\n\nhi\n\nthere") == "hi\n\nthere"
    assert person_text([{"type": "text", "text": "look"}, {"type": "image_url"}]) == "look "
    assert person_text(None) == ""


class Counting(list[dict[str, Any]]):
    """A transcript that counts the messages read from it."""

    reads = 0

    def __getitem__(self, index: SupportsIndex | slice) -> Any:  # type: ignore[override]
        Counting.reads += 1
        return super().__getitem__(index)


def test_a_page_of_a_long_session_reads_only_that_page() -> None:
    messages = Counting({"role": "user", "content": f"m{n}"} for n in range(100_000))
    shown = page_before(messages, None)
    assert (shown.start, shown.stop) == (100_000 - PAGE, 100_000)
    Counting.reads = 0
    page = entries(messages, shown.start, shown.stop)
    assert [e.index for e in page] == list(shown) and Counting.reads == PAGE
    older = page_before(messages, 10)
    assert (older.start, older.stop) == (0, 10)
    assert page_before(messages, 10**9).stop == 100_000


def test_entries_show_each_kind_of_message() -> None:
    call = {"function": {"name": "exec", "arguments": '{"command": "ls"}'}}
    when = "2026-11-28T01:02:03"
    messages = [
        {"role": "user", "content": "[runtime]\n\nrun it", "in": "in-3", "ts": when},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "name": "exec", "content": "x" * 5000},
        {"role": "assistant", "content": "done", "failed": "media"},
        {"role": "assistant", "content": ""},
        {"role": "system", "content": "never shown"},
    ]  # fmt: skip
    person, call, result, reply = entries(messages, 0, len(messages))
    assert (person.kind, person.text, person.sent_in, person.when) == (
        "person",
        "run it",
        "in-3",
        "2026-11-28 01:02",
    )
    assert call.steps[0].tool == "exec" and call.text == ""
    assert result.kind == "result" and len(result.text) == 2000 and result.tool == "exec"
    assert reply.failed and reply.anchor == "m3"


async def test_a_page_that_joins_is_sent_what_is_live_and_only_that() -> None:
    live = Live()
    live.sent("c1", "in-1", "<p>mine</p>")
    live.started("c1", "in-1")
    live.step("c1", "in-1", "exec(command='ls')")
    live.delta("c1", "in-1", 0, "Hel", "Hel")
    live.delta("c1", "in-1", 0, "lo", "Hello")
    live.note("c1", "<p>a note</p>")
    opened = live.open("c1", shown=4, note=0)
    assert opened is not None
    page, events = opened
    assert [(e.name, e.data) for e in events] == [
        ("sent", {"html": "<p>mine</p>", "in": "in-1"}),
        ("turn", {"state": "started", "turn": "in-1"}),
        ("step", {"turn": "in-1", "line": "exec(command='ls')"}),
        ("delta", {"turn": "in-1", "step": 0, "piece": "Hello"}),  # the text so far, once
        ("note", {"html": "<p>a note</p>"}),
    ]
    assert events[-1].id == "4.1"
    assert live.open("c1", shown=4, note=1) is not None  # a note it saw is not sent again
    live.sent("c1", "in-2", "<p>/help</p>")  # a command: never saved in the session
    live.ended("c1", "in-1")
    live.ended("c1", "in-2")
    again = live.open("c1", shown=6, note=1)
    assert again is not None and again[1] == []  # no bubble left waiting for nothing
    live.saved("c1", {"in-1"})
    live.delta("c1", "in-3", 0, "x", "x")
    assert page.queue.qsize() == 4  # the second bubble, two turns' ends, the new piece


async def test_open_pages_are_bounded_and_one_too_far_behind_is_dropped() -> None:
    live = Live()
    pages = [live.open("c1", 0, 0) for _ in range(PAGES_PER_CHAT)]
    assert all(pages) and live.open("c1", 0, 0) is None
    first = pages[0]
    assert first is not None
    for n in range(QUEUED + 1):
        live.delta("c1", "t", 0, "x", "x" * n)
    assert first[0] not in live.chats["c1"].pages  # dropped: it ends and reconnects
    queued = [first[0].queue.get_nowait() for _ in range(first[0].queue.qsize())]
    assert queued[-1] is None and all(queued[:-1])  # what it had, then its end
    assert live.open("c1", 0, 0) is not None  # its place is free again
    live.shutdown()
    assert live.open("c2", 0, 0) is None


def test_files_are_taken_by_what_they_are_not_what_they_are_called() -> None:
    assert kind_of(PNG, recorded=False) == ("photo", ".png")
    assert kind_of(b"%PDF-1.4 ...", recorded=False) == ("document", ".pdf")
    assert kind_of(b"OggS\0\2" + b"\0" * 30, recorded=True) == ("voice", ".ogg")
    assert kind_of(b"RIFF\0\0\0\0WAVEfmt ", recorded=False) == ("audio", ".wav")
    assert kind_of(b"<html><script>alert(1)</script>", recorded=False) is None
    assert kind_of(b"<svg onload=alert(1)>", recorded=False) is None
    recorded = saved_name(".webm", recorded=True)
    assert is_own_voice(recorded) and is_spoken(recorded)
    assert not is_own_voice(saved_name(".ogg", recorded=False))
    assert shown_name("C:\\Users\\x\\..\\evil[1].png") == "evil1.png"
    assert shown_name("../../\x00\x1b[31m") == "31m"
    assert shown_name("") == "file" and len(shown_name("a" * 500)) == 100


def test_a_sent_file_is_found_only_in_its_own_conversation(tmp_path: Path) -> None:
    sent = SentFiles(tmp_path / "web-files", tmp_path / "workspace")
    file_id, name = sent.add("web:aaaaaaaa", File("out/report.txt"))
    assert name == "report.txt"
    found = sent.find("web:aaaaaaaa", file_id)
    assert found is not None and found.path == "out/report.txt"
    assert sent.find("web:bbbbbbbb", file_id) is None
    assert sent.find("web:aaaaaaaa", "../" + file_id) is None
    assert sent.find("web:aaaaaaaa", "A" * 32) is None


@pytest.mark.parametrize("name", ["report.txt", "page.html"])
async def test_a_sent_file_is_served_as_an_attachment(tmp_path: Path, name: str) -> None:
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    (workspace / name).write_text("<script>alert(1)</script>")
    sent = SentFiles(tmp_path / "web-files", workspace)
    file_id, _ = await asyncio.to_thread(sent.add, "web:aaaaaaaa", File(name))
    response = await sent.response("web:aaaaaaaa", file_id)
    assert response.content_type == "application/octet-stream"
    assert response.headers["Content-Disposition"].startswith(f'attachment; filename="{name}"')
    (workspace / name).unlink()
    with pytest.raises(Exception, match="Not Found"):
        await sent.response("web:aaaaaaaa", file_id)


def test_a_file_name_cannot_pretend_to_be_another_by_its_direction(tmp_path: Path) -> None:
    # U+202E turns "invoice<U+202E>fdp.exe" into what reads as "invoiceexe.pdf"; zero-width and the
    # other bidi controls hide or reorder characters the same way, in and out.
    tricks = "invoice\u202efdp.exe", "a\u2066b\u2069\u200bc\u200f\u061c.png"
    assert [shown_name(name) for name in tricks] == ["invoicefdp.exe", "abc.png"]
    sent = SentFiles(tmp_path / "web-files", tmp_path / "workspace")
    assert sent.add("web:aaaaaaaa", File("out/report\u202efdp.exe"))[1] == "reportfdp.exe"


async def test_a_form_of_endless_parts_is_refused_not_read_to_its_end() -> None:
    # Parts that are no field of ours, or empty files, were each read and let go: a form of
    # a million of them kept the handler reading for as long as the sender liked.
    from aiohttp import FormData, web
    from aiohttp.test_utils import TestClient, TestServer

    from channels.web.chat_files import MAX_FILES, Refused, read_form

    async def read(request: web.Request) -> web.Response:
        try:
            form = await read_form(request, max_mb=1)
        except Refused as exc:
            return web.Response(status=exc.status, text=str(exc))
        return web.Response(text=f"{form.text}|{len(form.files)}")

    server = web.Application()
    server.router.add_post("/", read)
    async with TestClient(TestServer(server)) as client:
        for name, filename in (("junk", None), ("file", "empty.png"), ("text", None)):
            form = FormData(default_to_multipart=True)
            for _ in range(500):
                form.add_field(name, io.BytesIO(b"") if filename else "x", filename=filename)
            answer = await client.post("/", data=form)
            assert (answer.status, await answer.text()) == (400, "That form has too many parts.")
        fine = FormData()
        fine.add_field("csrf", "t")
        fine.add_field("text", "hello")
        for _ in range(MAX_FILES):
            fine.add_field("file", io.BytesIO(PNG), filename="a.png")
        answer = await client.post("/", data=fine)
        assert (answer.status, await answer.text()) == (200, f"hello|{MAX_FILES}")

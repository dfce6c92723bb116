"""The Chat page's data: the owner's conversations on every channel (the sessions in the home),
and a conversation's messages a page at a time, as entries a template shows."""

from __future__ import annotations

import heapq
import json
import os
import urllib.parse
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from nanomem.memory import Session, SessionStore
from nanomem.text import untrusted_json

PAGE = 40  # messages per page of a conversation: what one page renders, however long it is
LISTED = 100  # conversations listed, newest first
HEAD_BYTES = 64 * 1024  # read of a session file to find its key and first words
TITLE_WORDS = 8
TITLE_CHARS = 60
SHOWN_CHARS = 20_000  # of one message's text: longer is cut (the session keeps it whole)
RESULT_CHARS = 2_000  # of a tool's result
WRITABLE = "web"  # the channel whose conversations are typed into here


@dataclass(frozen=True)
class Conversation:
    key: str  # `channel:chat`
    title: str
    when: datetime  # its last change
    room: bool  # a group's session, shown as the group sees it

    @property
    def channel(self) -> str:
        return self.key.partition(":")[0]

    @property
    def url(self) -> str:
        return conversation_url(self.key)

    @property
    def writable(self) -> bool:
        return self.channel == WRITABLE


def conversation_url(key: str) -> str:
    return "/chat/c/" + urllib.parse.quote(key, safe="")


@dataclass(frozen=True)
class _Head:
    key: str
    title: str
    room: bool


class Conversations:
    """The sessions in the home, newest first; each file's key and first words are read once
    (they never change once written), the rest is a directory listing."""

    def __init__(self, directory: Path, limit: int = 10_000) -> None:
        self.directory, self.limit = directory, limit
        self._heads: dict[str, _Head] = {}

    def newest(self, count: int = LISTED) -> list[Conversation]:
        """Blocking: a listing of the folder and a short read of each new file."""
        try:
            entries = [
                (entry.stat().st_mtime, entry.path)
                for entry in os.scandir(self.directory)
                if entry.name.endswith(".jsonl") and entry.is_file(follow_symlinks=False)
            ]
        except FileNotFoundError:
            return []
        found = []
        for mtime, path in heapq.nlargest(count, entries):
            head = self._head(path)
            if head is not None:
                when = datetime.fromtimestamp(mtime).astimezone()
                found.append(Conversation(head.key, head.title, when, head.room))
        return found

    def _head(self, path: str) -> _Head | None:
        if (known := self._heads.get(path)) is not None:
            return known
        head = read_head(Path(path))
        if head is not None and head.title:  # untitled: read again once it has words
            if len(self._heads) >= self.limit:
                self._heads.clear()
            self._heads[path] = head
        return head


def read_head(path: Path) -> _Head | None:
    """A session file's key, whether it is a room, and its first words; None when it has no
    readable header (not a session)."""
    try:
        with path.open("rb") as fh:
            lines = fh.read(HEAD_BYTES).splitlines()
    except OSError:
        return None
    key, room, title = None, False, ""
    for line in lines:
        try:
            record = untrusted_json.loads(line.decode("utf-8", "replace"))
        except (json.JSONDecodeError, ValueError):
            continue
        if not isinstance(record, dict):
            continue
        if record.get("_type") == "session":
            key = record.get("key") if isinstance(record.get("key"), str) else None
            room = record.get("room") is True
        elif record.get("room") is True:
            room = True
        elif record.get("role") == "user" and not title:
            title = titled(person_text(record.get("content")))
            if key is not None:
                break
    return None if key is None else _Head(key, title, room)


def titled(text: str) -> str:
    words = text.split()
    title = " ".join(words[:TITLE_WORDS])
    if len(title) > TITLE_CHARS:
        title = title[: TITLE_CHARS - 1] + "…"
    elif len(words) > TITLE_WORDS:
        title += " …"
    return title


def person_text(content: Any) -> str:
    """What the person wrote, from a stored user message: without the runtime line the core
    puts before it (the time is in `ts`)."""
    if isinstance(content, list):
        content = " ".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    text = str(content or "")
    if text.startswith("[runtime"):
        text = text.split("\n\n", 1)[1] if "\n\n" in text else ""
    return text


# A conversation's messages.


@dataclass(frozen=True)
class Step:
    tool: str
    arguments: str


@dataclass(frozen=True)
class Entry:
    """One stored message as the page shows it; `index` is its place in the session (#m<i>)."""

    index: int
    kind: str  # "person", "reply", "result" (a tool's), "aside"
    text: str  # the person's words, the reply's Markdown, a result: never markup
    when: str
    steps: tuple[Step, ...] = ()  # the tools a reply called
    tool: str = ""  # whose result
    failed: bool = False
    sent_in: str = ""  # the inbox id a person's message came with (`in`): its pending bubble

    @property
    def anchor(self) -> str:
        return f"m{self.index}"


def entry(index: int, message: dict[str, Any]) -> Entry | None:
    role = message.get("role")
    when = str(message.get("ts", ""))[:16].replace("T", " ")
    if role == "user":
        text = _cut(person_text(message.get("content")), SHOWN_CHARS)
        return Entry(index, "person", text, when, sent_in=str(message.get("in") or ""))
    if role == "tool":
        result = _cut(str(message.get("content") or ""), RESULT_CHARS)
        return Entry(index, "result", result, when, tool=str(message.get("name") or ""))
    if role != "assistant":
        return None
    steps = tuple(_step(call) for call in message.get("tool_calls") or () if isinstance(call, dict))
    text = _cut(str(message.get("content") or ""), SHOWN_CHARS)
    if not text and not steps:
        return None
    kind = "aside" if message.get("aside") else "reply"
    return Entry(index, kind, text, when, steps, failed=bool(message.get("failed")))


def _step(call: dict[str, Any]) -> Step:
    function = call.get("function") if isinstance(call.get("function"), dict) else {}
    assert isinstance(function, dict)
    return Step(str(function.get("name", "?")), _cut(str(function.get("arguments", "")), 300))


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def entries(messages: list[dict[str, Any]], start: int, end: int) -> list[Entry]:
    """messages[start:end] as entries (what shows nothing left out)."""
    made = (entry(i, messages[i]) for i in range(max(0, start), min(end, len(messages))))
    return [one for one in made if one is not None]


def page_before(messages: list[dict[str, Any]], before: int | None, size: int = PAGE) -> range:
    """The indexes of the page of messages just before `before` (None: the newest page)."""
    end = len(messages) if before is None else max(0, min(before, len(messages)))
    return range(max(0, end - size), end)


def sent_ins(messages: list[dict[str, Any]], start: int) -> Iterable[str]:
    """The inbox ids of the person's messages from `start` on."""
    for message in messages[start:]:
        if message.get("role") == "user" and isinstance(sent := message.get("in"), str):
            yield sent


async def transcript(store: SessionStore, key: str) -> Session:
    """A session as it is on disk now: the gateway's own (its turns write it), unless another
    process (a terminal chat) changed the file since the gateway read it: then read afresh,
    never replacing what the gateway's turns hold (they reload it under their lease)."""
    session = await store.get(key)
    if not session.changed_on_disk():
        return session
    return await SessionStore(store.directory, cache_size=1).get(key)

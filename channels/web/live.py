"""The open pages of each web conversation and what is pushed to them as Server-Sent Events:
the person's message as it is received, a turn's start and end, its text growing piece by
piece, its tool steps, notes that are in no session (a command's answer, a question with
buttons, a file's link). What a page needs when it (re)connects is kept here per chat while it
is live: the messages not yet in the session, the turns running, their text so far."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections import deque
from dataclasses import dataclass, field
from typing import Any

PAGES_PER_CHAT = 16  # open pages (tabs) of one conversation
PAGES = 128  # open pages in all: a flood of event streams is refused past this
QUEUED = 4000  # events a page may fall behind by; past it, it is dropped (and reconnects)
NOTES_KEPT = 50  # the last notes of a chat, for a page that reconnects


@dataclass(frozen=True)
class Event:
    name: str
    data: dict[str, Any]
    id: str | None = None  # EventSource sends the last one back when it reconnects

    def encoded(self) -> bytes:
        lines = [f"event: {self.name}", "data: " + json.dumps(self.data, ensure_ascii=False)]
        if self.id is not None:
            lines.append(f"id: {self.id}")
        return ("\n".join(lines) + "\n\n").encode()


class Page:
    """One open page of a conversation: its queue of events, and how many of the session's
    messages it shows (`shown`), so each gets only what it has not."""

    def __init__(self, chat: str, shown: int, note: int) -> None:
        self.chat, self.shown, self.note = chat, shown, note
        self.queue: asyncio.Queue[Event | None] = asyncio.Queue(QUEUED)

    def push(self, event: Event) -> bool:
        try:
            self.queue.put_nowait(event)
        except asyncio.QueueFull:
            return False
        return True


@dataclass
class Chat:
    pages: set[Page] = field(default_factory=set)
    pending: dict[str, str] = field(default_factory=dict)  # inbox id → its bubble's HTML
    turns: list[str] = field(default_factory=list)  # the messages whose turn runs
    growing: dict[str, dict[int, str]] = field(default_factory=dict)  # turn → step → text
    steps: dict[str, list[str]] = field(default_factory=dict)  # turn → its tool steps
    notes: deque[tuple[int, str]] = field(default_factory=lambda: deque(maxlen=NOTES_KEPT))
    note_count: int = 0

    @property
    def idle(self) -> bool:
        return not (self.pages or self.pending or self.turns or self.growing or self.notes)


class Live:
    def __init__(self) -> None:
        self.chats: dict[str, Chat] = {}
        self.pages = 0
        self.closed = False

    def chat(self, key: str) -> Chat:
        if (chat := self.chats.get(key)) is None:
            chat = self.chats[key] = Chat()
        return chat

    # Pages.

    def open(self, key: str, shown: int, note: int) -> tuple[Page, list[Event]] | None:
        """A page joins; what it needs besides the session's messages (the person's messages
        not saved yet, the turns running and their text, the notes after `note`), taken at
        once so that nothing falls between it and the queue. None when too many are open."""
        chat = self.chat(key)
        if self.closed or self.pages >= PAGES or len(chat.pages) >= PAGES_PER_CHAT:
            self._forget_if_idle(key)
            return None
        page = Page(key, shown, note)
        chat.pages.add(page)
        self.pages += 1
        events = [Event("sent", {"html": html, "in": sent}) for sent, html in chat.pending.items()]
        for turn in chat.turns:
            events.append(Event("turn", {"state": "started", "turn": turn}))
            for line in chat.steps.get(turn, ()):
                events.append(Event("step", {"turn": turn, "line": line}))
            for step, text in chat.growing.get(turn, {}).items():
                events.append(Event("delta", {"turn": turn, "step": step, "piece": text}))
        events += [
            Event("note", {"html": html}, self._id(page, number))
            for number, html in chat.notes
            if number > note
        ]
        page.note = max(note, chat.note_count)
        return page, events

    def close(self, page: Page) -> None:
        chat = self.chats.get(page.chat)
        if chat is not None and page in chat.pages:
            chat.pages.discard(page)
            self.pages -= 1
            self._forget_if_idle(page.chat)

    def shutdown(self) -> None:
        """Every stream ends (the gateway stops)."""
        self.closed = True
        for chat in self.chats.values():
            for page in chat.pages:
                with contextlib.suppress(asyncio.QueueFull, asyncio.QueueEmpty):
                    page.queue.put_nowait(None)

    def _forget_if_idle(self, key: str) -> None:
        if (chat := self.chats.get(key)) is not None and chat.idle:
            del self.chats[key]

    @staticmethod
    def _id(page: Page, note: int) -> str:
        return f"{page.shown}.{note}"

    def push(self, key: str, event: Event) -> None:
        """To every open page of the chat; one too far behind is dropped (it reconnects)."""
        chat = self.chats.get(key)
        for page in list(chat.pages if chat is not None else ()):
            if not page.push(event):
                self._drop(page)

    def _drop(self, page: Page) -> None:
        self.close(page)
        # Full: room for its end is made, so its stream ends and the page reconnects.
        with contextlib.suppress(asyncio.QueueFull, asyncio.QueueEmpty):
            page.queue.get_nowait()
            page.queue.put_nowait(None)

    # What happens in the chat.

    def sent(self, key: str, sent: str, html: str) -> None:
        self.chat(key).pending[sent] = html
        self.push(key, Event("sent", {"html": html, "in": sent}))

    def started(self, key: str, turn: str) -> None:
        chat = self.chat(key)
        if turn not in chat.turns:
            chat.turns.append(turn)
        self.push(key, Event("turn", {"state": "started", "turn": turn}))

    def delta(self, key: str, turn: str, step: int, piece: str, so_far: str) -> None:
        self.chat(key).growing.setdefault(turn, {})[step] = so_far
        self.push(key, Event("delta", {"turn": turn, "step": step, "piece": piece}))

    def step(self, key: str, turn: str, line: str) -> None:
        self.chat(key).steps.setdefault(turn, []).append(line)
        self.push(key, Event("step", {"turn": turn, "line": line}))

    def ended(self, key: str, turn: str) -> None:
        chat = self.chat(key)
        if turn in chat.turns:
            chat.turns.remove(turn)
        chat.growing.pop(turn, None)
        chat.steps.pop(turn, None)
        # Its message is in the session by now, or never will be (a command): a page that
        # opens later shows the session, not a bubble waiting for nothing.
        chat.pending.pop(turn, None)
        self.push(key, Event("turn", {"state": "ended", "turn": turn}))
        self._forget_if_idle(key)

    def note(self, key: str, html: str) -> None:
        chat = self.chat(key)
        chat.note_count += 1
        chat.notes.append((chat.note_count, html))
        for page in list(chat.pages):
            page.note = chat.note_count
            if not page.push(Event("note", {"html": html}, self._id(page, chat.note_count))):
                self._drop(page)

    def saved(self, key: str, ins: set[str]) -> None:
        """The person's messages now in the session: their pending bubbles are done."""
        if (chat := self.chats.get(key)) is not None:
            for sent in ins & chat.pending.keys():
                del chat.pending[sent]
            self._forget_if_idle(key)

"""The web app's channel: the chat in a browser (channels/web/chat.py) and the memory's pages,
all on the gateway's HTTP server at `/`, for the owner alone (channels/web/auth.py).

A message typed into a web conversation goes through the inbox like Telegram's (on disk before
the page is told it was received; replayed after a crash). Delivered means saved in the session
(the turn did that) and pushed to the conversation's open pages (channels/web/live.py): a page
that is closed misses nothing, so nothing is ever kept back for it."""

from __future__ import annotations

import asyncio
import importlib
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aiohttp import web

from channels.web.chat_files import SentFiles, file_url
from channels.web.conversations import (
    PAGE,
    Conversations,
    conversation_url,
    entries,
    sent_ins,
    transcript,
)
from channels.web.live import Event, Live
from channels.web.markdown import markdown
from channels.web.render import render
from channels.web.site import PAGES, Site
from nanomem.agent import (
    BaseChannel,
    Capabilities,
    Delta,
    File,
    InboundMessage,
    OutboundMessage,
    Pending,
    Progress,
    Question,
    Text,
    TurnEnded,
    TurnStarted,
    hand_in_each,
    left_over,
    receive_until_stored,
    vouched_again,
)
from nanomem.audience import Sender
from nanomem.config import ConfigError

if TYPE_CHECKING:
    from nanomem.agent import MessageBus
    from nanomem.app import App

STATIC_PREFIX = "/static/"
STATIC_DIR = Path(__file__).resolve().parent / "static"  # our script, style and vendor/
OWNER = Sender("owner", "the owner", is_owner=True, can_answer=True, shared_room=False)
SAVED_TAIL = 200  # the session's last messages looked through for the person's saved ones


class WebChannel(BaseChannel):
    name = "web"
    capabilities = Capabilities(streams=True, buttons=True, files=True, turns=True, pushes=True)

    def __init__(self, app: App) -> None:
        self.site = Site(app, app.settings.web, self)
        self.app = app
        self.bus: MessageBus | None = None
        self.live = Live()
        self.conversations = Conversations(app.home.sessions)
        self.sent_files = SentFiles(app.home.root / "web-files", app.workspace)
        self.taking = False

    @classmethod
    def from_app(cls, app: App) -> WebChannel:
        gateway = app.settings.gateway
        if problem := app.settings.web.start_problem(gateway.host, gateway.tls_cert is not None):
            raise ConfigError(problem)
        return cls(app)

    def routes(self, web_app: web.Application) -> None:
        web_app.router.add_static(STATIC_PREFIX, STATIC_DIR, append_version=True)
        for module in PAGES:
            importlib.import_module(module).add_routes(web_app, self.site)

    def listens(self, server: str) -> str:
        return f"{server}/ (the web app)"

    # Intake.

    async def start(self, bus: Any) -> None:
        self.bus = bus
        left = await left_over(bus, self.name)  # what an earlier run stored, first, in order
        await hand_in_each(bus, self.name, left, self._hand_in, _text_of)
        self.taking = True

    async def stop_receiving(self) -> None:
        self.taking = False

    async def stop(self) -> None:
        self.taking = False
        self.live.shutdown()

    async def take(
        self, chat: str, text: str, media: list[str], labels: list[str], *, pressed: bool = False
    ) -> str:
        """A message typed (or a button pressed) on a page: stored, then handed to the core,
        which answers it in order with the chat's others (a press of an immediate command at
        once). Its inbox id."""
        assert self.bus is not None
        payload = {"text": text, "media": media, "labels": labels, "pressed": pressed}
        what = "a message from the web app"
        (seq,) = await receive_until_stored(self.bus, self.name, [(chat, payload, OWNER)], what)
        msg = _message(chat, payload, OWNER)
        if seq is not None:
            msg = replace(msg, id=InboundMessage.inbox_id(seq), seq=seq)
        if not pressed:
            self.live.sent(chat, msg.id, chat_html("chat_sent.html.j2", sent=msg.id, text=text))
        await self.bus.publish_inbound(msg)
        return msg.id

    async def _hand_in(self, pending: Pending) -> None:
        assert self.bus is not None
        if (sender := await vouched_again(self.bus, pending, OWNER)) is None:
            return
        msg = _message(pending.chat, pending.payload, sender)
        msg = replace(msg, id=InboundMessage.inbox_id(pending.seq), seq=pending.seq, replayed=True)
        await self.bus.publish_inbound(msg)

    async def readmit(self, pending: Pending) -> bool:
        if self.bus is None:
            return False
        await self._hand_in(pending)
        return True

    def owner_chat(self) -> str | None:
        return None

    # Outbound: one chat at a time, in order (the core's); never DeliveryLater.

    async def send(self, msg: OutboundMessage) -> None:
        part, chat, turn = msg.part, msg.chat_id, msg.reply_to or ""
        if isinstance(part, TurnStarted):
            self.live.started(chat, turn)
        elif isinstance(part, Delta):
            self.live.delta(chat, turn, part.step, part.piece, part.so_far)
        elif isinstance(part, Progress):
            self.live.step(chat, turn, part.line)
        elif isinstance(part, TurnEnded):
            await self.sync(chat, turn)
            self.live.ended(chat, turn)
        elif isinstance(part, Text):
            shown = await self.sync(chat, turn)
            said = part.text.strip()  # after a feature's preface ("heard: ..."), if any
            if part.buttons or not any(text and said.endswith(text) for text in shown):
                self.live.note(chat, self._note(chat, part.text, part.style, part.buttons))
        elif isinstance(part, Question):
            self.live.note(chat, self._note(chat, part.text, "command", part.choices))
        elif isinstance(part, File):
            await self._file(chat, part)

    async def sync(self, chat: str, turn: str = "") -> set[str]:
        """The session's messages each open page does not show yet, pushed to it; the texts
        of the model's last replies (a whole reply already shown needs no note)."""
        key = f"{self.name}:{chat}"
        session = await transcript(self.app.sessions, key)
        messages = session.messages
        end = len(messages)
        rendered: dict[int, Event] = {}
        live = self.live.chats.get(chat)
        for page in list(live.pages if live is not None else ()):
            if page.shown >= end:
                continue
            if end - page.shown > 2 * PAGE:  # far behind: the page loads itself again
                event = Event("reload", {})
            elif (made := rendered.get(page.shown)) is not None:
                event = made
            else:
                context = self.page_context(key, messages, page.shown, end)
                html = chat_html("chat_messages.html.j2", **context)
                data = {"html": html, "turn": turn, "ins": list(sent_ins(messages, page.shown))}
                event = rendered[page.shown] = Event("messages", data)
            page.shown = end
            if not page.push(replace(event, id=f"{end}.{page.note}")):
                self.live.close(page)
        self.live.saved(chat, set(sent_ins(messages, max(0, end - SAVED_TAIL))))
        return {
            str(m.get("content") or "").strip()
            for m in messages[max(0, end - 4) :]
            if m.get("role") == "assistant"
        }

    def page_context(
        self, key: str, messages: list[dict[str, Any]], start: int, end: int
    ) -> dict[str, Any]:
        return {
            "entries": entries(messages, start, end),
            "earlier": None,
            "url": conversation_url(key),
        }

    def _note(self, chat: str, text: str, style: str, buttons: Any) -> str:
        url = conversation_url(f"{self.name}:{chat}")
        return chat_html("chat_note.html.j2", text=text, style=style, buttons=buttons, url=url)

    async def _file(self, chat: str, part: File) -> None:
        """A link to the file, for this conversation only; a file that cannot be kept is said
        in one line (it is in no inbox: raising would drop it unseen)."""
        key = f"{self.name}:{chat}"
        url = conversation_url(key)
        try:
            file_id, name = await asyncio.to_thread(self.sent_files.add, key, part)
        except OSError as exc:
            note = f"The file {Path(part.path).name} could not be sent: {exc.strerror}"
            self.live.note(chat, self._note(chat, note, "error", ()))
            return
        link = file_url(url, file_id, name)
        html = chat_html("chat_note.html.j2", text=part.caption, style="file", buttons=(), url=url,
                      link=link, file_name=name)  # fmt: skip
        self.live.note(chat, html)


def chat_html(template: str, /, **context: Any) -> str:
    """A piece of the Chat page (the model's Markdown through the vetted renderer)."""
    return render(template, markdown=markdown, **context)


def _message(chat: str, payload: dict[str, Any], sender: Sender) -> InboundMessage:
    """The message the core gets from a stored payload: the files' labels before the words."""
    text, labels = str(payload.get("text") or ""), [str(x) for x in payload.get("labels") or ()]
    media = tuple(str(path) for path in payload.get("media") or ())
    content = "\n".join(filter(None, [*labels, text]))
    pressed = payload.get("pressed") is True
    return InboundMessage(WebChannel.name, chat, content, sender, media, pressed)


def _text_of(payload: dict[str, Any]) -> str:
    return str(payload.get("text") or "")

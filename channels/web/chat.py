"""The Chat page: the owner's conversations on every channel; a web conversation to type into,
its replies streaming in (Server-Sent Events), /stop, commands, buttons, files both ways.
Other channels' conversations are shown read-only: their replies go to their own chats."""

from __future__ import annotations

import asyncio
import functools
import re
import secrets
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from aiohttp import web

from channels.web.auth import SECURITY_HEADERS, Handler, changes_state, owner_only
from channels.web.channel import chat_html
from channels.web.chat_files import Form, Refused, kind_of, read_form, saved_name, shown_name
from channels.web.conversations import (
    WRITABLE,
    conversation_url,
    entries,
    page_before,
    person_text,
    titled,
    transcript,
)
from channels.web.live import Event
from channels.web.markdown import markdown
from channels.web.render import page
from nanomem.agent import Received
from nanomem.memory import session_filename

if TYPE_CHECKING:
    from channels.web.channel import WebChannel
    from channels.web.site import Site

WEB_CHAT = re.compile(r"[A-Za-z0-9_-]{8,64}")  # a web conversation's id, made by "New"
LONGEST_KEY = 300
KEEPALIVE_S = 15.0  # a comment on an idle stream, so a page that is gone is noticed
TITLE_SEARCH = 20  # messages looked at for a conversation's first words
STOP = "/stop"


def add_routes(web_app: web.Application, site: Site) -> None:
    add = web_app.router

    def bind(handler: Callable[[Site, web.Request], Awaitable[web.StreamResponse]]) -> Handler:
        return functools.partial(handler, site)

    add.add_get("/", owner_only(_home))
    add.add_get("/chat", owner_only(bind(_list)))
    add.add_post("/chat/new", changes_state(_new))
    add.add_get("/chat/c/{key}", owner_only(bind(_conversation)))
    add.add_get("/chat/c/{key}/messages", owner_only(bind(_earlier)))
    add.add_get("/chat/c/{key}/events", owner_only(bind(_events)))
    add.add_post("/chat/c/{key}/send", changes_state(bind(_send)))
    add.add_post("/chat/c/{key}/stop", changes_state(bind(_stop)))
    add.add_post("/chat/c/{key}/press", changes_state(bind(_press)))
    add.add_get("/chat/c/{key}/files/{file}/{name}", owner_only(bind(_file)))


async def _home(request: web.Request) -> web.StreamResponse:
    raise web.HTTPSeeOther("/chat")


async def _list(site: Site, request: web.Request) -> web.StreamResponse:
    found = await asyncio.to_thread(_channel(site).conversations.newest)
    return page(request, "chat.html.j2", conversations=found)


async def _new(request: web.Request) -> web.StreamResponse:
    raise web.HTTPSeeOther(conversation_url(f"{WRITABLE}:{secrets.token_urlsafe(12)}"))


def _channel(site: Site) -> WebChannel:
    return site.channel


def _key(site: Site, request: web.Request) -> str:
    """The conversation the URL names: a web one of ours, or a session in the home (404
    otherwise; the file's name is a hash of the key, so no name reaches outside the folder)."""
    key = request.match_info["key"]
    channel, _, chat = key.partition(":")
    if len(key) > LONGEST_KEY or not chat or not key.isprintable():
        raise web.HTTPNotFound(text="No such conversation.")
    if channel == WRITABLE and WEB_CHAT.fullmatch(chat):
        return key
    if not (site.app.home.sessions / session_filename(key)).is_file():
        raise web.HTTPNotFound(text="No such conversation.")
    return key


def _writable(site: Site, request: web.Request) -> str:
    """The chat id of a web conversation (the only kind typed into here)."""
    key = _key(site, request)
    channel, _, chat = key.partition(":")
    if channel != WRITABLE:
        raise web.HTTPForbidden(text="This conversation is read-only here: its replies go to it.")
    if not _channel(site).taking:
        raise web.HTTPServiceUnavailable(text="The gateway is stopping; try again shortly.")
    return chat


async def _conversation(site: Site, request: web.Request) -> web.StreamResponse:
    key = _key(site, request)
    session = await transcript(site.app.sessions, key)
    messages = session.messages
    shown = page_before(messages, None)
    first = next((m for m in messages[:TITLE_SEARCH] if m.get("role") == "user"), None)
    title = titled(person_text(first.get("content"))) if first else ""
    commands = [c for c in site.app.loop.commands.all() if c.listed]
    live = _channel(site).live.chats.get(key.partition(":")[2])  # notes shown before: not again
    return page(
        request,
        "chat_conversation.html.j2",
        key=key,
        channel=key.partition(":")[0],
        title=title or "New conversation",
        writable=key.startswith(f"{WRITABLE}:"),
        room=session.is_room,
        entries=entries(messages, shown.start, shown.stop),
        earlier=shown.start or None,
        url=conversation_url(key),
        shown=len(messages),
        notes=live.note_count if live is not None else 0,
        commands=commands,
        max_mb=site.settings.max_upload_mb,
        markdown=markdown,
    )


async def _earlier(site: Site, request: web.Request) -> web.StreamResponse:
    """The page of messages before `before`: what paging up shows, never the whole session."""
    key = _key(site, request)
    before = request.query.get("before", "")
    if not before.isdigit():
        raise web.HTTPBadRequest(text="Which messages? (before=<index>)")
    messages = (await transcript(site.app.sessions, key)).messages
    shown = page_before(messages, int(before))
    context: dict[str, Any] = {"entries": entries(messages, shown.start, shown.stop)}
    context |= {"url": conversation_url(key)}
    context |= {"earlier": shown.start or None, "markdown": markdown}
    return page(request, "chat_messages.html.j2", **context)


async def _events(site: Site, request: web.Request) -> web.StreamResponse:
    """The conversation's events while the page is open; a page that reconnects (it sends
    the last event's id: `<messages shown>.<notes seen>`) gets what it missed, once."""
    key = _key(site, request)
    chat = key.partition(":")[2]
    shown, note = _resumed(request)
    channel = _channel(site)
    opened = channel.live.open(chat, shown, note) if key.startswith(f"{WRITABLE}:") else None
    if opened is None and key.startswith(f"{WRITABLE}:"):
        raise web.HTTPTooManyRequests(text="Too many pages are open.")
    response = web.StreamResponse(headers={**SECURITY_HEADERS, "X-Accel-Buffering": "no"})
    response.content_type = "text/event-stream"
    await response.prepare(request)
    if opened is None:  # another channel's conversation: nothing comes here
        await response.write(Event("quiet", {}).encoded())
        return response
    listener, state = opened
    try:
        messages = (await transcript(site.app.sessions, key)).messages
        if listener.shown < len(messages):
            html = chat_html(
                "chat_messages.html.j2",
                **channel.page_context(key, messages, listener.shown, len(messages)),
            )
            listener.shown = len(messages)
            await response.write(Event("messages", {"html": html, "turn": "", "ins": []}).encoded())
        for caught_up in state:
            await response.write(caught_up.encoded())
        while True:
            try:
                event = await asyncio.wait_for(listener.queue.get(), KEEPALIVE_S)
            except TimeoutError:
                await response.write(b": still here\n\n")
                continue
            if event is None:
                break
            await response.write(event.encoded())
    except (ConnectionError, asyncio.CancelledError):
        pass
    finally:
        channel.live.close(listener)
    return response


def _resumed(request: web.Request) -> tuple[int, int]:
    """(messages the page shows, notes it saw): from the id EventSource sends back when it
    reconnects, else from the page's own count."""
    last = request.headers.get("Last-Event-ID", "")
    shown, _, note = last.partition(".")
    if shown.isdigit() and note.isdigit():
        return _count(shown), _count(note)
    after, note = request.query.get("after", ""), request.query.get("note", "")
    return _count(after), _count(note)


def _count(text: str) -> int:
    return int(text) if text.isdigit() and len(text) < 10 else 0


async def _send(site: Site, request: web.Request) -> web.StreamResponse:
    """A message typed (with files dropped or a voice note recorded): stored and handed in;
    the page sees it (and its answer) on its event stream."""
    chat = _writable(site, request)
    try:
        form = await read_form(request, site.settings.max_upload_mb)
        limit = site.app.settings.agent.max_message_chars
        if len(form.text) > limit:
            raise Refused(f"That message is too long ({len(form.text)} characters; limit {limit}).")
        if not form.text.strip() and not form.files:
            raise Refused("Nothing to send.")
        kinds = [kind_of(data, field == "voice") for field, _, data in form.files]
        if None in kinds:
            raise Refused("Only images, PDFs and recordings can be sent here.", 415)
        received = await _saved(site, chat, form, [k for k in kinds if k is not None])
    except Refused as exc:
        return web.Response(status=exc.status, text=str(exc))
    except web.HTTPRequestEntityTooLarge:
        return web.Response(status=413, text="That message is too long.")
    await _channel(site).take(chat, form.text, received.media, received.labels)
    return web.Response(status=204)


async def _saved(site: Site, chat: str, form: Form, kinds: list[tuple[str, str]]) -> Received:
    received = Received(site.app.workspace, f"{WRITABLE}:{chat}", False)
    for (field, name, data), (kind, suffix) in zip(form.files, kinds, strict=True):
        try:
            await received.save(saved_name(suffix, field == "voice"), data, kind, shown_name(name))
        except OSError as exc:
            raise Refused(f"The file could not be saved: {exc.strerror}", 500) from None
    return received


async def _stop(site: Site, request: web.Request) -> web.StreamResponse:
    """/stop, through the core as if typed: it runs at once, never behind the turn."""
    await _channel(site).take(_writable(site, request), STOP, [], [])
    return web.Response(status=204)


async def _press(site: Site, request: web.Request) -> web.StreamResponse:
    """A button pressed: its command, handed in at once (an approval is one of the commands
    the core runs immediately, never behind the chat's turn)."""
    chat = _writable(site, request)
    command = str((await request.post()).get("command", ""))
    if not command.startswith("/") or len(command) > 200 or not command.isprintable():
        return web.Response(status=400, text="That is not one of our buttons.")
    await _channel(site).take(chat, command, [], [], pressed=True)
    return web.Response(status=204)


async def _file(site: Site, request: web.Request) -> web.StreamResponse:
    key = _key(site, request)
    return await _channel(site).sent_files.response(key, request.match_info["file"])

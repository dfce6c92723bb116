"""The Recall page: ranked search over all history, each result opening its chat at the message.

Two indexes answer, both bounded as the `search_history` tool is (a query of at most 512
characters and 32 words, a time limit): the chats' messages (nanomem/features/recall/
messages.py), each a link to its place in its chat, and the consolidated history
(history.jsonl, through the tool's own Recall.search), each a summary of many messages and so
a link to its chat. The owner sees every chat's, group rooms' labelled as such.
"""

from __future__ import annotations

import asyncio
import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING

from aiohttp import web

from channels.web.auth import owner_only
from channels.web.conversations import conversation_url
from channels.web.render import page

if TYPE_CHECKING:
    from channels.web.site import Site
    from nanomem.features.recall import MessageIndex

LIMIT = 20  # results of each kind


@dataclass(frozen=True)
class Result:
    chat: str  # the session key
    room: bool
    when: str
    timestamp: str
    what: str  # "you", "a member" (of a room), "the assistant"; "summary" (or "archived …")
    pieces: list[tuple[str, bool]]  # the snippet, the matched words marked
    href: str


@dataclass(frozen=True)
class Results:
    messages: list[Result]
    summaries: list[Result]
    notes: list[str]


def add_routes(web_app: web.Application, site: Site) -> None:
    from nanomem.features.recall import MessageIndex

    home = site.app.home
    index = MessageIndex(
        home.sessions,
        home.messages_index,
        time_limit_s=site.app.settings.memory.search_time_limit_s,
    )
    web_app.router.add_get("/recall", owner_only(functools.partial(_page, site, index)))


async def _page(site: Site, index: MessageIndex, request: web.Request) -> web.StreamResponse:
    from nanomem.features.recall import MAX_CHARS

    query = request.query.get("q", "").replace("\x00", " ")  # as the search reads it
    notes = []
    if len(query) > MAX_CHARS:  # never a 10 KB query echoed back into the page
        query = query[:MAX_CHARS]
        notes.append(f"The query was cut to its first {MAX_CHARS} characters.")
    found = await asyncio.to_thread(search, site, index, query) if query.strip() else None
    if found is not None:
        notes += [note for note in found.notes if note not in notes]
    return page(request, "recall_page.html.j2", query=query, found=found, notes=notes)


def search(site: Site, index: MessageIndex, query: str) -> Results:
    """Blocking: both indexes, best match first in each."""
    from nanomem.features.recall import Recall, marked

    messages = index.search(query, LIMIT)
    notes = list(messages.notes)
    shown = [
        Result(
            hit.session,
            hit.room,
            _when(hit.timestamp),
            hit.timestamp,
            _who(hit.role, hit.room),
            marked(hit.snippet, query),
            f"{conversation_url(hit.session)}#m{hit.index}",
        )
        for hit in messages.hits
        if hit.session
    ]
    summaries: list[Result] = []
    try:
        recall = site.app.feature(Recall)
    except LookupError:
        return Results(shown, summaries, notes)
    history = recall.search(query, LIMIT)
    notes += [note for note in history.notes if note not in notes]
    for hit in history.hits:
        entries = site.app.history.read_after(hit.cursor - 1, 1)
        entry = entries[0] if entries and entries[0].cursor == hit.cursor else None
        summaries.append(
            Result(
                hit.session,
                entry is not None and entry.is_room,
                _when(hit.timestamp),
                hit.timestamp,
                # A slice no summary could be made of is kept word for word (docs/memory.md).
                "archived word for word"
                if entry is not None and entry.kind == "raw"
                else "summary",
                marked(hit.snippet, query),
                conversation_url(hit.session),
            )
        )
    return Results(shown, summaries, notes)


def _who(role: str, room: bool) -> str:
    if role != "user":
        return "the assistant"
    return "a member" if room else "you"  # a room's messages are its members'


def _when(stamp: str) -> str:
    """`2026-11-22T10:03:00+01:00` as `2026-11-22 10:03`."""
    return stamp[:16].replace("T", " ")

"""The Chat page: the chat: conversations on every channel, streaming replies, files both ways."""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiohttp import web

from channels.web.auth import owner_only
from channels.web.render import page

if TYPE_CHECKING:
    from channels.web.site import Site


def add_routes(web_app: web.Application, site: Site) -> None:
    web_app.router.add_get("/", owner_only(_home))
    web_app.router.add_get("/chat", owner_only(_page))


async def _page(request: web.Request) -> web.StreamResponse:
    return page(request, "chat.html.j2")


async def _home(request: web.Request) -> web.StreamResponse:
    raise web.HTTPSeeOther("/chat")

"""The Memory page: SOUL.md, USER.md and MEMORY.md rendered, edited in place, each line's why."""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiohttp import web

from channels.web.auth import owner_only
from channels.web.render import page

if TYPE_CHECKING:
    from channels.web.site import Site


def add_routes(web_app: web.Application, site: Site) -> None:
    web_app.router.add_get("/memory", owner_only(_page))


async def _page(request: web.Request) -> web.StreamResponse:
    return page(request, "memory_page.html.j2")

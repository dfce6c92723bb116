"""The Timeline page: every memory version with its diff; restore any."""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiohttp import web

from channels.web.auth import owner_only
from channels.web.render import page

if TYPE_CHECKING:
    from channels.web.site import Site


def add_routes(web_app: web.Application, site: Site) -> None:
    web_app.router.add_get("/timeline", owner_only(_page))


async def _page(request: web.Request) -> web.StreamResponse:
    return page(request, "timeline.html.j2")

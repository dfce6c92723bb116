"""The Schedules & tasks page: schedules, tasks, MCP servers, parked messages, health, use.

Each section is an htmx fragment of its own (`/operations/<section>`) that refreshes itself
every few seconds; its buttons post to the section and get it back, redrawn, with what was
done. Without htmx the same forms post and the whole page comes back. Every button does what
its slash command or `nanomem inbox` does, through the same function (operations_data.py).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from aiohttp import web

from channels.web import operations_data as data
from channels.web.auth import changes_state, owner_only
from channels.web.conversations import conversation_url
from channels.web.render import page

if TYPE_CHECKING:
    from channels.web.site import Site

SECTIONS = ("schedules", "tasks", "mcp", "parked", "health", "usage")
# What each button names: checked before anything is looked up.
_SCHEDULE_ID = re.compile(r"[0-9A-Za-z_-]{1,32}")
_TASK_ID = re.compile(r"[0-9a-f]{1,16}")
_SEQ = re.compile(r"[0-9]{1,18}")
Action = Callable[["Site", str], Awaitable[tuple[bool, str]]]


def add_routes(web_app: web.Application, site: Site) -> None:
    router = web_app.router
    router.add_get("/operations", owner_only(functools.partial(_page, site)))
    for section in SECTIONS:
        router.add_get(
            f"/operations/{section}", owner_only(functools.partial(_fragment, site, section))
        )
    actions: list[tuple[str, str, re.Pattern[str], Action]] = [
        ("schedules", "cancel", _SCHEDULE_ID, data.cancel_schedule),
        ("tasks", "stop", _TASK_ID, data.stop_task),
        ("parked", "retry", _SEQ, _by_seq(data.retry_parked)),
        ("parked", "drop", _SEQ, _by_seq(data.drop_parked)),
    ]
    for section, verb, pattern, action in actions:
        handler = functools.partial(_act, site, section, pattern, action)
        router.add_post(f"/operations/{section}/{{id}}/{verb}", changes_state(handler))


def _by_seq(action: Callable[[Site, int], Awaitable[tuple[bool, str]]]) -> Action:
    async def by_seq(site: Site, ident: str) -> tuple[bool, str]:
        return await action(site, int(ident))

    return by_seq


async def _page(site: Site, request: web.Request) -> web.StreamResponse:
    return await _whole(site, request, {})


async def _whole(
    site: Site, request: web.Request, notices: dict[str, str], status: int = 200
) -> web.StreamResponse:
    context: dict[str, Any] = {"notices": notices, "chat_url": conversation_url}
    for section in SECTIONS:
        context |= await _read(site, request, section)
    return page(request, "operations.html.j2", status=status, **context)


async def _fragment(site: Site, section: str, request: web.Request) -> web.StreamResponse:
    context = await _read(site, request, section)
    return page(
        request, f"operations_{section}.html.j2", notices={}, chat_url=conversation_url, **context
    )


async def _act(
    site: Site, section: str, pattern: re.Pattern[str], action: Action, request: web.Request
) -> web.StreamResponse:
    ident = request.match_info["id"]
    if pattern.fullmatch(ident) is None:
        return web.Response(status=404, text="There is no such item: reload the page.")
    found, said = await action(site, ident.lower())
    notices = {section: said}
    if request.headers.get("HX-Request"):  # htmx swaps only a 2xx: the notice says it
        context = await _read(site, request, section)
        return page(
            request,
            f"operations_{section}.html.j2",
            notices=notices,
            chat_url=conversation_url,
            **context,
        )
    return await _whole(site, request, notices, 200 if found else 404)


async def _read(site: Site, request: web.Request, section: str) -> dict[str, Any]:
    """The section's data, under its template's names."""
    if section == "schedules":
        rows, problem = await data.schedules(site)
        return {"schedules": rows, "schedules_problem": problem}
    if section == "tasks":
        return {"tasks": await data.tasks(site)}
    if section == "mcp":
        return {"servers": data.mcp_servers(site)}
    if section == "parked":
        parked, problem = await data.parked(site)
        return {"parked": parked, "parked_problem": problem}
    if section == "health":
        return {"health": data.health(request)}
    return {"usage": await data.usage(site)}

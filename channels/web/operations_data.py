"""What the Schedules & tasks page shows, read through the functions the slash commands and
`nanomem inbox`, `nanomem status` and `nanomem usage` use: never a second copy of them."""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from nanomem.audience import Sender
from nanomem.features.tasks import age, cost, in_order, state_of

if TYPE_CHECKING:
    from aiohttp import web
    from markupsafe import Markup

    from channels.web.site import Site
    from nanomem.features.mcp import Mcp
    from nanomem.features.schedules import ScheduledTurns
    from nanomem.features.tasks import BackgroundTasks, TaskRecord

USAGE_DAYS = 30
CHARTED_CHATS = 12  # the chart of use per chat shows the chats that used the most
SHOWN_RESULT = 300  # characters of a task's result shown
OWNER = Sender(id="web", name="owner", is_owner=True)  # who presses the page's buttons


@dataclass(frozen=True)
class ScheduleRow:
    id: str
    session: str
    room: bool
    rule: str  # "every day at 09:00", "once at …"
    next_run: str
    text: str


@dataclass(frozen=True)
class TaskRow:
    id: str
    session: str
    room: bool
    label: str
    state: str
    running: bool
    since: str  # how long it runs, or how long ago it ended
    cost: str
    result: str


@dataclass(frozen=True)
class ToolRow:
    name: str  # the server's name for it
    offered_as: str  # the model's name for it
    description: str
    left_out: str  # why the model does not get it ("" when it does)


@dataclass(frozen=True)
class ServerRow:
    name: str
    transport: str
    state: str  # running, failed, off, starting, restarting, stopped
    detail: str  # the state in a line: "failed (exit 1); trying again in 20 s"
    tools: list[ToolRow]


@dataclass(frozen=True)
class HealthRow:
    name: str
    state: str
    detail: str


@dataclass(frozen=True)
class HealthView:
    status: str
    uptime: str
    channels: list[HealthRow]
    blocks: list[tuple[str, str]]  # the features' blocks and the queues, each as one line


@dataclass(frozen=True)
class UsageView:
    per_day: Markup
    per_chat: Markup
    chats: list[tuple[str, str, str, str]]  # chat, calls, tokens, cost
    total: tuple[str, str, str]  # calls, tokens, cost


def feature_of(site: Site, kind: type[Any]) -> Any | None:
    try:
        return site.app.feature(kind)
    except LookupError:
        return None


def schedules_feature(site: Site) -> ScheduledTurns | None:
    from nanomem.features.schedules import ScheduledTurns

    found: ScheduledTurns | None = feature_of(site, ScheduledTurns)
    return found


def tasks_feature(site: Site) -> BackgroundTasks | None:
    from nanomem.features.tasks import BackgroundTasks

    found: BackgroundTasks | None = feature_of(site, BackgroundTasks)
    return found


def mcp_feature(site: Site) -> Mcp | None:
    from nanomem.features.mcp import Mcp

    found: Mcp | None = feature_of(site, Mcp)
    return found


async def schedules(site: Site) -> tuple[list[ScheduleRow], str]:
    """Every chat's schedules (as /schedules lists a chat's), and the file's problem if any."""
    feature = schedules_feature(site)
    if feature is None:
        return [], ""
    stored = await asyncio.to_thread(feature.store.read)
    rows = [
        ScheduleRow(s.id, s.session, s.is_room, s.describe(), feature.when(s), s.text)
        for s in stored.schedules
    ]
    return rows, stored.problem or ""


async def cancel_schedule(site: Site, schedule_id: str) -> tuple[bool, str]:
    """/unschedule for the schedule's own chat, as its owner: (found, what it said)."""
    feature = schedules_feature(site)
    if feature is None:
        return False, "Schedules are not running."
    found = await asyncio.to_thread(feature.store.get, schedule_id)
    if found is None:
        return False, f"No schedule {schedule_id!r}: it may have been cancelled already."
    return True, await feature.cancel(found.session, schedule_id, OWNER)


async def tasks(site: Site) -> list[TaskRow] | None:
    """Every chat's background tasks, running first, then the newest ended; None when off."""
    feature = tasks_feature(site)
    if feature is None:
        return None
    return [_task_row(r) for r in in_order(await feature.records())]


def _task_row(record: TaskRecord) -> TaskRow:
    since = age(record.started_at) if record.running else f"{age(record.ended_at)} ago"
    result = record.result if len(record.result) <= SHOWN_RESULT else record.result[:SHOWN_RESULT]
    return TaskRow(
        record.id,
        record.session,
        record.is_room,
        record.label,
        state_of(record),
        record.running,
        since,
        cost(record),
        result,
    )


async def stop_task(site: Site, task_id: str) -> tuple[bool, str]:
    """`/stop <id>` in the task's own chat, as its owner: (found, what it said)."""
    feature = tasks_feature(site)
    if feature is None:
        return False, "Background tasks are off (agent.max_background_tasks = 0)."
    found = [r for r in await feature.records() if r.id == task_id]
    if not found:
        return False, f"No background task {task_id!r}."
    return True, feature.stop_task(found[0], OWNER)


def mcp_servers(site: Site) -> list[ServerRow]:
    """The servers as /mcp tells the owner of them, with each tool and its description."""
    feature = mcp_feature(site)
    if feature is None:
        return []
    rows = []
    for name, server in feature.shown(in_group=False).items():
        state = server.state
        offered = set(state.tools)
        tools = [
            ToolRow(
                str(offer.tool.name),
                offer.name,
                offer.description,
                "" if offer.name in offered else (offer.reason or "not offered now"),
            )
            for offer in server.offers
        ]
        kind = {"ready": "running", "disabled": "off"}.get(state.kind, state.kind)
        rows.append(ServerRow(name, server.transport, kind, state.describe(), tools))
    return rows


async def parked(site: Site) -> tuple[list[tuple[int, str]], str]:
    """The parked messages as `nanomem inbox` lists them: (seq, its line), and a read error."""
    import sqlite3

    from nanomem.agent import parked_in, parked_line

    try:
        found = await asyncio.to_thread(parked_in, site.app.home.inbox)
    except sqlite3.Error as exc:
        return [], f"Cannot read the inbox: {exc}"
    return [(p.seq, parked_line(p)) for p in found], ""


async def retry_parked(site: Site, seq: int) -> tuple[bool, str]:
    """`nanomem inbox retry`: (found, what it said)."""
    from nanomem.agent import unpark_in

    if not await asyncio.to_thread(unpark_in, site.app.home.inbox, seq):
        return False, f"No parked message #{seq}."
    return True, f"Message #{seq} is tried again now."


async def drop_parked(site: Site, seq: int) -> tuple[bool, str]:
    """`nanomem inbox drop`: (found, what it said)."""
    from nanomem.agent import drop_in

    if not await asyncio.to_thread(drop_in, site.app.home.inbox, seq):
        return False, f"No parked or failed message #{seq}."
    return True, f"Message #{seq} was dropped; it will not be answered."


def health(request: web.Request) -> HealthView | None:
    """GET /health's snapshot, as a table; None outside the gateway."""
    from nanomem.gateway.health import HEALTH

    found = request.app.get(HEALTH)
    if found is None:
        return None
    _, body = found.snapshot()
    channels = [
        HealthRow(name, str(shown.get("state", "")), str(shown.get("detail", "")))
        for name, shown in body.get("channels", {}).items()
    ]
    own = {"status", "uptime_s", "started_at", "channels"}
    blocks = [(key, _one_line(value)) for key, value in body.items() if key not in own]
    return HealthView(str(body["status"]), _duration(float(body["uptime_s"])), channels, blocks)


def _one_line(value: Any) -> str:
    if isinstance(value, dict):
        return " · ".join(f"{key}: {_one_line(inner)}" for key, inner in value.items())
    if isinstance(value, list):
        return ", ".join(_one_line(inner) for inner in value) or "none"
    return "—" if value is None else json.dumps(value, ensure_ascii=False).strip('"')


def _duration(seconds: float) -> str:
    minutes, _ = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    days, hours = divmod(hours, 24)
    if days:
        return f"{days} d {hours} h"
    return f"{hours} h {minutes} min" if hours else f"{minutes} min"


async def usage(site: Site) -> UsageView:
    """`nanomem usage` over the last 30 days, per day and per chat."""
    from channels.web.charts import bars

    def read() -> Any:
        from nanomem.features.usage import Pricing, daily, price_table

        return daily(site.app.home.usage, USAGE_DAYS, time.time(), Pricing(price_table()))

    found = await asyncio.to_thread(read)
    days = [(day.isoformat(), float(t.tokens)) for day, t in found.by_day()]
    chats = found.by_chat()
    per_chat = [(chat or "the home's own work", float(t.tokens)) for chat, t in chats]
    return UsageView(
        bars(days, title=f"Tokens per day, the last {USAGE_DAYS} days", unit=" tokens"),
        bars(per_chat[:CHARTED_CHATS], title="Tokens per chat", unit=" tokens"),
        [
            (chat or "the home's own work", f"{t.calls:,}", f"{t.tokens:,}", t.cost_text())
            for chat, t in chats
        ],
        (f"{found.total.calls:,}", f"{found.total.tokens:,}", found.total.cost_text()),
    )

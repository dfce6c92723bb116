"""What a chat does with its schedules: the `schedule`, `list_schedules` and `cancel_schedule`
tools and the /schedules and /unschedule commands. `nanomem gateway` runs them. In `nanomem
chat` a schedule of a chat whose channel the gateway serves unasked (the terminal's own) is
stored for the gateway, which takes it up within seconds (turns.py), and the answer says
whether a gateway runs to fire it; elsewhere nothing would be running at the time, and they
say so.
"""

from __future__ import annotations

import asyncio
import contextlib
from datetime import UTC, datetime, tzinfo
from typing import Annotated, Any

from pydantic import Field

from nanomem.agent import Command, InboundMessage
from nanomem.audience import Sender
from nanomem.config import ScheduleSettings
from nanomem.features.schedules.rules import (
    Schedule,
    ScheduleError,
    local,
    make_schedule,
    zone_checked,
)
from nanomem.features.schedules.store import ScheduleStore
from nanomem.home import Home
from nanomem.tools import Tool, ToolContext, ToolError, read_only_tool

NEEDS_GATEWAY = (
    "Scheduled messages need the gateway (`nanomem gateway`), which runs them at their time; "
    "here nothing would be running then. Nothing was scheduled."
)
NO_PUSH = "This chat cannot receive messages the agent starts ({channel}); nothing was scheduled."
GATEWAY_FIRES = (
    "The gateway running on this home ({gateway}) fires it: what it says then shows in this "
    "chat, or when `nanomem chat` next opens this session."
)
NO_GATEWAY = (
    "It is stored, but no gateway runs on this home to fire it: start `nanomem gateway` (or "
    "its systemd unit, docs/running-as-a-service.md). A time missed while no gateway runs "
    "fires when the gateway starts if it is less than {grace} min late "
    "(schedule.misfire_grace_min); otherwise it is skipped."
)


class ChatSchedules:
    """The chat's side of ScheduledTurns (nanomem/features/schedules/turns.py), which provides
    the store, the running scheduler and arming."""

    store: ScheduleStore
    settings: ScheduleSettings
    channels: set[str]
    failed: dict[str, str]
    home: Home | None
    _scheduler: Any

    @property
    def zone(self) -> tzinfo:
        raise NotImplementedError

    @property
    def running(self) -> bool:
        return self._scheduler is not None

    def _arm(
        self, schedule: Schedule, occurrence: datetime | None, *, catch_up: bool = False
    ) -> None:
        raise NotImplementedError

    def _chat(self, context: ToolContext) -> str:
        """The session asking; ToolError when schedules cannot work here."""
        session = context.session
        if session is None or not self._here(session):
            raise ToolError(NEEDS_GATEWAY)
        channel = session.partition(":")[0]
        if channel not in self.channels:
            raise ToolError(NO_PUSH.format(channel=channel))
        return session

    def _here(self, session: str) -> bool:
        """Whether this chat's schedules work in this process: run here (the gateway), or
        stored for the gateway (a chat whose channel it serves unasked: the terminal's)."""
        return self.running or session.partition(":")[0] in self.channels

    def next_run(self, schedule: Schedule) -> datetime | None:
        if self._scheduler is None:  # stored for the gateway: when it would fire
            return schedule.next_after(datetime.now(UTC))
        job = self._scheduler.get_job(schedule.id)
        return job.next_run_time if job is not None else None

    async def _who_fires(self) -> str:
        """For a schedule stored for the gateway: whether one runs to fire it."""
        from nanomem.gateway_state import running

        gateway = await asyncio.to_thread(running, self.home) if self.home else None
        if gateway is not None:
            return GATEWAY_FIRES.format(gateway=gateway.describe())
        return NO_GATEWAY.format(grace=self.settings.misfire_grace_min)

    def listing(self, session: str, schedules: list[Schedule], asker: Sender | None = None) -> str:
        maker = made_by(asker)
        mine = [s for s in schedules if s.session == session and maker in (None, s.made_by)]
        if not mine:
            return "No schedules of yours in this chat." if maker else "No schedules in this chat."
        lines = []
        for s in mine:
            text = s.text if len(s.text) <= 80 else s.text[:79] + "…"
            lines.append(f"{s.id} · {s.describe()} · next {self.when(s)} · {text}")
        return "\n".join(lines)

    def when(self, schedule: Schedule) -> str:
        """Its next run in the schedules' zone (/schedules and the web page), or "not armed"."""
        upcoming = self.next_run(schedule)
        return local(upcoming, self.zone) if upcoming else "not armed"

    async def cancel(self, session: str, schedule_id: str, asker: Sender | None) -> str:
        """/unschedule, the tool and the web page's Cancel: what the asker is told."""
        schedule_id = schedule_id.strip().lower()
        maker = made_by(asker)
        try:
            removed = await asyncio.to_thread(self.store.remove, schedule_id, session, maker)
        except ScheduleError as exc:  # schedules.json cannot be read: it is not written over
            return f"Nothing was cancelled: {exc}."
        if removed is None:
            mine = " of yours" if maker else ""
            return f"No schedule {schedule_id!r}{mine} in this chat (/schedules lists them)."
        if self._scheduler is not None:
            with contextlib.suppress(Exception):  # JobLookupError: it had just fired
                self._scheduler.remove_job(schedule_id)
        self.failed.pop(schedule_id, None)
        return f"Cancelled schedule {schedule_id} ({removed.describe()})."

    # -- tools ------------------------------------------------------------------------------

    def tools(self) -> list[Tool]:
        return [
            Tool.from_function(self.schedule),
            Tool.from_function(self.list_schedules),
            Tool.from_function(self.cancel_schedule),
        ]

    async def schedule(
        self,
        context: ToolContext,
        text: Annotated[
            str,
            Field(description="What to do or say when it fires, e.g. 'Remind them to call mum'"),
        ],
        at: Annotated[
            str | None,
            Field(description="Once, at this ISO 8601 time (without an offset: local time)"),
        ] = None,
        every_minutes: Annotated[int | None, Field(description="Repeat every N minutes")] = None,
        cron: Annotated[
            str | None, Field(description="Repeat on a 5-field cron rule, e.g. '0 9 * * 1-5'")
        ] = None,
        timezone: Annotated[
            str | None,
            Field(
                description="IANA time zone for an `at` without offset and for cron, e.g. "
                "Europe/Berlin (default: the agent's)"
            ),
        ] = None,
    ) -> str:
        """Schedule a message or task in this chat: once (at), every N minutes, or by cron."""
        session = self._chat(context)
        now = datetime.now(UTC)
        try:
            made = make_schedule(
                session,
                text,
                at=at,
                every_minutes=every_minutes,
                cron=cron,
                zone=self.zone if timezone is None else zone_checked(timezone),
                now=now,
                made_by=context.sender.id,
                room=context.shared_room,
            )
            upcoming = made.reachable(now)
            await asyncio.to_thread(self.store.add, made)
        except ScheduleError as exc:
            raise ToolError(f"{exc}; nothing was scheduled") from None
        when = local(upcoming, self.zone) if upcoming else "never"
        if not self.running:  # stored for the gateway
            fires = await self._who_fires()
            return f"Scheduled {made.id}: {made.describe()}; next at {when}. {fires}"
        self._arm(made, upcoming)
        if made.id in self.failed:  # not armed after all: not kept either
            await asyncio.to_thread(self.store.remove, made.id)
            raise ToolError(f"{self.failed.pop(made.id)}; nothing was scheduled")
        return f"Scheduled {made.id}: {made.describe()}; next at {when}."

    @read_only_tool
    async def list_schedules(self, context: ToolContext) -> str:
        """List this chat's schedules with their ids and next run."""
        session = self._chat(context)
        return self.listing(session, await asyncio.to_thread(self.store.load), context.sender)

    async def cancel_schedule(
        self,
        context: ToolContext,
        id: Annotated[str, Field(description="The schedule's id, from list_schedules")],
    ) -> str:
        """Cancel one of this chat's schedules."""
        return await self.cancel(self._chat(context), id, context.sender)

    # -- commands ---------------------------------------------------------------------------

    def commands(self) -> list[Command]:
        return [
            Command("schedules", "list this chat's schedules", self._cmd_list, immediate=True),
            Command(
                "unschedule",
                "cancel one of this chat's schedules",
                self._cmd_cancel,
                usage="<id>",
                immediate=True,
            ),
        ]

    async def _cmd_list(self, msg: InboundMessage, args: str) -> str:
        if not self._here(msg.session_key):
            return NEEDS_GATEWAY.removesuffix(" Nothing was scheduled.")
        return self.listing(msg.session_key, await asyncio.to_thread(self.store.load), msg.sender)

    async def _cmd_cancel(self, msg: InboundMessage, args: str) -> str:
        if not self._here(msg.session_key):
            return NEEDS_GATEWAY.removesuffix(" Nothing was scheduled.")
        if not args.split():
            return "Usage: /unschedule <id> (/schedules lists them)."
        return await self.cancel(msg.session_key, args.split()[0], msg.sender)


def made_by(asker: Sender | None) -> str | None:
    """In a group, a member other than the owner sees and cancels only what they scheduled
    (None: every schedule of the chat)."""
    if asker is None or not asker.shared_room or asker.is_owner:
        return None
    return asker.id

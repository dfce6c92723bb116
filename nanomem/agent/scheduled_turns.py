"""Scheduled turns: when a schedule fires, the agent runs a turn in the chat that made it.

A firing is an inbound message like any other and goes through the inbox: it is stored, with
the occurrence it stands for as a named inbox position (`schedule:<id>`), in one fsynced
transaction, then handed to the agent loop; its reply is delivered on the chat's channel and
only then leaves the inbox. So a crash after a firing replays that turn at the next start and
never fires the same occurrence twice, and at start the positions say what was missed while
the gateway was down. APScheduler runs one date job per schedule (its next occurrence); the
jobs are rebuilt from the store at every start.

The tools and commands work in `nanomem gateway` only: in the terminal or `chat -m` nothing
would be running at the time, and they say so.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta, tzinfo
from typing import TYPE_CHECKING, Annotated, Any

from loguru import logger
from pydantic import Field

from nanomem.agent.bus import InboundMessage, MessageBus, answering, is_owner
from nanomem.agent.commands import Command, CommandSet
from nanomem.agent.retries import record_failure
from nanomem.agent.schedules import (
    Schedule,
    ScheduleError,
    ScheduleStore,
    local,
    make_schedule,
    zone_named,
)
from nanomem.agent.templates import Templates
from nanomem.audience import current, is_shared_room
from nanomem.config import ScheduleSettings
from nanomem.tools import Tool, ToolError, read_only_tool

if TYPE_CHECKING:
    from nanomem.agent.inbox import Pending

INBOX_CHANNEL = "schedule"  # the inbox's name for fired schedules (their chats have their own)
NEEDS_GATEWAY = (
    "Scheduled messages need the gateway (`nanomem gateway`), which runs them at their time; "
    "here nothing would be running then. Nothing was scheduled."
)
NO_PUSH = "This chat cannot receive messages the agent starts ({channel}); nothing was scheduled."


# While running, a firing later than this (and than the grace) is skipped: the machine slept.
LATE_AT_RUN = timedelta(minutes=1)
RETRY = timedelta(minutes=1)  # after a firing that failed

# (session, made_by) → would the session's channel answer that sender there now? A person
# removed from a channel's allow-list must stop receiving what they scheduled before.
Admits = Callable[[str, str], bool]


def anyone(session: str, made_by: str) -> bool:
    return True


def position_name(schedule_id: str) -> str:
    return f"schedule:{schedule_id}"


class ScheduledTurns:
    def __init__(
        self,
        store: ScheduleStore,
        bus: MessageBus,
        templates: Templates,
        settings: ScheduleSettings,
        timezone: str | None,
    ) -> None:
        self.store, self.bus, self.templates = store, bus, templates
        self.settings, self.timezone = settings, timezone
        self.channels: set[str] = set()  # channels that deliver what the agent starts
        self.admits: Admits = anyone
        self._scheduler: Any = None
        self._firing: set[asyncio.Task[None]] = set()

    @functools.cached_property
    def zone(self) -> tzinfo:
        """`agent.timezone`, or the machine's; looked up on first use (not on every start)."""
        return zone_named(self.timezone)

    @property
    def running(self) -> bool:
        return self._scheduler is not None

    @property
    def grace(self) -> timedelta:
        return timedelta(minutes=self.settings.misfire_grace_min)

    # -- lifecycle (the gateway) -------------------------------------------------------------

    async def start(self, channels: set[str], admits: Admits = anyone) -> None:
        """Replay firings an earlier run left in the inbox, then arm every stored schedule:
        one missed while nothing ran fires now if it is less than the grace late."""
        if self.bus.inbox is None:
            raise RuntimeError("scheduled turns need the durable inbox")
        from apscheduler.schedulers.asyncio import AsyncIOScheduler

        self.channels, self.admits = channels, admits
        self._scheduler = AsyncIOScheduler(timezone=UTC)
        self._scheduler.start()
        for pending in await self.bus.unfinished(INBOX_CHANNEL):
            try:
                await self.readmit(pending)
            except Exception as exc:  # one unreadable firing must not stop every schedule
                logger.exception("schedules: could not read stored firing {}", pending.seq)
                text = str(pending.payload.get("text", ""))
                where = f"{INBOX_CHANNEL}:{pending.chat}"
                await record_failure(self.bus, pending.seq, exc, text, where)
        schedules = await asyncio.to_thread(self.store.load)
        now = datetime.now(UTC)
        armed = 0
        for schedule in schedules:
            channel = schedule.session.partition(":")[0]
            if channel not in channels:  # kept for a start with that channel enabled again
                logger.warning("schedule {}: channel {} is not running", schedule.id, channel)
                continue
            await self._resume(schedule, now)
            armed += 1
        if armed:
            logger.info("schedules: {} armed", armed)

    async def readmit(self, pending: Pending) -> bool:
        """Hand in a stored firing again: left by an earlier run, or tried again after its
        turn failed (agent/retries.py)."""
        payload = pending.payload
        if self._refused(payload["id"], payload["session"], payload.get("made_by", "")):
            await self.bus.forget(pending.seq)
        else:
            await self.bus.publish_inbound(self._message(payload, pending.seq, True))
        return True

    async def stop(self) -> None:
        """Arm nothing more; a firing under way finishes (it is one inbox write)."""
        scheduler, self._scheduler = self._scheduler, None
        if scheduler is None:
            return
        scheduler.pause()
        # Before shutdown(), which would cancel a firing midway (it would be replayed, but the
        # log would call it an error).
        if self._firing:
            await asyncio.gather(*self._firing, return_exceptions=True)
        scheduler.shutdown(wait=False)

    async def _resume(self, schedule: Schedule, now: datetime) -> None:
        stored = await self.bus.position(position_name(schedule.id))
        last = datetime.fromisoformat(stored) if stored else None
        if schedule.once and last is not None:  # fired before the restart: done
            await asyncio.to_thread(self.store.remove, schedule.id)
            return
        after = last or datetime.fromisoformat(schedule.created_at)
        due = schedule.next_after(after)
        if due is None or due > now:
            self._arm(schedule, due)
            return
        missed = _latest_until(schedule, max(after, now - self.grace), now)
        if missed is not None:  # late, but within the grace: once, now
            logger.info(
                "schedule {} ({}) was due at {} while the gateway was down; running it now",
                schedule.id,
                schedule.session,
                due.isoformat(timespec="seconds"),
            )
            self._arm(schedule, missed, catch_up=True)
            return
        upcoming = schedule.next_after(now)
        logger.warning(
            "schedule {} ({}) was due at {}, more than schedule.misfire_grace_min ({} min) ago; "
            "skipped{}",
            schedule.id,
            schedule.session,
            due.isoformat(timespec="seconds"),
            self.settings.misfire_grace_min,
            f", next at {upcoming.isoformat(timespec='seconds')}" if upcoming else "",
        )
        if upcoming is None:
            await asyncio.to_thread(self.store.remove, schedule.id)
        self._arm(schedule, upcoming)

    def _arm(
        self, schedule: Schedule, occurrence: datetime | None, *, catch_up: bool = False
    ) -> None:
        """One date job for its next occurrence; a catch-up (judged at start) runs at once."""
        if self._scheduler is None or occurrence is None:
            return
        self._scheduler.add_job(
            self._fire,
            "date",
            run_date=datetime.now(UTC) if catch_up else occurrence,
            args=[schedule.id, occurrence.isoformat(), catch_up],
            id=schedule.id,
            replace_existing=True,
            misfire_grace_time=None,  # lateness is judged in _fire, which re-arms either way
        )

    # -- firing ------------------------------------------------------------------------------

    async def _fire(self, schedule_id: str, occurrence_text: str, catch_up: bool) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._firing.add(task)
        try:
            occurrence = datetime.fromisoformat(occurrence_text)
            await self._fire_once(schedule_id, occurrence, catch_up)
        except Exception:
            # The inbox busy or the disk full, say. Its date job is spent: without a retry a
            # repeating schedule would never fire again until the next start.
            logger.exception("schedule {} could not fire; trying again in a minute", schedule_id)
            if self._scheduler is not None:
                self._scheduler.add_job(
                    self._fire,
                    "date",
                    run_date=datetime.now(UTC) + RETRY,
                    args=[schedule_id, occurrence_text, False],  # late by then: judged as such
                    id=schedule_id,
                    replace_existing=True,
                    misfire_grace_time=None,
                )
        finally:
            if task is not None:
                self._firing.discard(task)

    async def _fire_once(self, schedule_id: str, occurrence: datetime, catch_up: bool) -> None:
        schedules = await asyncio.to_thread(self.store.load)
        schedule = next((s for s in schedules if s.id == schedule_id), None)
        if schedule is None:
            return  # cancelled meanwhile
        now = datetime.now(UTC)
        recorded = await self.bus.position(position_name(schedule.id))
        if recorded is not None and datetime.fromisoformat(recorded) >= occurrence:
            pass  # in the inbox already (a retry after a later step failed): not twice
        elif now - occurrence > max(self.grace, LATE_AT_RUN) and not catch_up:  # the machine slept
            logger.warning("schedule {} is {} late; skipped", schedule_id, now - occurrence)
        elif self._refused(schedule.id, schedule.session, schedule.made_by):
            pass  # kept: it fires again once they are allowed back
        else:
            payload = {
                "id": schedule.id,
                "session": schedule.session,
                "text": schedule.text,
                "rule": schedule.describe(),
                "created_at": schedule.created_at,
                "occurrence": occurrence.isoformat(),
                "made_by": schedule.made_by,
            }
            chat = schedule.session.partition(":")[2]
            position = (position_name(schedule.id), occurrence.isoformat())
            seqs = await self.bus.receive(INBOX_CHANNEL, [(chat, payload)], position)
            await self.bus.publish_inbound(self._message(payload, seqs[0], False))
            logger.info("schedule {} fired in {}", schedule.id, schedule.session)
        if schedule.once:
            await asyncio.to_thread(self.store.remove, schedule.id)
        else:
            self._arm(schedule, schedule.next_after(max(occurrence, now)))

    def _refused(self, schedule_id: str, session: str, made_by: str) -> bool:
        if self.admits(session, made_by):
            return False
        logger.warning(
            "schedule {} ({}) skipped: whoever made it ({}) is no longer allowed there",
            schedule_id,
            session,
            made_by or "not recorded: the chat itself",
        )
        return True

    def _message(self, payload: dict[str, Any], seq: int | None, replayed: bool) -> InboundMessage:
        channel, _, chat = str(payload["session"]).partition(":")
        created = datetime.fromisoformat(payload["created_at"])
        content = self.templates.render(
            "scheduled_turn.md.j2",
            id=payload["id"],
            rule=payload["rule"],
            created=local(created, self.zone),
            text=payload["text"],
        )
        # From its maker: a schedule the turn makes in turn has the same one (and is admitted
        # as theirs), where no sender would be refused in a group admitting people one by one.
        maker = str(payload.get("made_by", ""))
        metadata = {"schedule": payload["id"]}
        message = InboundMessage(channel, chat, content, maker, metadata=metadata)
        if seq is None:
            return message
        return replace(message, id=InboundMessage.inbox_id(seq), seq=seq, replayed=replayed)

    # -- what a chat does --------------------------------------------------------------------

    def _chat(self) -> str:
        """The session asking; ToolError when schedules cannot work here."""
        if not self.running:
            raise ToolError(NEEDS_GATEWAY)
        audience = current()
        if audience is None:
            raise ToolError(NEEDS_GATEWAY)
        channel = audience.session.partition(":")[0]
        if channel not in self.channels:
            raise ToolError(NO_PUSH.format(channel=channel))
        return audience.session

    def next_run(self, schedule: Schedule) -> datetime | None:
        job = self._scheduler.get_job(schedule.id) if self._scheduler else None
        return job.next_run_time if job is not None else None

    def listing(
        self, session: str, schedules: list[Schedule], asker: InboundMessage | None = None
    ) -> str:
        maker = made_by(session, asker)
        mine = [s for s in schedules if s.session == session and maker in (None, s.made_by)]
        if not mine:
            return "No schedules of yours in this chat." if maker else "No schedules in this chat."
        lines = []
        for s in mine:
            upcoming = self.next_run(s)
            when = local(upcoming, self.zone) if upcoming else "not armed"
            text = s.text if len(s.text) <= 80 else s.text[:79] + "…"
            lines.append(f"{s.id} · {s.describe()} · next {when} · {text}")
        return "\n".join(lines)

    async def _cancel(self, session: str, schedule_id: str, asker: InboundMessage | None) -> str:
        schedule_id = schedule_id.strip().lower()
        maker = made_by(session, asker)
        removed = await asyncio.to_thread(self.store.remove, schedule_id, session, maker)
        if removed is None:
            mine = " of yours" if maker else ""
            return f"No schedule {schedule_id!r}{mine} in this chat (/schedules lists them)."
        if self._scheduler is not None:
            with contextlib.suppress(Exception):  # JobLookupError: it had just fired
                self._scheduler.remove_job(schedule_id)
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
    ) -> str:
        """Schedule a message or task in this chat: once (at), every N minutes, or by cron."""
        session = self._chat()
        now = datetime.now(UTC)
        asker = answering.get()
        try:
            made = make_schedule(
                session,
                text,
                at=at,
                every_minutes=every_minutes,
                cron=cron,
                zone=self.zone,
                now=now,
                made_by=asker.sender_id if asker is not None else "",
            )
            await asyncio.to_thread(self.store.add, made, self.settings.max_per_chat)
        except ScheduleError as exc:
            raise ToolError(f"{exc}; nothing was scheduled") from None
        upcoming = made.next_after(now)
        self._arm(made, upcoming)
        when = local(upcoming, self.zone) if upcoming else "never"
        return f"Scheduled {made.id}: {made.describe()}; next at {when}."

    @read_only_tool
    async def list_schedules(self) -> str:
        """List this chat's schedules with their ids and next run."""
        session = self._chat()
        return self.listing(session, await asyncio.to_thread(self.store.load), answering.get())

    async def cancel_schedule(
        self, id: Annotated[str, Field(description="The schedule's id, from list_schedules")]
    ) -> str:
        """Cancel one of this chat's schedules."""
        return await self._cancel(self._chat(), id, answering.get())

    # -- commands ---------------------------------------------------------------------------

    def register(self, commands: CommandSet) -> None:
        commands.register(
            Command("schedules", "list this chat's schedules", self._cmd_list, immediate=True)
        )
        commands.register(
            Command(
                "unschedule",
                "cancel one of this chat's schedules",
                self._cmd_cancel,
                usage="<id>",
                immediate=True,
            )
        )

    async def _cmd_list(self, msg: InboundMessage, args: str) -> str:
        if not self.running:
            return NEEDS_GATEWAY.removesuffix(" Nothing was scheduled.")
        return self.listing(msg.session_key, await asyncio.to_thread(self.store.load), msg)

    async def _cmd_cancel(self, msg: InboundMessage, args: str) -> str:
        if not self.running:
            return NEEDS_GATEWAY.removesuffix(" Nothing was scheduled.")
        if not args.split():
            return "Usage: /unschedule <id> (/schedules lists them)."
        return await self._cancel(msg.session_key, args.split()[0], msg)


def made_by(session: str, asker: InboundMessage | None) -> str | None:
    """In a group, a member other than the owner sees and cancels only what they scheduled
    (None: every schedule of the chat)."""
    if asker is None or not is_shared_room(session) or is_owner(asker):
        return None
    return asker.sender_id


def _latest_until(schedule: Schedule, after: datetime, until: datetime) -> datetime | None:
    """The last occurrence in (after, until], or None. Looked for in windows back from `until`
    that double: a walk from `after` would step through every occurrence of the grace, which
    on the event loop takes seconds for a rule of every minute and a grace of weeks."""
    window = timedelta(minutes=1)
    while True:
        start = max(after, until - window)
        found = None
        moment = schedule.next_after(start)
        while moment is not None and moment <= until:
            found = moment
            moment = schedule.next_after(moment)
        if found is not None or start == after:
            return found
        window *= 2

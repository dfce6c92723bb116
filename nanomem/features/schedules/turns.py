"""Scheduled turns: when a schedule fires, the agent runs a turn in the chat that made it.

A firing is an inbound message like any other and goes through the inbox: it is stored, with
the occurrence it stands for as a named inbox position (`schedule:<id>`), in one fsynced
transaction, then handed to the agent loop; its reply is delivered on the chat's channel and
only then leaves the inbox. So a crash after a firing replays that turn at the next start and
never fires the same occurrence twice, and at start the positions say what was missed while
the gateway was down. APScheduler runs one date job per schedule (its next occurrence); the
jobs are rebuilt from the store at every start. What a chat does with its schedules (tools,
commands) is nanomem/features/schedules/chat.py.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Mapping
from dataclasses import replace
from datetime import UTC, datetime, timedelta, tzinfo
from typing import TYPE_CHECKING, Any

from loguru import logger

from nanomem.agent import (
    Admits,
    Feature,
    HealthReport,
    InboundMessage,
    MessageBus,
    Reach,
    Templates,
    anyone,
    record_failure,
)
from nanomem.audience import Sender, legacy_room
from nanomem.config import ScheduleSettings
from nanomem.features.schedules.chat import ChatSchedules
from nanomem.features.schedules.rules import Schedule, ScheduleError, local, zone_named
from nanomem.features.schedules.store import ScheduleStore
from nanomem.home import Home
from nanomem.log import EACH

if TYPE_CHECKING:
    from nanomem.agent import Pending, Readmit

INBOX_CHANNEL = "schedule"  # the inbox's name for fired schedules (their chats have their own)

# While running, a firing later than this (and than the grace) is skipped: the machine slept.
LATE_AT_RUN = timedelta(minutes=1)
RETRY = timedelta(minutes=1)  # after a firing that failed
WATCH_S = 1.0  # how often schedules.json is looked at for what other processes changed


def position_name(schedule_id: str) -> str:
    return f"schedule:{schedule_id}"


class ScheduledTurns(ChatSchedules, Feature):
    """As a feature: the chat's tools and commands (chat.py), firings kept in the inbox under
    its own name, and the scheduler the gateway starts."""

    name = "schedules"

    def __init__(
        self,
        store: ScheduleStore,
        bus: MessageBus,
        templates: Templates,
        settings: ScheduleSettings,
        timezone: str | None,
        home: Home | None = None,
    ) -> None:
        self.store, self.bus, self.templates, self.home = store, bus, templates, home
        self.settings, self.timezone = settings, timezone
        self.channels: set[str] = set()  # channels that deliver what the agent starts
        self.admits: Admits = anyone
        self._scheduler: Any = None
        self._firing: set[asyncio.Task[None]] = set()
        self.failed: dict[str, str] = {}  # id → why it is not armed (this run)
        self.file_problem: str | None = None  # why schedules.json could not be read at start
        self._watching: asyncio.Task[None] | None = None

    @functools.cached_property
    def zone(self) -> tzinfo:
        """`agent.timezone`, or the machine's; looked up on first use (not on every start)."""
        return zone_named(self.timezone)

    @property
    def grace(self) -> timedelta:
        return timedelta(minutes=self.settings.misfire_grace_min)

    # -- lifecycle (the gateway) -------------------------------------------------------------

    def inbox_channels(self) -> Mapping[str, Readmit]:
        return {INBOX_CHANNEL: self.readmit}

    async def start(self, reach: Reach) -> None:
        """Replay firings an earlier run left in the inbox, then arm every stored schedule for
        the channels that push (`reach.pushing`): one missed while nothing ran fires now if it
        is less than the grace late. Only with the durable inbox (the gateway): in `nanomem
        chat` the schedules of its chat are stored for the gateway (chat.py)."""
        if self.bus.inbox is None:
            self.channels = set(reach.pushing)
            return
        from apscheduler.schedulers.asyncio import AsyncIOScheduler

        pushing = self.channels = set(reach.pushing)
        self.admits = reach.admits
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
        stored = await asyncio.to_thread(self.store.read)
        self.failed, self.file_problem = {}, stored.problem
        if stored.problem is not None:
            logger.error("schedules: {}", stored.problem)
        for rejected in stored.rejected:  # once each, here: firings never log them again
            self._not_armed(rejected.id, rejected.reason)
        now = datetime.now(UTC)
        armed = 0
        for schedule in stored.schedules:
            channel = schedule.session.partition(":")[0]
            if channel not in pushing:  # kept for a start with that channel enabled again
                logger.bind(**{EACH: True}).warning(
                    "schedule {}: channel {} is not running", schedule.id, channel
                )
                continue
            try:
                await self._resume(schedule, now)
            except Exception as exc:  # one entry must never keep the others from being armed
                logger.opt(exception=exc).debug("schedule {} could not be armed", schedule.id)
                self._not_armed(schedule.id, f"{type(exc).__name__}: {exc}")
                continue
            armed += 1
        if armed:
            logger.info("schedules: {} armed", armed)
        self._watching = asyncio.create_task(self._watch(), name="schedules-watch")

    async def readmit(self, pending: Pending) -> bool:
        """Hand in a stored firing again: left by an earlier run, or tried again after its
        turn failed (agent/retries.py)."""
        payload = pending.payload
        if self._refused(payload["id"], payload["session"], payload.get("made_by", "")):
            await self.bus.forget(pending.seq)
        else:
            sender = pending.vouched(maker(payload))  # admitted now, as it was then
            await self.bus.publish_inbound(self._message(payload, pending.seq, True, sender))
        return True

    def _not_armed(self, schedule_id: str, reason: str) -> None:
        self.failed[schedule_id] = reason
        # Once per entry (never repeated): not for the flood guard to fold into a count.
        logger.bind(**{EACH: True}).error("schedule {} is not armed: {}", schedule_id, reason)

    def health(self) -> Mapping[str, HealthReport]:
        """How many are armed, which failed to arm and why, whether the file could not be read
        (null when not running); either problem is a warning: only a person can mend it."""
        if self._scheduler is None:
            return {"schedules": HealthReport(None)}
        report = {
            "armed": len(self._scheduler.get_jobs()),
            "failed": [{"id": key, "reason": why} for key, why in self.failed.items()],
            "file": self.file_problem,
        }
        return {"schedules": HealthReport(report, warning=bool(self.failed or self.file_problem))}

    async def stop(self, grace_s: float = 0) -> None:
        """Arm nothing more; a firing under way finishes (it is one inbox write)."""
        scheduler, self._scheduler = self._scheduler, None
        if scheduler is None:
            return
        if self._watching is not None:
            self._watching.cancel()
            await asyncio.gather(self._watching, return_exceptions=True)
        scheduler.pause()
        # Before shutdown(), which would cancel a firing midway (it would be replayed, but the
        # log would call it an error).
        if self._firing:
            await asyncio.gather(*self._firing, return_exceptions=True)
        scheduler.shutdown(wait=False)

    async def _watch(self) -> None:
        """Another process changed schedules.json (a reminder made or cancelled in `nanomem
        chat`): within WATCH_S, what is new is armed and what is gone disarmed. One stat per
        look; the file is read only when it changed."""
        seen = await asyncio.to_thread(self.store.stamp)
        while self._scheduler is not None:
            await asyncio.sleep(WATCH_S)
            stamp = await asyncio.to_thread(self.store.stamp)
            if stamp == seen:
                continue
            seen = stamp
            try:
                await self._take_up_changes()
            except Exception:  # the next change is looked at all the same
                logger.exception("schedules: could not take up a change of {}", self.store.path)

    async def _take_up_changes(self) -> None:
        stored = await asyncio.to_thread(self.store.read)
        if stored.problem is not None:
            if stored.problem != self.file_problem:
                logger.error("schedules: {}", stored.problem)
            self.file_problem = stored.problem
            return  # nothing armed is changed until a person fixes the file
        self.file_problem = None
        for rejected in stored.rejected:
            if rejected.id not in self.failed:
                self._not_armed(rejected.id, rejected.reason)
        scheduler, wanted = self._scheduler, {s.id for s in stored.schedules}
        if scheduler is None:
            return
        for job in scheduler.get_jobs():
            if job.id not in wanted:
                job.remove()
                logger.info("schedule {} was cancelled in another process; disarmed", job.id)
        now = datetime.now(UTC)
        for schedule in stored.schedules:
            channel = schedule.session.partition(":")[0]
            if scheduler.get_job(schedule.id) or schedule.id in self.failed:
                continue
            if channel not in self.channels:
                continue  # told at start; kept for a start with that channel
            await self._resume(schedule, now)
            logger.info(
                "schedule {} ({}) taken up from another process", schedule.id, schedule.session
            )

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
        logger.bind(**{EACH: True}).warning(  # once per entry at start
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
        try:
            self._scheduler.add_job(
                self._fire,
                "date",
                run_date=datetime.now(UTC) if catch_up else occurrence,
                args=[schedule.id, occurrence.isoformat(), catch_up],
                id=schedule.id,
                replace_existing=True,
                misfire_grace_time=None,  # lateness is judged in _fire, which re-arms either way
            )
        except (OverflowError, ValueError) as exc:  # checked when made and read: a last guard
            self._not_armed(schedule.id, f"{type(exc).__name__}: {exc}")

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
        # One lookup in the store's shared read: a thousand firings at once must not each
        # parse the whole file.
        schedule = await asyncio.to_thread(self.store.get, schedule_id)
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
                "room": schedule.is_room,
            }
            chat = schedule.session.partition(":")[2]
            position = (position_name(schedule.id), occurrence.isoformat())
            item = (chat, payload, maker(payload))
            seqs = await self.bus.receive(INBOX_CHANNEL, [item], position)
            await self.bus.publish_inbound(self._message(payload, seqs[0], False))
            logger.info("schedule {} fired in {}", schedule.id, schedule.session)
        if schedule.once:
            await asyncio.to_thread(self.store.remove, schedule.id)
            return
        try:
            upcoming = schedule.reachable(max(occurrence, now))
        except ScheduleError as exc:  # e.g. its next time now lies past the horizon
            self._not_armed(schedule.id, str(exc))
            return
        self._arm(schedule, upcoming)

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

    def _message(
        self,
        payload: dict[str, Any],
        seq: int | None,
        replayed: bool,
        sender: Sender | None = None,
    ) -> InboundMessage:
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
        message = InboundMessage(channel, chat, content, sender or maker(payload))
        if seq is None:
            return message
        return replace(message, id=InboundMessage.inbox_id(seq), seq=seq, replayed=replayed)


def maker(payload: dict[str, Any]) -> Sender:
    """A firing's sender: whoever made the schedule (not the owner, nobody there to answer)."""
    room = payload.get("room")  # a firing stored before rooms were recorded has none
    if not isinstance(room, bool):
        room = legacy_room(str(payload["session"]))
    return Sender(str(payload.get("made_by", "")), shared_room=room)


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

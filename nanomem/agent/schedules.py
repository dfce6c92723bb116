"""Schedules: what a chat asked to happen later (once, every N minutes, or on a cron rule), and
the file in the home that keeps them across restarts.

`$NANOMEM_HOME/schedules.json` is rewritten whole (temp file, fsync, rename) under the home's
`schedules` lock, and read fresh from the file for every change, never from a cache. When a
schedule last fired is not kept here: it is stored in the inbox together with the message it
fired (nanomem/agent/scheduled_turns.py), so "fired" and "recorded as fired" are one step.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta, tzinfo
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from loguru import logger

from nanomem import untrusted_json
from nanomem.durable import atomic_write_text
from nanomem.locks import FileLock

FORMAT_VERSION = 1
MAX_TEXT_CHARS = 4000
MAX_EVERY_MINUTES = 60 * 24 * 366
_TICK = timedelta(microseconds=1)


class ScheduleError(Exception):
    """A schedule that cannot be made; the message says why, for the person or the model."""


@dataclass(frozen=True)
class Schedule:
    id: str
    session: str  # the chat that made it, and where it runs
    text: str
    created_at: str  # ISO 8601, UTC
    timezone: str  # the IANA zone its naive times and cron rule are read in ("" = the machine's)
    at: str | None = None  # ISO 8601 with an offset
    every_minutes: int | None = None
    cron: str | None = None
    made_by: str = ""  # the sender who asked for it: it fires only while the channel admits them
    v: int = FORMAT_VERSION

    @property
    def once(self) -> bool:
        return self.at is not None

    @property
    def zone(self) -> tzinfo:
        return zone_named(self.timezone)

    def describe(self) -> str:
        """How it repeats, for people: `once at ...`, `every 30 min`, `cron 0 9 * * * (zone)`."""
        if self.at is not None:
            return f"once at {local(datetime.fromisoformat(self.at), self.zone)}"
        if self.every_minutes is not None:
            return f"every {self.every_minutes} min"
        return f"cron `{self.cron}` ({self.timezone or 'local time'})"

    def next_after(self, moment: datetime) -> datetime | None:
        """Its first occurrence strictly after `moment` (aware), or None when there is none."""
        if self.at is not None:
            at = datetime.fromisoformat(self.at)
            return at if at > moment else None
        if self.every_minutes is not None:
            from apscheduler.triggers.interval import IntervalTrigger

            created = datetime.fromisoformat(self.created_at).replace(microsecond=0)
            every = timedelta(minutes=self.every_minutes)
            trigger = IntervalTrigger(minutes=self.every_minutes, start_date=created + every)
            found: datetime | None = trigger.get_next_fire_time(None, moment + _TICK)
            return found
        return self._next_cron(moment)

    def _next_cron(self, moment: datetime) -> datetime | None:
        """The rule is matched on the zone's wall clock, and each match placed in the zone
        here: APScheduler's own zone arithmetic fires a daily time of the hour that repeats
        when daylight saving ends twice, and can step back in time there. A wall time of the
        repeated hour fires once (its first), unless `moment` is already past that one; a
        time the clocks skip fires when they have jumped (02:30 at 03:30)."""
        from apscheduler.triggers.cron import CronTrigger

        zone = self.zone
        rule = CronTrigger.from_crontab(str(self.cron), timezone=UTC)  # UTC has no DST
        wall = moment.astimezone(zone).replace(tzinfo=UTC, fold=0)
        match: datetime | None = rule.get_next_fire_time(None, wall + _TICK)
        for _ in range(4):  # one step is enough; a bound all the same
            if match is None:
                return None
            for fold in (0, 1):
                found = match.replace(tzinfo=zone, fold=fold).astimezone(UTC)
                if found > moment:
                    return found
            match = rule.get_next_fire_time(None, match + _TICK)
        return None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Schedule | None:
        try:
            known = {k: data[k] for k in cls.__dataclass_fields__ if k in data}
            found = cls(**known)
            found.next_after(datetime.now(UTC))  # a rule that no longer parses is refused here
            return found
        except (TypeError, ValueError, KeyError, ZoneInfoNotFoundError):
            return None


def zone_named(name: str | None) -> tzinfo:
    """An IANA zone; empty or None: the machine's own (with its daylight saving rules)."""
    if name:
        return ZoneInfo(name)
    from tzlocal import get_localzone  # APScheduler's own dependency

    return get_localzone()


def zone_name(zone: tzinfo) -> str:
    return str(getattr(zone, "key", "") or "")


def local(moment: datetime, zone: tzinfo) -> str:
    return moment.astimezone(zone).strftime("%Y-%m-%d %H:%M %Z")


def make_schedule(
    session: str,
    text: str,
    *,
    at: str | None,
    every_minutes: int | None,
    cron: str | None,
    zone: tzinfo,
    now: datetime,
    made_by: str = "",
) -> Schedule:
    """A new schedule from what the model asked; ScheduleError says what is wrong."""
    text = text.strip()
    if not text:
        raise ScheduleError("text is empty: say what should happen")
    if len(text) > MAX_TEXT_CHARS:
        raise ScheduleError(f"text is too long ({len(text)} characters; limit {MAX_TEXT_CHARS})")
    if sum(value is not None for value in (at, every_minutes, cron)) != 1:
        raise ScheduleError("give exactly one of at, every_minutes or cron")
    fields: dict[str, Any] = {}
    if at is not None:
        fields["at"] = _when(at, zone, now).isoformat()
    elif every_minutes is not None:
        if not 1 <= every_minutes <= MAX_EVERY_MINUTES:
            raise ScheduleError(f"every_minutes must be from 1 to {MAX_EVERY_MINUTES}")
        fields["every_minutes"] = every_minutes
    else:
        fields["cron"] = _cron(str(cron))
    schedule = Schedule(
        id=secrets.token_hex(4),
        session=session,
        text=text,
        created_at=now.astimezone(UTC).isoformat(timespec="seconds"),
        timezone=zone_name(zone),
        made_by=made_by,
        **fields,
    )
    try:
        upcoming = schedule.next_after(now)
    except ValueError as exc:
        raise ScheduleError(f"cron {cron!r} cannot be used: {exc}") from None
    if upcoming is None:
        raise ScheduleError(f"{cron!r} never happens")
    return schedule


def _when(text: str, zone: tzinfo, now: datetime) -> datetime:
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ScheduleError(
            f"at={text!r} is not an ISO 8601 time, e.g. 2026-11-24T09:00 or "
            "2026-11-24T09:00:00+01:00"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=zone)
    if moment <= now:
        raise ScheduleError(f"at={text!r} has passed (it is now {local(now, zone)})")
    return moment


def _cron(text: str) -> str:
    fields = text.split()
    if len(fields) != 5:
        raise ScheduleError(
            f"cron {text!r} must have 5 fields: minute hour day month weekday, e.g. '0 9 * * 1-5'"
        )
    return " ".join(fields)


class ScheduleStore:
    """Blocking calls, each holding the home's `schedules` lock: run them in a worker thread."""

    def __init__(self, path: Path, lock: FileLock) -> None:
        self.path = path
        self.lock = lock

    def load(self) -> list[Schedule]:
        with self.lock.hold_sync():
            return self._read()

    def add(self, schedule: Schedule, max_per_chat: int) -> None:
        with self.lock.hold_sync():
            schedules = self._read()
            mine = sum(1 for s in schedules if s.session == schedule.session)
            if mine >= max_per_chat:
                raise ScheduleError(
                    f"this chat has {mine} schedules, the most allowed (schedule.max_per_chat); "
                    "cancel one first"
                )
            self._write([*schedules, schedule])

    def remove(
        self, schedule_id: str, session: str | None = None, made_by: str | None = None
    ) -> Schedule | None:
        """The removed schedule; None when there is none by that id (in that chat's, and made
        by that sender, if given)."""
        with self.lock.hold_sync():
            schedules = self._read()
            found = next((s for s in schedules if s.id == schedule_id), None)
            if found is None or (session is not None and found.session != session):
                return None
            if made_by is not None and found.made_by != made_by:
                return None
            self._write([s for s in schedules if s.id != schedule_id])
            return found

    def _read(self) -> list[Schedule]:
        try:
            data = untrusted_json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return []
        except ValueError as exc:
            # Written by rename, so never torn; a hand edit gone wrong must not stop the gateway.
            aside = self.path.with_name(self.path.name + ".unreadable")
            logger.error("{} is unreadable ({}); moved to {}", self.path, exc, aside)
            self.path.rename(aside)
            return []
        found = []
        for item in data.get("schedules", []) if isinstance(data, dict) else []:
            schedule = Schedule.from_dict(item) if isinstance(item, dict) else None
            if schedule is None:
                logger.error("schedules.json: skipped an unreadable schedule: {}", item)
                continue
            found.append(schedule)
        return found

    def _write(self, schedules: list[Schedule]) -> None:
        body = {"v": FORMAT_VERSION, "schedules": [s.to_dict() for s in schedules]}
        atomic_write_text(self.path, json.dumps(body, ensure_ascii=False, indent=1) + "\n")

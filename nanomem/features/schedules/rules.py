"""Schedules: what a chat asked to happen later (once, every N minutes, or on a cron rule),
and the checks that a schedule can be armed at all. The file that keeps them across restarts is
nanomem/features/schedules/store.py. When a schedule last fired is not kept here: it is stored
in the inbox together with the message it fired (nanomem/features/schedules/turns.py), so "fired"
and "recorded as fired" are one step.
"""

from __future__ import annotations

import re
import secrets
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta, tzinfo
from typing import Any
from zoneinfo import ZoneInfo

from nanomem.audience import legacy_room

FORMAT_VERSION = 1
MAX_TEXT_CHARS = 4000
MAX_EVERY_MINUTES = 60 * 24 * 366
MAX_CRON_CHARS = 200  # it is quoted in errors and log lines
# The furthest ahead a schedule's next time may be. Near the year 9999 datetime arithmetic
# overflows (APScheduler's conversion to UTC raised at arming), and a reminder decades away is
# a mistake far more often than a wish.
HORIZON_YEARS = 10
HORIZON = timedelta(days=365 * HORIZON_YEARS + 3)
ID_PATTERN = re.compile(r"[0-9A-Za-z_-]{1,32}")  # printable in log lines and /health
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
    # Made in a shared room, by its channel's word; None in one stored before that was recorded.
    room: bool | None = None
    v: int = FORMAT_VERSION

    @property
    def is_room(self) -> bool:
        """Made in a shared room: as recorded, or by the rule of its time (legacy_room)."""
        return self.room if self.room is not None else legacy_room(self.session)

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
        minute, hour, day, month, weekday = str(self.cron).split()
        rule = CronTrigger(  # in UTC, which has no DST
            minute=minute,
            hour=hour,
            day=day,
            month=month,
            day_of_week=_weekdays(weekday),
            timezone=UTC,
        )
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

    def reachable(self, now: datetime) -> datetime | None:
        """Its next time after `now`, or None for a one-shot whose time has passed (its caller
        judges that); ScheduleError when it cannot be armed: a repeating rule that never
        happens, or a next time out of range or more than HORIZON ahead."""
        try:
            upcoming = self.next_after(now)
            too_far = upcoming is not None and upcoming - now > HORIZON
        except OverflowError:  # near the years 1 and 9999
            when = self.at or self.created_at
            raise ScheduleError(f"{when} is out of range for a schedule") from None
        except ValueError as exc:
            raise ScheduleError(f"cron {self.cron!r} cannot be used: {exc}") from None
        if upcoming is None and self.at is None:
            raise ScheduleError(f"cron {self.cron!r} never happens")
        if too_far:
            when = self.at or f"its next time ({upcoming:%Y-%m-%d})"
            raise ScheduleError(_too_far(when))
        return upcoming

    @classmethod
    def from_dict(cls, data: Any, now: datetime) -> Schedule:
        """An entry of schedules.json, checked as the model's are; ScheduleError says why not."""
        if not isinstance(data, dict):
            raise ScheduleError("not a JSON object")
        fields: dict[str, Any] = {}
        for name in ("id", "session", "text", "created_at", "timezone", "at", "cron", "made_by"):
            value = data.get(name)
            required = name in ("id", "session", "text", "created_at")
            if value is None and not required:
                continue
            if not isinstance(value, str):
                raise ScheduleError(
                    f"{name} is {'not a string' if value is not None else 'missing'}"
                )
            fields[name] = value
        if not ID_PATTERN.fullmatch(fields["id"]):
            raise ScheduleError("id must be 1 to 32 letters, digits, - or _")
        if ":" not in fields["session"]:
            raise ScheduleError(f"session {fields['session'][:80]!r} is not channel:chat")
        every = data.get("every_minutes")
        if every is not None:
            if isinstance(every, bool) or not isinstance(every, int):
                raise ScheduleError("every_minutes is not a whole number")
            fields["every_minutes"] = every
        _check_text(fields["text"])
        fields.setdefault("timezone", "")  # the machine's zone
        zone = zone_checked(fields["timezone"])
        try:
            created = datetime.fromisoformat(fields["created_at"])
        except ValueError:
            raise ScheduleError("created_at is not an ISO 8601 time") from None
        if created.tzinfo is None:
            raise ScheduleError("created_at has no UTC offset")
        at = fields.pop("at", None)
        if at is not None and _when(at, None).tzinfo is None:
            raise ScheduleError(f"at={at[:80]!r} has no UTC offset")
        rule = _rule(at, fields.pop("every_minutes", None), fields.pop("cron", None), zone)
        if isinstance(room := data.get("room"), bool):
            fields["room"] = room
        schedule = cls(**(fields | rule))
        schedule.reachable(now)
        return schedule


def _too_far(when: str) -> str:
    return f"{when} is more than {HORIZON_YEARS} years ahead, the furthest a schedule may be"


def _check_text(text: str) -> None:
    if not text.strip():
        raise ScheduleError("text is empty: say what should happen")
    if len(text) > MAX_TEXT_CHARS:
        raise ScheduleError(f"text is too long ({len(text)} characters; limit {MAX_TEXT_CHARS})")


def _rule(
    at: str | None, every_minutes: int | None, cron: str | None, zone: tzinfo
) -> dict[str, Any]:
    """Exactly one of the three, checked; `at` keeps the offset it has (none: `zone`'s)."""
    if sum(value is not None for value in (at, every_minutes, cron)) != 1:
        raise ScheduleError("give exactly one of at, every_minutes or cron")
    if at is not None:
        return {"at": _when(at, zone).isoformat()}
    if every_minutes is not None:
        if not 1 <= every_minutes <= MAX_EVERY_MINUTES:
            raise ScheduleError(f"every_minutes must be from 1 to {MAX_EVERY_MINUTES}")
        return {"every_minutes": every_minutes}
    return {"cron": _cron(str(cron))}


def zone_checked(name: str) -> tzinfo:
    """zone_named, or ScheduleError for a name that is no IANA zone."""
    try:
        return zone_named(name)
    except (KeyError, ValueError, OSError):  # ZoneInfoNotFoundError is a KeyError
        shown = name[:80]
        raise ScheduleError(
            f"{shown!r} is not a known time zone (an IANA name such as Europe/Berlin)"
        ) from None


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
    room: bool = False,
) -> Schedule:
    """A new schedule from what the model asked; ScheduleError says what is wrong."""
    text = text.strip()
    _check_text(text)
    schedule = Schedule(
        id=secrets.token_hex(4),
        session=session,
        text=text,
        created_at=now.astimezone(UTC).isoformat(timespec="seconds"),
        timezone=zone_name(zone),
        made_by=made_by,
        room=room,
        **_rule(at, every_minutes, cron, zone),
    )
    if schedule.reachable(now) is None:
        raise ScheduleError(f"at={at!r} has passed (it is now {local(now, zone)})")
    return schedule


def _when(text: str, zone: tzinfo | None) -> datetime:
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ScheduleError(
            f"at={text[:80]!r} is not an ISO 8601 time, e.g. 2026-11-24T09:00 or "
            "2026-11-24T09:00:00+01:00"
        ) from None
    return moment if moment.tzinfo is not None or zone is None else moment.replace(tzinfo=zone)


_DAYS = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")  # crontab's numbers: 0 (and 7) = Sunday


def _weekdays(field: str) -> str:
    """A crontab weekday field as APScheduler 3 takes it: day names, since its numbers start at
    Monday (`1-5`, Monday to Friday in cron, was Tuesday to Saturday there)."""
    if field == "*":
        return field
    days: set[int] = set()
    for part in field.split(","):
        span, slash, step_text = part.partition("/")
        step = int(step_text) if slash else 1
        if span == "*":
            low, high = 0, 6
        elif "-" in span:
            first, _, last = span.partition("-")
            low, high = _day(first), _day(last)
        else:
            low = _day(span)
            high = 6 if slash else low  # `1/2`: from Monday on, every other day
        if step < 1 or low > high:
            raise ValueError(f"weekday {part!r} is not a range of days")
        days.update(day % 7 for day in range(low, high + 1, step))
    return ",".join(_DAYS[day] for day in sorted(days))


def _day(text: str) -> int:
    if text.isdigit() and int(text) <= 7:
        return int(text)
    if text.lower() in _DAYS:
        return _DAYS.index(text.lower())
    raise ValueError(f"weekday {text!r} is not 0-7 or sun-sat")


def _cron(text: str) -> str:
    if len(text) > MAX_CRON_CHARS:
        raise ScheduleError(f"cron is too long ({len(text)} characters; limit {MAX_CRON_CHARS})")
    fields = text.split()
    if len(fields) != 5:
        raise ScheduleError(
            f"cron {text!r} must have 5 fields: minute hour day month weekday, e.g. '0 9 * * 1-5'"
        )
    return " ".join(fields)

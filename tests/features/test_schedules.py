import asyncio
import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
from loguru import logger

from nanomem.agent import Reach
from nanomem.agent.bus import InboundMessage, MessageBus
from nanomem.agent.inbox import SqliteInbox
from nanomem.agent.templates import Templates
from nanomem.audience import Sender, audience_of
from nanomem.config import ScheduleSettings
from nanomem.features.schedules.chat import NEEDS_GATEWAY
from nanomem.features.schedules.rules import Schedule, ScheduleError, make_schedule
from nanomem.features.schedules.store import ScheduleStore
from nanomem.features.schedules.turns import (
    INBOX_CHANNEL,
    ScheduledTurns,
    _latest_until,
    position_name,
)
from nanomem.locks import FileLock
from nanomem.tools import ToolContext
from nanomem.tools.registry import ToolError
from tests.conftest import log_lines
from tests.helpers import until

BERLIN = ZoneInfo("Europe/Berlin")
NOW = datetime(2026, 11, 23, 14, 0, tzinfo=UTC)


def make(**rule: object) -> Schedule:
    fields: dict[str, object] = {"at": None, "every_minutes": None, "cron": None} | rule
    return make_schedule("telegram:1", "call mum", zone=BERLIN, now=NOW, **fields)  # type: ignore[arg-type]


# -- rules -----------------------------------------------------------------------------------


def test_a_naive_time_is_in_the_agent_time_zone_and_an_offset_is_kept() -> None:
    assert make(at="2026-11-24T09:00").at == "2026-11-24T09:00:00+01:00"
    assert make(at="2026-11-24T09:00:00+05:00").at == "2026-11-24T09:00:00+05:00"
    assert make(at="2026-11-24T09:00:00Z").next_after(NOW) == datetime(2026, 11, 24, 9, tzinfo=UTC)


def test_every_minutes_starts_one_interval_after_creation() -> None:
    every = make(every_minutes=30)
    first = every.next_after(NOW)
    assert first == NOW + timedelta(minutes=30)
    assert every.next_after(first) == NOW + timedelta(minutes=60)  # type: ignore[arg-type]
    assert every.describe() == "every 30 min"


def test_cron_follows_the_zone_across_daylight_saving() -> None:
    daily = make(cron="0 9 * * *")
    assert daily.next_after(NOW) == datetime(2026, 11, 24, 8, tzinfo=UTC)  # 09:00 CET
    summer = datetime(2027, 7, 1, 12, tzinfo=UTC)
    assert daily.next_after(summer) == datetime(2027, 7, 2, 7, tzinfo=UTC)  # 09:00 CEST
    assert daily.describe() == "cron `0 9 * * *` (Europe/Berlin)"


@pytest.mark.parametrize(
    ("weekday", "days"),
    [
        ("1-5", ["Mon", "Tue", "Wed", "Thu", "Fri"]),
        ("0", ["Sun"]),
        ("7", ["Sun"]),
        ("5-7", ["Fri", "Sat", "Sun"]),
        ("*/2", ["Sun", "Tue", "Thu", "Sat"]),
        ("mon,wed", ["Mon", "Wed"]),
        ("SAT", ["Sat"]),
    ],
)
def test_cron_weekdays_count_from_sunday_as_crontab_does(weekday: str, days: list[str]) -> None:
    rule = make(cron=f"0 9 * * {weekday}")
    week = firings(rule, NOW, NOW + timedelta(days=7))
    assert sorted(moment.strftime("%a") for moment in week) == sorted(days)


@pytest.mark.parametrize("weekday", ["8", "fri-mon", "mon/0", "funday"])
def test_a_weekday_that_is_no_day_is_refused(weekday: str) -> None:
    with pytest.raises(ScheduleError, match="cannot be used"):
        make(cron=f"0 9 * * {weekday}")


NEW_YORK = ZoneInfo("America/New_York")


def firings(schedule: Schedule, start: datetime, end: datetime) -> list[datetime]:
    found, moment = [], start
    while (moment := schedule.next_after(moment)) is not None and moment < end:  # type: ignore[assignment]
        found.append(moment)
    return found


def test_a_daily_cron_in_the_hour_repeated_when_daylight_saving_ends_fires_once() -> None:
    daily = make_schedule(
        "telegram:1", "x", at=None, every_minutes=None, cron="30 1 * * *", zone=NEW_YORK, now=NOW
    )
    day = firings(
        daily, datetime(2026, 10, 31, 12, tzinfo=UTC), datetime(2026, 11, 2, 12, tzinfo=UTC)
    )
    assert day == [
        datetime(2026, 11, 1, 5, 30, tzinfo=UTC),
        datetime(2026, 11, 2, 6, 30, tzinfo=UTC),
    ]
    # Started inside the repeated hour, after its first 01:30: the second 01:30 is today's.
    assert daily.next_after(datetime(2026, 11, 1, 6, 10, tzinfo=UTC)) == datetime(
        2026, 11, 1, 6, 30, tzinfo=UTC
    )


def test_cron_occurrences_only_move_forward_across_daylight_saving() -> None:
    half_hourly = make_schedule(
        "telegram:1", "x", at=None, every_minutes=None, cron="*/30 * * * *", zone=NEW_YORK, now=NOW
    )
    start, end = datetime(2026, 11, 1, 4, tzinfo=UTC), datetime(2026, 11, 1, 9, tzinfo=UTC)
    found = firings(half_hourly, start, end)
    assert found == sorted(set(found)) and len(found) >= 7
    walls = [f.astimezone(NEW_YORK).strftime("%H:%M") for f in found]
    assert len(walls) == len(set(walls))  # no wall-clock time twice
    daily = make_schedule(
        "telegram:1", "x", at=None, every_minutes=None, cron="30 2 * * *", zone=NEW_YORK, now=NOW
    )
    # 02:30 does not exist on 2027-03-14: it fires when the clocks have jumped, once.
    assert firings(
        daily, datetime(2027, 3, 13, 12, tzinfo=UTC), datetime(2027, 3, 15, 12, tzinfo=UTC)
    ) == [
        datetime(2027, 3, 14, 7, 30, tzinfo=UTC),
        datetime(2027, 3, 15, 6, 30, tzinfo=UTC),
    ]


@pytest.mark.parametrize(
    ("rule", "says"),
    [
        ({}, "exactly one of at, every_minutes or cron"),
        ({"at": "2026-11-24T09:00", "every_minutes": 5}, "exactly one"),
        ({"every_minutes": 0}, "every_minutes must be from 1"),
        ({"cron": "0 9 * *"}, "must have 5 fields"),
        ({"cron": "0 " * 500}, "cron is too long"),
        ({"cron": "99 9 * * *"}, "cannot be used"),
        ({"cron": "0 9 31 2 *"}, "never happens"),
        ({"at": "tomorrow at nine"}, "not an ISO 8601 time"),
        ({"at": "2026-11-23T14:59"}, "has passed"),  # 13:59 UTC
    ],
)
def test_bad_rules_say_what_is_wrong(rule: dict[str, object], says: str) -> None:
    with pytest.raises(ScheduleError, match=says):
        make(**rule)


# -- the store -------------------------------------------------------------------------------


@pytest.fixture
def store(tmp_path: Path) -> ScheduleStore:
    lock = FileLock(tmp_path / "locks" / "s.lock")
    return ScheduleStore(tmp_path / "schedules.json", lock, max_per_chat=3)


def test_the_store_keeps_schedules_and_a_chat_removes_only_its_own(store: ScheduleStore) -> None:
    mine, theirs = make(every_minutes=5), make(cron="0 9 * * *")
    theirs = Schedule(**(theirs.to_dict() | {"session": "telegram:2"}))
    store.add(mine)
    store.add(theirs)
    assert [s.id for s in store.load()] == [mine.id, theirs.id]
    assert json.loads(store.path.read_text())["v"] == 1
    assert store.remove(theirs.id, "telegram:1") is None
    assert store.remove(mine.id, "telegram:1") == mine
    assert store.load() == [theirs]


def test_a_chat_has_at_most_max_per_chat(store: ScheduleStore) -> None:
    store.max_per_chat = 2
    store.add(make(every_minutes=5))
    store.add(make(every_minutes=6))
    with pytest.raises(ScheduleError, match=r"schedule\.max_per_chat"):
        store.add(make(every_minutes=7))
    assert len(store.load()) == 2


def test_an_unreadable_store_is_left_alone_and_never_written_over(store: ScheduleStore) -> None:
    store.path.write_text("{not json")
    stored = store.read()
    assert stored.schedules == [] and "is not valid JSON" in str(stored.problem)
    with pytest.raises(ScheduleError, match="not valid JSON"):
        store.add(make(every_minutes=5))
    with pytest.raises(ScheduleError, match="not valid JSON"):
        store.remove("abcd1234")
    assert store.path.read_text() == "{not json"


def test_bad_entries_are_kept_as_written_when_the_file_is_rewritten(store: ScheduleStore) -> None:
    bad = {"id": "badzone", "session": "telegram:1", "text": "x", "timezone": "Mars/Olympus"}
    bad |= {"created_at": NOW.isoformat(), "cron": "0 9 * * *"}
    store.path.write_text(json.dumps({"v": 1, "schedules": [bad]}))
    (rejected,) = store.read().rejected
    assert rejected.id == "badzone" and "'Mars/Olympus' is not a known time zone" in rejected.reason
    made = make(every_minutes=5)
    store.add(made)
    assert json.loads(store.path.read_text())["schedules"] == [bad, made.to_dict()]
    assert store.remove(made.id) == made
    assert json.loads(store.path.read_text())["schedules"] == [bad]


@pytest.mark.parametrize(
    ("entry", "says"),
    [
        ({"at": "9999-12-31T23:59:00-05:00"}, "more than 10 years ahead"),
        ({"at": "2030-01-01T09:00"}, "has no UTC offset"),
        ({"every_minutes": 60, "created_at": "9999-12-31T00:00:00+00:00"}, "10 years ahead"),
        ({"every_minutes": True}, "not a whole number"),
        ({"cron": "0 9 31 2 *"}, "never happens"),
        ({"cron": "0 0 29 2 mon"}, "10 years ahead"),
        ({"cron": "* * * * *", "timezone": "../../etc/passwd"}, "not a known time zone"),
        ({"cron": "* * * * *", "id": "a\nb"}, "id must be"),
        ({"cron": "* * * * *", "text": ""}, "text is empty"),
        ({"cron": "* * * * *", "session": 5}, "session is not a string"),
    ],
)
def test_a_hand_written_entry_that_cannot_be_armed_says_why(
    store: ScheduleStore, entry: dict[str, object], says: str
) -> None:
    base = {"id": "e1", "session": "telegram:1", "text": "x", "timezone": "Europe/Berlin"}
    base["created_at"] = NOW.isoformat()
    store.path.write_text(json.dumps({"v": 1, "schedules": [base | entry]}))
    (rejected,) = store.read().rejected
    assert says in rejected.reason
    assert rejected.id == ("e1" if "id" not in entry else "#1")


# -- firing through the inbox ------------------------------------------------------------------


@pytest.fixture
async def bus(tmp_path: Path) -> AsyncIterator[MessageBus]:
    inbox = SqliteInbox(tmp_path / "inbox.sqlite3")
    yield MessageBus(inbox=inbox)
    inbox.close()


def turns(store: ScheduleStore, bus: MessageBus, grace_min: int = 60) -> ScheduledTurns:
    settings = ScheduleSettings(misfire_grace_min=grace_min, max_per_chat=3)
    return ScheduledTurns(store, bus, Templates(), settings, "Europe/Berlin")


async def next_message(bus: MessageBus) -> InboundMessage:
    return await asyncio.wait_for(bus.next_inbound(), 30)


def stored(**fields: object) -> Schedule:
    base = {
        "id": "abcd1234",
        "session": "telegram:1",
        "text": "drink water",
        "created_at": (datetime.now(UTC) - timedelta(hours=3)).isoformat(timespec="seconds"),
        "timezone": "Europe/Berlin",
    }
    return Schedule(**(base | fields))  # type: ignore[arg-type]


async def test_a_schedule_fires_through_the_inbox_in_its_chat(
    store: ScheduleStore, bus: MessageBus
) -> None:
    runner = turns(store, bus, grace_min=0)  # no grace for missed runs; on time still fires
    await runner.start(Reach({"telegram"}))
    try:
        chat = ToolContext(audience=audience_of("telegram:42", False))
        soon = (datetime.now(UTC) + timedelta(seconds=1)).isoformat()
        answer = await runner.schedule(chat, "remind them to drink water", at=soon)
        assert answer.startswith("Scheduled ")
        msg = await next_message(bus)
        assert (msg.channel, msg.chat_id, msg.seq) == ("telegram", "42", msg.seq)
        assert msg.seq is not None and msg.id == f"in-{msg.seq}"
        assert msg.content.startswith("[scheduled trigger · schedule ")
        assert "Nobody typed this" in msg.content
        assert msg.content.endswith("remind them to drink water")
        assert bus.inbox is not None
        (pending,) = bus.inbox.pending(INBOX_CHANNEL)  # durable until its reply is delivered
        assert pending.seq == msg.seq
        await until(lambda: store.load() == [])  # the one-shot is removed once fired
    finally:
        await runner.stop()


def fired_payload(**extra: str) -> dict[str, str]:
    """What a firing stores in the inbox (schedule abcd1234, every 30 min in telegram:7)."""
    return {
        "id": "abcd1234",
        "session": "telegram:7",
        "text": "stretch",
        "rule": "every 30 min",
        "created_at": "2026-11-23T10:00:00+00:00",
        "occurrence": "2026-11-23T10:30:00+00:00",
        **extra,
    }


async def test_a_firing_left_in_the_inbox_is_replayed_at_start(
    store: ScheduleStore, bus: MessageBus
) -> None:
    (seq,) = await bus.receive(INBOX_CHANNEL, [("7", fired_payload(), Sender())], None)
    runner = turns(store, bus)
    await runner.start(Reach({"telegram"}))
    try:
        msg = await next_message(bus)
        assert (msg.chat_id, msg.seq, msg.replayed) == ("7", seq, True)
        assert msg.content.endswith("stretch")
    finally:
        await runner.stop()


async def test_missed_within_the_grace_fires_once_at_start(
    store: ScheduleStore, bus: MessageBus
) -> None:
    # Every 60 min since 3 h 10 min ago: three occurrences missed, the last 10 minutes ago.
    created = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=3, minutes=10)
    store.add(stored(every_minutes=60, created_at=created.isoformat()))
    runner = turns(store, bus)
    await runner.start(Reach({"telegram"}))
    try:
        msg = await next_message(bus)
        assert msg.content.endswith("drink water")
        await asyncio.sleep(0.3)  # a window for the firings that must not come
        assert bus.inbound_depth == 0  # once, not three times
        position = await bus.position(position_name("abcd1234"))
        assert position == (created + timedelta(hours=3)).isoformat()
        (schedule,) = store.load()
        assert runner.next_run(schedule) == created + timedelta(hours=4)
    finally:
        await runner.stop()


async def test_missed_by_more_than_the_grace_is_skipped_with_a_log_line(
    store: ScheduleStore, bus: MessageBus
) -> None:
    with log_lines("WARNING") as lines:
        created = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=3)
        late = (datetime.now(UTC) - timedelta(hours=2)).isoformat(timespec="seconds")
        store.add(stored(id="0ce0ce00", at=late))
        store.add(stored(every_minutes=120, created_at=created.isoformat()))
        runner = turns(store, bus, grace_min=30)
        await runner.start(Reach({"telegram"}))
        try:
            await asyncio.sleep(0.5)  # a window for a late firing, which must not come
            assert bus.inbound_depth == 0
            assert [s.id for s in store.load()] == ["abcd1234"]  # the one-shot is gone for good
            (recurring,) = store.load()
            assert runner.next_run(recurring) == created + timedelta(hours=4)  # the next stands
            assert sum(
                "more than schedule.misfire_grace_min (30 min) ago; skipped" in x for x in lines
            )
            assert any("0ce0ce00" in line and "skipped" in line for line in lines)
        finally:
            await runner.stop()


async def test_a_one_shot_that_fired_before_a_restart_does_not_fire_again(
    store: ScheduleStore, bus: MessageBus
) -> None:
    at = datetime.now(UTC) - timedelta(minutes=5)
    store.add(stored(at=at.isoformat()))
    await bus.receive(INBOX_CHANNEL, [], (position_name("abcd1234"), at.isoformat()))
    runner = turns(store, bus)
    await runner.start(Reach({"telegram"}))
    try:
        await asyncio.sleep(0.5)  # a window for a second firing, which must not come
        assert bus.inbound_depth == 0 and store.load() == []
    finally:
        await runner.stop()


async def test_a_schedule_fires_only_while_its_maker_is_admitted(
    store: ScheduleStore, bus: MessageBus
) -> None:
    with log_lines("WARNING") as lines:
        allowed = {"77"}
        asked: list[tuple[str, str]] = []

        def admits(session: str, made_by: str) -> bool:
            asked.append((session, made_by))
            return made_by in allowed

        runner = turns(store, bus, grace_min=0)
        await runner.start(Reach({"telegram"}, admits))
        try:
            chat = ToolContext(Sender("77"), audience_of("telegram:-500", True))
            soon = datetime.now(UTC) + timedelta(seconds=1)
            await runner.schedule(chat, "stand-up", every_minutes=1)
            await runner.schedule(chat, "water", at=soon.isoformat())
            (repeating, once) = store.load()
            assert repeating.made_by == once.made_by == "77"
            msg = await next_message(bus)  # while allowed, it fires
            assert msg.content.endswith("water")
            allowed.clear()  # removed from the allow-list
            await runner.stop()
            soon = datetime.now(UTC) + timedelta(seconds=1)
            made = stored(id="feedf00d", session="telegram:-500", made_by="77", at=soon.isoformat())
            store.add(made)
            await runner.start(Reach({"telegram"}, admits))
            await until(lambda: any("feedf00d" in line for line in lines))
            assert bus.inbound_depth == 0
            assert ("telegram:-500", "77") in asked
            refused = "(telegram:-500) skipped: whoever made it (77) is no longer allowed there"
            assert f"schedule feedf00d {refused}" in lines
            # The firing from before, still waiting for its reply, is not answered either.
            assert f"schedule {once.id} {refused}" in lines
            assert bus.inbox is not None and bus.inbox.pending(INBOX_CHANNEL) == []
            # The one-shot is spent (removed just after that line); the repeating one is kept
            # for when they are allowed back.
            await until(lambda: [s.id for s in store.load()] == [repeating.id])
        finally:
            await runner.stop()


async def test_a_schedule_made_in_a_scheduled_turn_is_made_by_whoever_made_that_one(
    store: ScheduleStore, bus: MessageBus
) -> None:
    """A scheduled task that schedules a follow-up: the follow-up has the same maker, so in a
    group admitting its members one by one it still fires (an unknown maker would not)."""
    runner = turns(store, bus)
    await runner.start(Reach({"telegram"}, lambda session, made_by: made_by == "77"))
    try:
        soon = datetime.now(UTC) + timedelta(seconds=1)
        store.add(stored(session="telegram:-500", made_by="77", at=soon.isoformat()))
        await runner.stop()
        await runner.start(Reach({"telegram"}, lambda session, made_by: made_by == "77"))
        fired = await next_message(bus)
        assert fired.sender.id == "77"
        chat = ToolContext(fired.sender, audience_of("telegram:-500", True))
        await runner.schedule(chat, "check again", every_minutes=30)
        assert [s.made_by for s in store.load()] == ["77"]
    finally:
        await runner.stop()


async def test_a_firing_left_in_the_inbox_for_a_refused_maker_is_dropped_at_start(
    store: ScheduleStore, bus: MessageBus
) -> None:
    await bus.receive(INBOX_CHANNEL, [("7", fired_payload(made_by="7"), Sender("7"))], None)
    runner = turns(store, bus)
    await runner.start(Reach({"telegram"}, lambda session, made_by: made_by != "7"))
    try:
        assert bus.inbound_depth == 0
        assert bus.inbox is not None and bus.inbox.pending(INBOX_CHANNEL) == []
    finally:
        await runner.stop()


async def test_a_schedule_of_a_channel_that_is_not_running_waits(
    store: ScheduleStore, bus: MessageBus
) -> None:
    store.add(stored(every_minutes=5))
    runner = turns(store, bus)
    await runner.start(Reach({"api"}))  # Telegram disabled this time
    try:
        (schedule,) = store.load()  # kept for a start with Telegram again
        assert runner.next_run(schedule) is None
    finally:
        await runner.stop()


async def test_tools_need_the_gateway_and_a_channel_that_can_receive(
    store: ScheduleStore, bus: MessageBus
) -> None:
    runner = turns(store, bus)
    chat = ToolContext(audience=audience_of("cli:direct", False))
    with pytest.raises(ToolError, match="need the gateway"):
        await runner.schedule(chat, "x", every_minutes=5)
    with pytest.raises(ToolError, match="need the gateway"):
        await runner.list_schedules(chat)
    assert NEEDS_GATEWAY.endswith("Nothing was scheduled.")
    await runner.start(Reach({"telegram"}))
    try:
        chat = ToolContext(audience=audience_of("api:laptop", False))
        with pytest.raises(ToolError, match="cannot receive messages"):
            await runner.schedule(chat, "x", every_minutes=5)
        assert store.load() == []
    finally:
        await runner.stop()


async def test_a_chat_lists_and_cancels_only_its_own(store: ScheduleStore, bus: MessageBus) -> None:
    runner = turns(store, bus)
    await runner.start(Reach({"telegram"}))
    try:
        chat = ToolContext(audience=audience_of("telegram:1", False))
        made = await runner.schedule(chat, "water the plants", cron="0 9 * * *")
        schedule_id = made.split()[1].rstrip(":")
        chat = ToolContext(audience=audience_of("telegram:2", False))
        assert await runner.list_schedules(chat) == "No schedules in this chat."
        refused = await runner.cancel_schedule(chat, schedule_id)
        assert refused.startswith(f"No schedule '{schedule_id}' in this chat")
        chat = ToolContext(audience=audience_of("telegram:1", False))
        listed = await runner.list_schedules(chat)
        assert listed.startswith(f"{schedule_id} · cron `0 9 * * *` (Europe/Berlin) · next ")
        assert listed.endswith("water the plants")
        assert (await runner.cancel_schedule(chat, schedule_id)).startswith("Cancelled")
        assert store.load() == [] and runner.next_run(made_schedule(schedule_id)) is None
        for n in range(3):
            await runner.schedule(chat, f"task {n}", every_minutes=10 + n)
        with pytest.raises(ToolError, match="max_per_chat"):
            await runner.schedule(chat, "one too many", every_minutes=5)
    finally:
        await runner.stop()


def made_schedule(schedule_id: str) -> Schedule:
    return stored(id=schedule_id, every_minutes=5)


async def test_a_repeating_schedule_whose_firing_failed_is_tried_again(
    store: ScheduleStore, bus: MessageBus
) -> None:
    created = datetime.now(UTC).replace(microsecond=0) - timedelta(seconds=55)
    store.add(stored(every_minutes=1, created_at=created.isoformat()))
    runner = turns(store, bus)
    await runner.start(Reach({"telegram"}))
    try:
        (schedule,) = store.load()
        first = runner.next_run(schedule)
        assert first == created + timedelta(minutes=1)
        assert bus.inbox is not None
        failed: list[str] = []
        sink = logger.add(
            lambda m: failed.append(str(m)), filter=lambda r: "could not fire" in r["message"]
        )
        bus.inbox.close()  # every inbox read and write fails from now on
        try:
            await until(lambda: bool(failed))
            await until(lambda: not runner._firing)  # the failed firing is over
        finally:
            logger.remove(sink)
        later = runner.next_run(schedule)
        assert later is not None and later > first  # tried again, not dropped until a restart
    finally:
        await runner.stop()


async def test_an_occurrence_already_in_the_inbox_is_not_fired_again(
    store: ScheduleStore, bus: MessageBus
) -> None:
    created = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=10)
    store.add(stored(every_minutes=60, created_at=created.isoformat()))
    occurrence = created + timedelta(minutes=60)
    await bus.receive(INBOX_CHANNEL, [], (position_name("abcd1234"), occurrence.isoformat()))
    runner = turns(store, bus)
    await runner.start(Reach({"telegram"}))
    try:
        await runner._fire("abcd1234", occurrence.isoformat(), False)  # a retry of a firing
        assert bus.inbound_depth == 0
        (schedule,) = store.load()
        assert runner.next_run(schedule) == occurrence + timedelta(minutes=60)
    finally:
        await runner.stop()


class Counted(Schedule):
    """Counts the occurrences asked for (a frozen dataclass: the count lives in a list)."""

    asked: list[datetime]

    def next_after(self, moment: datetime) -> datetime | None:
        self.asked.append(moment)
        return super().next_after(moment)


@pytest.mark.parametrize(("rule", "step"), [({"cron": "* * * * *"}, 1), ({"every_minutes": 7}, 7)])
def test_the_latest_missed_occurrence_of_a_long_grace_is_found_in_a_few_steps(
    rule: dict[str, object], step: int
) -> None:
    created = NOW - timedelta(days=40)
    schedule = Counted(**stored(created_at=created.isoformat(), **rule).to_dict())
    object.__setattr__(schedule, "asked", [])
    until = NOW + timedelta(seconds=30)
    found = _latest_until(schedule, NOW - timedelta(days=30), until)
    assert found is not None and found <= until and until - found < timedelta(minutes=step)
    assert len(schedule.asked) < 100  # not one step per occurrence of the 30 days
    assert _latest_until(schedule, until - timedelta(seconds=1), until) is None

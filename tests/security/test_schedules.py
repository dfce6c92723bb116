"""Schedules that cannot be armed and a hand-edited schedules.json, through the real gateway
in-process (the durable inbox, APScheduler, GET /health over HTTP, python-telegram-bot against
the loopback Bot API, the model over HTTP from the loopback OpenAI fake calling the real
`schedule` tool): a year-9999 time, a bad zone, too many entries or a file too big never stop
the good schedules; each bad entry is logged once and shown in /health; the model is refused
what could not be armed. Then the same mistake elsewhere: dream.json and search_history."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from nanomem.features.dream import Dreaming
from nanomem.home import Home
from tests.conftest import cli_env, log_lines, run_cli_here
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.telegram_gateway import LiveGateway, call, obedient, telegram_gateway
from tests.fakes.telegram_server import FakeTelegram
from tests.helpers import until, wait_until
from tests.helpers.gateway import GatewayProcess
from tests.helpers.loopback import Model

CHATS = [1000, 1001, 1002, 1003]
YEAR_9999 = "9999-12-31T23:59:00-05:00"  # past datetime.max once in UTC


@pytest.fixture
def model() -> Model:
    return obedient


@asynccontextmanager
async def gateway(
    home: Home, servers: tuple[FakeTelegram, FakeOpenAI], **sections: dict[str, Any]
) -> AsyncIterator[LiveGateway]:
    telegram = {"allow_from": CHATS} | sections.pop("telegram", {})
    async with telegram_gateway(home, *servers, telegram=telegram, **sections) as live:
        yield live


def entry(schedule_id: str, chat: int = 1000, **rule: object) -> dict[str, Any]:
    """A schedules.json entry as a person would write it by hand (one every hour is next due
    50 minutes on: armed, not firing, while a test looks)."""
    created = datetime.now(UTC) - timedelta(minutes=10)
    return {
        "id": schedule_id,
        "session": f"telegram:{chat}",
        "text": f"say {schedule_id}",
        "created_at": created.isoformat(timespec="seconds"),
        "timezone": "Europe/Berlin",
        **rule,
    }


def soon() -> str:
    return (datetime.now(UTC) + timedelta(seconds=1)).isoformat()


def write(home: Home, entries: list[dict[str, Any]]) -> str:
    body = json.dumps({"v": 1, "schedules": entries}, indent=1)
    home.schedules.write_text(body)
    return body


def ids(home: Home) -> list[str]:
    return [s["id"] for s in json.loads(home.schedules.read_text())["schedules"]]


def failed(body: dict[str, Any]) -> dict[str, str]:
    return {f["id"]: f["reason"] for f in body["schedules"]["failed"]}


async def test_bad_hand_written_schedules_are_skipped_once_and_the_good_ones_fire(
    home: Home, servers: tuple[FakeTelegram, FakeOpenAI]
) -> None:
    bad_9999 = entry("far9999", at=YEAR_9999)
    bad_zone = entry("badzone", timezone="Mars/Olympus", cron="* * * * *")
    write(
        home,
        [
            bad_9999,
            bad_zone,
            entry("good0001", 1001, at=soon()),
            entry("good0002", 1002, at=soon()),
            entry("good0003", 1003, every_minutes=60),
        ],
    )
    with log_lines("INFO") as lines:
        async with gateway(home, servers) as live:
            # Each one-shot's turn answers in its own chat, and the spent ones leave the file.
            await until(lambda: all(live.telegram.sent_messages(c) for c in (1001, 1002)))
            await until(lambda: ids(home) == ["far9999", "badzone", "good0003"])
            status, body = await live.health()
    assert status == 200 and body["status"] == "warning"
    reasons = failed(body)
    assert set(reasons) == {"far9999", "badzone"}
    assert "more than 10 years ahead" in reasons["far9999"]
    assert "'Mars/Olympus' is not a known time zone" in reasons["badzone"]
    assert body["schedules"]["armed"] == 1  # good0003 waits for its next hour
    for bad in ("far9999", "badzone"):  # once each, however many firings read the file
        assert len([line for line in lines if bad in line]) == 1, lines
    kept = json.loads(home.schedules.read_text())["schedules"]
    assert kept[:2] == [bad_9999, bad_zone]  # left in as written


async def test_the_model_is_refused_a_schedule_that_cannot_be_armed(
    home: Home, servers: tuple[FakeTelegram, FakeOpenAI]
) -> None:
    refused = [
        ({"at": YEAR_9999}, "more than 10 years ahead"),
        ({"at": "2020-01-01T09:00"}, "has passed"),
        ({"cron": "0 9 * * *", "timezone": "Mars/Olympus"}, "not a known time zone"),
        ({"cron": "0 0 29 2 1"}, "more than 10 years ahead"),  # 29 February on a Monday: 2044
        ({"cron": "0 9 31 2 *"}, "never happens"),
        ({"every_minutes": 10**12}, "every_minutes must be from 1"),
    ]
    async with gateway(home, servers) as live:
        for rule, says in refused:
            reply = await live.say(1000, call("schedule", text="call mum", **rule))
            assert reply.startswith("tool said: Error: "), reply
            assert says in reply and "nothing was scheduled" in reply, (rule, reply)
            assert "Traceback" not in reply
            assert not home.schedules.exists(), rule  # nothing stored
        status, body = await live.health()
    assert status == 200 and body["status"] == "ok" and body["schedules"]["failed"] == []


async def test_entries_beyond_the_bounds_are_not_armed_and_are_named(
    home: Home, servers: tuple[FakeTelegram, FakeOpenAI]
) -> None:
    write(
        home,
        [
            entry("a0000001", every_minutes=60),
            entry("a0000002", every_minutes=60),
            entry("a0000003", every_minutes=60),  # a third in one chat
            entry("b0000001", 1001, every_minutes=60),
            entry("b0000002", 1001, every_minutes=60, text="x" * 5000),
            entry("c0000001", 1002, every_minutes=60),  # a fourth armed one
        ],
    )
    limits = {"max_per_chat": 2, "max_total": 3}
    async with gateway(home, servers, schedule=limits) as live:
        status, body = await live.health()
    assert status == 200 and body["status"] == "warning"
    reasons = failed(body)
    assert set(reasons) == {"a0000003", "b0000002", "c0000001"}
    assert "schedule.max_per_chat" in reasons["a0000003"]
    assert "text is too long" in reasons["b0000002"]
    assert "schedule.max_total" in reasons["c0000001"]
    assert body["schedules"]["armed"] == 3


async def test_a_schedules_file_too_big_is_not_read_left_alone_and_reported(
    home: Home, servers: tuple[FakeTelegram, FakeOpenAI]
) -> None:
    written = write(home, [entry(f"{n:08x}", every_minutes=60) for n in range(8000)])
    assert len(written) > 1024 * 1024
    async with gateway(home, servers) as live:
        reply = await live.say(1000, call("schedule", text="call mum", every_minutes=5))
        status, body = await live.health()
    assert "schedules.json is over 1 MiB" in reply and "nothing was scheduled" in reply
    assert status == 200 and body["status"] == "warning"
    assert "1 MiB" in body["schedules"]["file"] and body["schedules"]["armed"] == 0
    assert home.schedules.read_text() == written  # not rewritten, not moved


async def test_a_schedules_file_that_is_not_json_is_left_in_place_and_reported(
    home: Home, servers: tuple[FakeTelegram, FakeOpenAI]
) -> None:
    home.schedules.write_text('{"v": 1, "schedules": [')
    async with gateway(home, servers) as live:
        assert "is not valid JSON" in await live.say(1000, "/unschedule abcd1234")
        status, body = await live.health()
    assert status == 200 and body["status"] == "warning"
    assert "not valid JSON" in body["schedules"]["file"]
    assert home.schedules.read_text() == '{"v": 1, "schedules": ['


def test_status_names_the_schedules_that_cannot_be_armed(home: Home) -> None:
    write(
        home,
        [
            entry("far9999", at=YEAR_9999),
            entry("badzone", timezone="Mars/Olympus", cron="* * * * *"),
            entry("good0003", every_minutes=60),
        ],
    )
    result = run_cli_here("status", env=cli_env(home))
    assert result.returncode == 0, result.stderr
    (row,) = [line for line in result.stdout.splitlines() if line.startswith("schedules")]
    assert "3 in schedules.json, 2 cannot be armed" in row
    assert "far9999 (" in row and "badzone (" in row


# -- the same mistake elsewhere: times read from a file or a model, out of range -------------


@pytest.mark.parametrize(
    "last_run",
    ["9999-12-31T23:00:00+00:00", "2026-11-22T09:30", "2999-01-01T00:00:00+00:00", 5],
)
async def test_a_hand_edited_dream_json_neither_stops_the_gateway_nor_dream(
    home: Home, servers: tuple[FakeTelegram, FakeOpenAI], last_run: object
) -> None:
    """dream.json's last run in the year 9999 raised OverflowError when the gateway started
    Dream's scheduler, one without an offset TypeError; one far ahead put Dream off till then."""
    home.dream_state.write_text(json.dumps({"last_run": last_run}))
    with log_lines("WARNING") as lines:
        async with gateway(home, servers, dream={"enabled": True, "interval_h": 2}) as live:
            upcoming = live.app.feature(Dreaming).scheduler.next_run
            status, _ = await live.health()
    assert status == 200
    assert upcoming is not None and upcoming <= datetime.now(UTC) + timedelta(hours=2)
    if last_run != "2999-01-01T00:00:00+00:00":
        assert any("dream.json's last_run" in line for line in lines)


async def test_search_history_dates_out_of_range_get_a_clear_error(
    home: Home, servers: tuple[FakeTelegram, FakeOpenAI]
) -> None:
    async with gateway(home, servers) as live:
        for since in ("9999-12-31T23:59:00-05:00", "0001-01-01T00:00:00+05:00"):
            reply = await live.say(1000, call("search_history", query="mum", since=since))
            assert f"{since!r} is out of range" in reply, reply
            assert "OverflowError" not in reply


# -- integration with the log's repeat counting -----------------------------------------------


@pytest.mark.slow
def test_each_bad_entry_gets_its_own_line_in_the_real_log(home: Home) -> None:
    """Hand-written entries often differ only in numbers (water1, water2; or no id: #1, #2)
    and fail for the same reason: to the log's flood guard that is one line repeated. Each must
    still be written once, naming its entry."""
    no_id = {k: v for k, v in entry("x", at=YEAR_9999).items() if k != "id"}
    bad = [entry(f"water{n}", at=YEAR_9999) for n in (1, 2, 3)]
    write(home, [*bad, no_id, no_id, entry("good0003", every_minutes=60)])
    with FakeTelegram() as telegram, FakeOpenAI() as llm:
        process = GatewayProcess(home, telegram, llm)
        try:
            wait_until(lambda: len(process.health()[1]["schedules"]["failed"]) == 5, what="5")
        finally:
            assert process.stop() == 0, "".join(process.lines)
    lines = [line for line in process.lines if "is not armed" in line]
    assert [line.split("schedule ")[1].split(" ")[0] for line in lines] == [
        "water1",
        "water2",
        "water3",
        "#4",
        "#5",
    ], "".join(process.lines)

"""Schedules that cannot be armed and a hand-edited schedules.json, through the real gateway
in-process (the durable inbox, APScheduler, GET /health over HTTP; a fake pushing channel and
the scripted model) and the real `schedule` tool called by the model in a chat: a year-9999
time, a bad zone, too many entries or a file too big never stop the good schedules, each bad
entry is logged once and shown in /health, and the model is refused what could not be armed."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from nanomem.home import Home
from nanomem.providers.scripted import ScriptedProvider, call, text
from tests.channels.test_telegram_channel import until
from tests.conftest import cli_env, log_lines, run_cli_here
from tests.test_gateway import FakeChannel, Served, serve

__all__ = ["serve"]  # the fixture, shared with tests/test_gateway.py

pytestmark = pytest.mark.slow  # each test runs a gateway

YEAR_9999 = "9999-12-31T23:59:00-05:00"  # past datetime.max once in UTC


def entry(schedule_id: str, session: str = "telegram:1", **rule: object) -> dict[str, Any]:
    """A schedules.json entry as a person would write it by hand."""
    created = datetime.now(UTC) - timedelta(hours=1)
    return {
        "id": schedule_id,
        "session": session,
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


def said(channel: FakeChannel) -> str:
    return "\n".join(m.content for m in channel.sent)


async def test_bad_hand_written_schedules_are_skipped_once_and_the_good_ones_fire(
    home: Home, serve: Callable[..., Awaitable[Served]]
) -> None:
    write(
        home,
        [
            entry("far9999", at=YEAR_9999),
            entry("badzone", timezone="Mars/Olympus", cron="* * * * *"),
            entry("good0001", at=soon()),
            entry("good0002", at=soon()),
            entry("good0003", every_minutes=60),
        ],
    )
    channel = FakeChannel("telegram")
    with log_lines("INFO") as lines:
        served = await serve(channel, durable=True)
        await until(lambda: "say good0001" in said(channel) and "say good0002" in said(channel))
        status, body = await served.health()
        served.gateway.request_stop()
        assert await served.task == 0
    assert status == 200 and body["status"] == "warning"
    failed = {f["id"]: f["reason"] for f in body["schedules"]["failed"]}
    assert set(failed) == {"far9999", "badzone"}
    assert "more than 10 years ahead" in failed["far9999"]
    assert "Mars/Olympus" in failed["badzone"] and "time zone" in failed["badzone"]
    assert body["schedules"]["armed"] >= 1  # good0003 waits for its next hour
    for bad in ("far9999", "badzone"):  # once each, however many firings read the file
        assert len([line for line in lines if bad in line]) == 1, lines
    kept = json.loads(home.schedules.read_text())["schedules"]
    assert [s["id"] for s in kept] == ["far9999", "badzone", "good0003"]  # bad ones left in


async def test_the_model_is_refused_a_schedule_that_cannot_be_armed(
    home: Home, serve: Callable[..., Awaitable[Served]]
) -> None:
    refused = [
        ({"at": YEAR_9999}, "more than 10 years ahead"),
        ({"at": "2020-01-01T09:00"}, "has passed"),
        ({"cron": "0 9 * * *", "timezone": "Mars/Olympus"}, "not a known time zone"),
        ({"cron": "0 0 29 2 mon"}, "more than 10 years ahead"),  # 29 February on a Monday: 2044
        ({"cron": "0 9 31 2 *"}, "never happens"),
        ({"every_minutes": 10**12}, "every_minutes must be from 1"),
    ]
    provider = ScriptedProvider()
    channel = FakeChannel("telegram")
    served = await serve(channel, provider=provider, durable=True)
    await until(lambda: channel.bus)
    for rule, says in refused:
        provider.add(call("schedule", {"text": "call mum", **rule}), text("ok"))
        before = len(channel.sent)
        await channel.say("remind me")
        await until(lambda before=before: len(channel.sent) > before)  # type: ignore[misc]
        result = provider.calls[-1][-1]
        assert result["role"] == "tool", result
        assert says in result["content"] and "nothing was scheduled" in result["content"], rule
        assert "Traceback" not in result["content"]
        assert not home.schedules.exists(), rule  # nothing stored
    status, body = await served.health()
    assert status == 200 and body["status"] == "ok" and body["schedules"]["failed"] == []
    served.gateway.request_stop()
    assert await served.task == 0


async def test_entries_beyond_the_bounds_are_not_armed_and_are_named(
    home: Home, serve: Callable[..., Awaitable[Served]]
) -> None:
    write(
        home,
        [
            entry("a0000001", every_minutes=60),
            entry("a0000002", every_minutes=60),
            entry("a0000003", every_minutes=60),  # a third in telegram:1
            entry("b0000001", "telegram:2", every_minutes=60),
            entry("b0000002", "telegram:2", every_minutes=60, text="x" * 5000),
            entry("c0000001", "telegram:3", every_minutes=60),  # the fourth armed one
        ],
    )
    channel = FakeChannel("telegram")
    served = await serve(channel, durable=True, schedule={"max_per_chat": 2, "max_total": 3})
    await until(lambda: channel.bus)
    status, body = await served.health()
    served.gateway.request_stop()
    assert await served.task == 0
    assert status == 200 and body["status"] == "warning"
    failed = {f["id"]: f["reason"] for f in body["schedules"]["failed"]}
    assert set(failed) == {"a0000003", "b0000002", "c0000001"}
    assert "schedule.max_per_chat" in failed["a0000003"]
    assert "text is too long" in failed["b0000002"]
    assert "schedule.max_total" in failed["c0000001"]
    assert body["schedules"]["armed"] == 3


async def test_a_schedules_file_too_big_is_not_read_left_alone_and_reported(
    home: Home, serve: Callable[..., Awaitable[Served]]
) -> None:
    body_text = write(home, [entry(f"{n:08x}", every_minutes=60) for n in range(8000)])
    assert len(body_text) > 1024 * 1024
    provider = ScriptedProvider()
    channel = FakeChannel("telegram")
    served = await serve(channel, provider=provider, durable=True)
    await until(lambda: channel.bus)
    provider.add(call("schedule", {"text": "call mum", "every_minutes": 5}), text("ok"))
    await channel.say("remind me")
    await until(lambda: channel.sent)  # the chat still works
    status, body = await served.health()
    served.gateway.request_stop()
    assert await served.task == 0
    result = provider.calls[-1][-1]["content"]
    assert "schedules.json" in result and "nothing was scheduled" in result
    assert status == 200 and body["status"] == "warning"
    assert "1 MiB" in body["schedules"]["file"] and body["schedules"]["armed"] == 0
    assert home.schedules.read_text() == body_text  # not rewritten, not moved


async def test_a_schedules_file_that_is_not_json_is_left_in_place_and_reported(
    home: Home, serve: Callable[..., Awaitable[Served]]
) -> None:
    home.schedules.write_text('{"v": 1, "schedules": [')
    channel = FakeChannel("telegram")
    served = await serve(channel, durable=True)
    await until(lambda: channel.bus)
    status, body = await served.health()
    served.gateway.request_stop()
    assert await served.task == 0
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
    home: Home, serve: Callable[..., Awaitable[Served]], last_run: object
) -> None:
    """dream.json's last run in the year 9999 raised OverflowError when the gateway started
    Dream's scheduler, one without an offset TypeError; one far ahead put Dream off till then."""
    home.dream_state.write_text(json.dumps({"last_run": last_run}))
    channel = FakeChannel("telegram")
    with log_lines("WARNING") as lines:
        served = await serve(channel, dream={"enabled": True, "interval_h": 2})
        await until(lambda: channel.bus or served.task.done())
        assert not served.task.done(), served.task
        upcoming = served.gateway.app.scheduler.next_run
        status, _ = await served.health()
        served.gateway.request_stop()
        assert await served.task == 0
    assert status == 200
    assert upcoming is not None and upcoming <= datetime.now(UTC) + timedelta(hours=2)
    if last_run != "2999-01-01T00:00:00+00:00":
        assert any("dream.json's last_run" in line for line in lines)


async def test_search_history_dates_out_of_range_get_a_clear_error(
    home: Home, serve: Callable[..., Awaitable[Served]]
) -> None:
    provider = ScriptedProvider()
    channel = FakeChannel("telegram")
    served = await serve(channel, provider=provider)
    await until(lambda: channel.bus)
    for since in ("9999-12-31T23:59:00-05:00", "0001-01-01T00:00:00+05:00"):
        provider.add(call("search_history", {"query": "mum", "since": since}), text("ok"))
        before = len(channel.sent)
        await channel.say("what did I say about mum?")
        await until(lambda before=before: len(channel.sent) > before)  # type: ignore[misc]
        result = provider.calls[-1][-1]
        assert result["role"] == "tool"
        assert f"{since!r} is out of range" in result["content"], result["content"]
        assert "OverflowError" not in result["content"]
    served.gateway.request_stop()
    assert await served.task == 0

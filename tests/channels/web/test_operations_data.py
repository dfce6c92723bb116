"""What the Schedules & tasks page reads and does, through the same functions as /schedules,
/unschedule, /stop, `nanomem inbox` and `nanomem usage` (a real app on a real home)."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from zoneinfo import ZoneInfo

from channels.web import operations_data as data
from channels.web.channel import WebChannel
from channels.web.site import Site
from nanomem.agent import SqliteInbox
from nanomem.audience import Sender
from nanomem.features.schedules.rules import make_schedule
from nanomem.features.usage.ledger import Record, append
from nanomem.features.usage.prices import price_table
from nanomem.features.usage.report import Pricing, daily
from nanomem.home import Home
from nanomem.providers.scripted import ScriptedProvider
from tests.conftest import make_app
from tests.helpers.inbox import parked_message

WEB = {"enabled": True, "token": "nm-web-token-for-tests-0123456789"}


def site_of(home: Home, **sections: dict[str, object]) -> Site:
    return WebChannel(make_app(home, ScriptedProvider([]), web=WEB, **sections)).site


async def test_a_schedule_is_listed_with_its_next_run_and_cancelled_as_unschedule_does(
    home: Home,
) -> None:
    site = site_of(home)
    feature = data.schedules_feature(site)
    assert feature is not None
    made = make_schedule(
        "cli:direct",
        "water the <b>plants</b>",
        at=None,
        every_minutes=None,
        cron="0 9 * * *",
        zone=ZoneInfo("UTC"),
        now=datetime.now(UTC),
    )
    feature.store.add(made)
    (row,), problem = await data.schedules(site)
    assert (row.id, row.session, row.text, problem) == (made.id, "cli:direct", made.text, "")
    assert row.next_run.endswith(" 09:00 UTC") and row.rule == made.describe()
    found, said = await data.cancel_schedule(site, made.id)
    assert found and said.startswith(f"Cancelled schedule {made.id}")
    assert (await data.schedules(site))[0] == []
    owner = Sender(is_owner=True)
    listed = feature.listing("cli:direct", feature.store.load(), owner)
    assert listed == "No schedules in this chat."


async def test_cancelling_a_schedule_that_is_not_there_changes_nothing(home: Home) -> None:
    site = site_of(home)
    feature = data.schedules_feature(site)
    assert feature is not None
    kept = make_schedule(
        "cli:direct", "kept", at=None, every_minutes=60, cron=None,
        zone=ZoneInfo("UTC"), now=datetime.now(UTC),
    )  # fmt: skip
    feature.store.add(kept)
    assert await data.cancel_schedule(site, "nothere") == (
        False,
        "No schedule 'nothere': it may have been cancelled already.",
    )
    assert [s.id for s in feature.store.load()] == [kept.id]


async def test_parked_messages_are_listed_retried_and_dropped_as_nanomem_inbox_does(
    home: Home,
) -> None:
    site = site_of(home)
    first = parked_message(home, "please <script>remember</script> x")
    second = parked_message(home, "second")
    listed, problem = await data.parked(site)
    assert problem == "" and [seq for seq, _ in listed] == [first, second]
    assert "“please <script>remember</script> x”" in listed[0][1]
    assert await data.retry_parked(site, first) == (True, f"Message #{first} is tried again now.")
    assert (await data.drop_parked(site, second))[0]
    assert await data.parked(site) == ([], "")
    inbox = SqliteInbox(home.inbox)
    assert [p.seq for p in inbox.retrying()] == [first]  # retried: waiting for the gateway
    inbox.close()
    assert await data.retry_parked(site, first) == (False, f"No parked message #{first}.")
    assert (await data.drop_parked(site, 999))[0] is False


async def test_a_missing_inbox_is_not_made_by_asking(home: Home) -> None:
    site = site_of(home)
    assert await data.parked(site) == ([], "")
    assert (await data.retry_parked(site, 1))[0] is False
    assert not home.inbox.exists()


async def test_token_use_per_day_and_per_chat_over_thirty_days(home: Home) -> None:
    now = time.time()
    records = [  # in time order, as they are appended
        Record(now - 86400 * 40, "telegram:9", "turn", "t4", "openai/fake", 9999, 9999),
        Record(now - 86400 * 3, "telegram:1", "turn", "t2", "openai/fake", 500, 100),
        Record(now, "telegram:1", "turn", "t1", "openai/fake", 1000, 200),
        Record(now, "cli:direct", "turn", "t3", "openai/fake", 100, 10),
    ]
    append(home.usage, records)
    found = daily(home.usage, 30, now, Pricing(price_table()))
    days = found.by_day()
    assert len(days) == 30 and days[-1][1].tokens == 1310 and days[-4][1].tokens == 600
    assert sum(t.tokens for _, t in days) == 1910
    assert [(chat, t.tokens) for chat, t in found.by_chat()] == [
        ("telegram:1", 1800),
        ("cli:direct", 110),
    ]
    view = await data.usage(site_of(home))
    assert view.total[:2] == ("3", "1,910")
    assert [row[0] for row in view.chats] == ["telegram:1", "cli:direct"]
    assert "Tokens per day" in view.per_day and "telegram:1" in view.per_chat


async def test_no_tasks_no_servers_and_unknown_ids_are_said(home: Home) -> None:
    site = site_of(home)
    assert await data.tasks(site) == []
    assert data.mcp_servers(site) == []
    assert await data.stop_task(site, "beef") == (False, "No background task 'beef'.")
    off = site_of(home, agent={"max_background_tasks": 0})
    assert await data.tasks(off) is None
    assert (await data.stop_task(off, "beef"))[0] is False


async def test_no_token_use_yet_is_said_not_drawn_as_empty_charts(home: Home) -> None:
    from channels.web.render import render

    fresh = render("operations_usage.html.j2", usage=await data.usage(site_of(home)), notices={})
    assert "No model calls in the last 30 days yet." in fresh and "<svg" not in fresh
    append(home.usage, [Record(time.time(), "cli:direct", "turn", "t1", "openai/fake", 10, 1)])
    used = render("operations_usage.html.j2", usage=await data.usage(site_of(home)), notices={})
    assert "No model calls" not in used and "<svg" in used and "cli:direct" in used


def test_a_health_value_that_is_empty_says_none_not_nothing() -> None:
    # "schedules: armed: 0 · failed: · file: —" read as a line cut short.
    line = data._one_line({"armed": 0, "failed": [], "file": None, "names": ["a", "b"]})
    assert line == "armed: 0 · failed: none · file: — · names: a, b"

import json
from datetime import UTC, datetime, timedelta

from nanomem.app import App
from nanomem.features.dream import Dreaming
from nanomem.home import Home
from nanomem.memory.history import NewEntry
from nanomem.providers.scripted import ScriptedProvider, text
from tests.conftest import log_lines, make_app
from tests.helpers import until


async def run_until_a_dream_is_recorded(app: App, home: Home) -> None:
    app.feature(Dreaming).scheduler.start()
    try:
        await until(home.dream_state.exists, timeout=5)
    finally:
        await app.feature(Dreaming).scheduler.stop(grace_s=5)


def test_first_run_follows_the_persisted_last_run(home: Home) -> None:
    app = make_app(home, ScriptedProvider(), dream={"interval_h": 2})
    now = datetime.now(UTC)
    never_ran = app.feature(Dreaming).scheduler.first_run()
    assert never_ran - now < timedelta(minutes=1)  # never ran: soon
    recent = (now - timedelta(minutes=30)).isoformat()
    home.dream_state.write_text(json.dumps({"last_run": recent}))
    due = app.feature(Dreaming).scheduler.first_run()
    assert timedelta(minutes=89) < due - now < timedelta(minutes=91)  # not reset by a restart
    home.dream_state.write_text(json.dumps({"last_run": (now - timedelta(hours=9)).isoformat()}))
    assert app.feature(Dreaming).scheduler.first_run() - now < timedelta(minutes=1)  # overdue: soon


async def test_the_scheduler_dreams_on_its_own_and_records_it(home: Home) -> None:
    app = make_app(home, ScriptedProvider([text("NOTHING"), text("ok")]))
    app.feature(Dreaming).scheduler.startup_delay_s = 0.2
    await app.history.append([NewEntry("cli:direct", "- a fact", "summary")])
    with log_lines() as logged:
        await run_until_a_dream_is_recorded(app, home)
    state = json.loads(home.dream_state.read_text())
    assert state["trigger"] == "schedule" and state["status"] == "unchanged"
    assert app.history.dream_cursor() == 1
    phases = [line for line in logged if line.startswith("dream (schedule): ")]
    assert phases[:2] == [
        "dream (schedule): reading 1 history entry",
        "dream (schedule): analysing",
    ]


async def test_a_backlog_of_history_starts_a_dream_early(home: Home) -> None:
    app = make_app(
        home, ScriptedProvider([text("NOTHING"), text("ok")]), dream={"trigger_entries": 3}
    )
    app.feature(Dreaming).scheduler.startup_delay_s = 3600
    app.feature(Dreaming).scheduler.backlog_check_s = 0.1
    await app.history.append([NewEntry("cli:direct", f"- fact {i}", "summary") for i in range(3)])
    await run_until_a_dream_is_recorded(app, home)
    assert json.loads(home.dream_state.read_text())["trigger"] == "backlog"


def test_disabled_dream_schedules_nothing(home: Home) -> None:
    app = make_app(home, ScriptedProvider(), dream={"enabled": False})
    app.feature(Dreaming).scheduler.start()
    assert app.feature(Dreaming).scheduler.next_run is None


async def test_the_backlog_counts_what_other_processes_archived(home: Home) -> None:
    from nanomem.memory.history import HistoryStore

    app = make_app(
        home, ScriptedProvider([text("NOTHING"), text("ok")]), dream={"trigger_entries": 3}
    )
    app.feature(Dreaming).scheduler.startup_delay_s = 3600
    app.feature(Dreaming).scheduler.backlog_check_s = 0.1
    assert app.history.last_cursor() == 0
    elsewhere = HistoryStore(app.history.path.parent, home.lock("history"))  # another process
    await elsewhere.append([NewEntry("telegram:1", f"- fact {i}", "summary") for i in range(3)])
    await run_until_a_dream_is_recorded(app, home)
    assert json.loads(home.dream_state.read_text())["trigger"] == "backlog"
    assert app.history.dream_cursor() == 3

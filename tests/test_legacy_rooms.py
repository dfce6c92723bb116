"""A home written before the channel's word was stored: its sessions, history entries,
schedules and background tasks carry no `room`. For those only, the rule of then is read once
(a chat id starting with `-` was a group), so an old group never turns personal after the
upgrade; and once its next message is saved, the session records the word for good."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

from nanomem.agent import InboundMessage
from nanomem.audience import Sender
from nanomem.features.dream import Dreaming
from nanomem.features.schedules.rules import Schedule
from nanomem.features.schedules.turns import maker
from nanomem.features.tasks.records import TaskRecord
from nanomem.home import Home
from nanomem.memory.history import HistoryEntry
from nanomem.memory.session import session_filename
from nanomem.providers.scripted import ScriptedProvider, text
from tests.conftest import make_app

USER_FACT = "the owner's door code is 4711"
GROUP, PRIVATE = "telegram:-100555", "telegram:42"


def lay_out_the_old_home(home: Home) -> None:
    """As the previous version wrote it: version 1 session headers, no `room` anywhere."""
    (home.workspace / "USER.md").write_text(f"# User\n- {USER_FACT}\n")
    home.sessions.mkdir(parents=True, exist_ok=True)
    for key in (GROUP, PRIVATE):
        lines = [
            {"_type": "session", "version": 1, "key": key, "created_at": "2026-11-01T10:00:00"},
            {"role": "user", "content": "earlier", "ts": "2026-11-01T10:00:00"},
            {"role": "assistant", "content": "noted", "ts": "2026-11-01T10:00:01"},
        ]
        path = home.sessions / session_filename(key)
        path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    history = home.workspace / "memory" / "history.jsonl"
    when = "2026-11-20T10:00:00+00:00"
    entries = [
        HistoryEntry(1, when, GROUP, "- the group's code word is ant", "summary"),
        HistoryEntry(2, when, PRIVATE, "- Ada drinks green tea", "summary"),
    ]
    history.write_text("".join(e.to_json() + "\n" for e in entries))
    assert '"room"' not in history.read_text()  # as the old version wrote them


async def test_an_old_group_session_stays_a_room_whatever_its_next_message_says(
    home: Home,
) -> None:
    lay_out_the_old_home(home)
    provider = ScriptedProvider()
    app = make_app(home, provider)
    owner = Sender("1000", is_owner=True)  # a sender that says nothing of a room
    await app.loop.handle(InboundMessage("telegram", "-100555", "in the group", owner))
    await app.loop.handle(InboundMessage("telegram", "42", "alone", owner))
    group_call, private_call = provider.calls[-2:]
    assert USER_FACT not in json.dumps(group_call)
    assert USER_FACT in json.dumps(private_call)
    # Recorded now: the rule of then is not read for this session again.
    for key, room in ((GROUP, True), (PRIVATE, False)):
        lines = (home.sessions / session_filename(key)).read_text().splitlines()
        states = [json.loads(line) for line in lines if '"_type": "state"' in line]
        assert [s["room"] for s in states if "room" in s] == [room]


async def test_dream_passes_over_an_old_groups_history_entry(home: Home) -> None:
    lay_out_the_old_home(home)
    provider = ScriptedProvider([text("NOTHING")])
    app = make_app(home, provider)
    await app.feature(Dreaming).dream.run("cron")
    analysis = json.dumps(provider.calls[0])
    assert "drinks green tea" in analysis and "code word" not in analysis


def test_an_old_schedule_task_and_firing_of_a_group_stay_in_the_room() -> None:
    now = datetime.now(UTC)
    soon = (now + timedelta(hours=1)).isoformat()
    old = {"id": "abc", "session": GROUP, "text": "w", "created_at": now.isoformat(), "at": soon}
    assert Schedule.from_dict(old, now).is_room
    assert not Schedule.from_dict({**old, "session": PRIVATE}, now).is_room
    assert maker({"session": GROUP, "made_by": "77"}).shared_room  # a firing stored before
    fields = ("id", "label", "started_by", "started_by_name", "run", "started_at")
    record = TaskRecord.from_dict({**dict.fromkeys(fields, "x"), "session": GROUP})
    assert record.is_room

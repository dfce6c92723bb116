"""The chaos suite's own parts: the fakes' acknowledgement bookkeeping and memory work, and the
checks that judge a run (they must see a loss, a duplicate, an interleaving when there is one)."""

from __future__ import annotations

import json
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nanomem.agent.templates import Templates
from nanomem.memory.history import HistoryEntry
from tests.chaos import checks
from tests.fakes.openai_server import fact_line, memory_aware
from tests.fakes.telegram_server import FakeTelegram


@pytest.fixture
def telegram() -> Iterator[FakeTelegram]:
    with FakeTelegram() as server:
        yield server


def call(telegram: FakeTelegram, method: str, **params: Any) -> Any:
    data = urllib.parse.urlencode({k: str(v) for k, v in params.items()}).encode()
    with urllib.request.urlopen(f"{telegram.base_url}{telegram.token}/{method}", data) as r:
        return json.load(r)["result"]


def test_an_update_is_acknowledged_only_by_a_later_offset(telegram: FakeTelegram) -> None:
    first = telegram.send_text(1000, "one")["update_id"]
    second = telegram.send_text(1000, "two")["update_id"]
    assert [u["update_id"] for u in call(telegram, "getUpdates", timeout=0)] == [first, second]
    assert not telegram.acknowledged(first)  # fetched is not confirmed
    again = call(telegram, "getUpdates", offset=first + 1, timeout=0)
    assert [u["update_id"] for u in again] == [second]  # re-delivered from the offset
    assert telegram.acknowledged(first) and not telegram.acknowledged(second)
    assert telegram.pending_updates() == [second]


def test_dropping_pending_updates_counts_as_acknowledging_them(telegram: FakeTelegram) -> None:
    update = telegram.send_text(1000, "one")["update_id"]
    call(telegram, "deleteWebhook", drop_pending_updates="true")
    assert telegram.acknowledged(update) and telegram.pending_updates() == []


ENTRIES = [
    HistoryEntry(7, "2026-11-23T10:00:00+00:00", "telegram:1000", "- a fact", "summary"),
    HistoryEntry(8, "2026-11-23T10:01:00+00:00", "cli:shared", "- another", "summary"),
]
FACTS = [fact_line(e.cursor, e.timestamp, e.session) for e in ENTRIES]


def request(*messages: dict[str, Any]) -> dict[str, Any]:
    return {"model": "fake", "messages": list(messages)}


def test_the_model_learns_one_fact_per_history_entry_through_dreams_own_prompts() -> None:
    templates, model = Templates(), memory_aware(latency=9)
    files = {"memory/MEMORY.md": f"# Memory\n{FACTS[0]}\n"}  # facts already there are no help
    analyse = templates.render("dream_analyse.md.j2", entries=ENTRIES, files=files)
    analysis = model(request({"role": "user", "content": analyse}))
    assert analysis.latency == 0 and analysis.text is not None
    assert [line for line in analysis.text.splitlines() if line.startswith("- ")] == FACTS
    prompt = templates.render("dream_edit.md.j2", analysis=analysis.text, files=files)
    edit = {"role": "user", "content": prompt}
    steps = [model(request(edit))]
    steps.append(model(request(edit, {"role": "tool", "content": "Appended"})))
    tools = [{"role": "tool", "content": "Appended"}] * 2
    steps.append(model(request(edit, *tools)))
    assert [s.calls[0][1]["line"] for s in steps[:2]] == FACTS  # type: ignore[index]
    assert steps[2].kind == "reply"


def test_the_model_summarises_for_the_consolidator_and_echoes_a_chat_slowly() -> None:
    model = memory_aware(latency=1.5)
    summary = Templates().render("consolidate.md.j2", first="a", last="b", today="c")
    said = {"role": "user", "content": "[runtime]\n\nhello q1000x01"}
    answer, ask = {"role": "assistant", "content": "hi"}, {"role": "user", "content": summary}
    step = model(request(said, answer, ask))
    assert step.text == "- the person wrote: hello q1000x01" and step.latency == 0
    chat = model(request(said))
    assert chat.text is not None and chat.text.endswith("q1000x01") and chat.latency == 1.5


def test_delivery_sees_lost_duplicated_and_reordered_replies(telegram: FakeTelegram) -> None:
    sent = []
    for number in (1, 2, 3, 4):
        update = telegram.send_text(1000, checks.token(1000, number))
        sent.append(checks.Sent(1000, number, update["update_id"]))
    call(telegram, "getUpdates", offset=sent[2].update_id + 1, timeout=0)  # 1-3 acknowledged
    for text in ("echo q1000x02", "echo q1000x01", "echo q1000x02"):
        call(telegram, "sendMessage", chat_id=1000, text=text)
    got = checks.delivery(telegram, sent)
    assert (got.sent, got.acknowledged, got.answered) == (4, 3, 2)
    assert (got.lost, got.lost_tokens, got.unacknowledged) == (1, ["q1000x03"], 1)
    assert (got.duplicated, got.order_violations) == (1, 1)


def test_session_order_faults_see_interleaved_turns() -> None:
    def turn(role: str, text: str) -> dict[str, Any]:
        return {"role": role, "content": text}

    whole = [turn("user", "w1t01"), turn("assistant", "echo w1t01")]
    whole += [turn("user", "w2t01"), turn("assistant", "echo w2t01")]
    assert checks._order_faults("cli:s", whole, ["w1t01", "w2t01"]) == []
    interleaved = [whole[0], whole[2], whole[1], whole[3]]
    assert len(checks._order_faults("cli:s", interleaved, ["w1t01", "w2t01"])) == 1
    backwards = [turn("user", "q1x02"), turn("assistant", "q1x02"), turn("user", "q1x01")]
    assert checks._order_faults("telegram:1", backwards, ["q1x01"]) == [
        "telegram:1: q1x01 after a later message of its sender",
        "telegram:1: q1x01 has no reply in the session",
    ]


def test_memory_lines_count_copies_beyond_those_the_run_started_with(tmp_path: Path) -> None:
    memory = tmp_path / "memory"
    memory.mkdir()
    (memory / "MEMORY.md").write_text("# Memory\n\n## Facts\n")
    before = checks.memory_lines(tmp_path)
    (memory / "MEMORY.md").write_text(f"# Memory\n\n## Facts\n{FACTS[0]}\n{FACTS[0]}\n\n# Memory\n")
    assert checks.duplicated_lines(tmp_path, before) == 2

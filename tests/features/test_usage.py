"""Token use end to end: real `nanomem chat -m` turns against the loopback model (which reports
usage, cached tokens included), then `nanomem usage` and `/usage` reading usage.jsonl back."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
import tracemalloc
from datetime import datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from nanomem.agent.bus import InboundMessage
from nanomem.audience import Sender
from nanomem.features.usage import PriceTable, Record, price_table
from nanomem.features.usage.prices import MAX_TABLE_BYTES, read_table
from nanomem.home import Home
from nanomem.providers import Reply, Usage
from nanomem.providers.scripted import ScriptedProvider, text
from tests.conftest import cli_env, make_app, run_cli, run_cli_here
from tests.fakes.openai_server import FakeOpenAI
from tests.helpers.dream import script_a_dream


def usage(prompt: int, completion: int, cached: int = 0) -> dict[str, Any]:
    details = {"prompt_tokens_details": {"cached_tokens": cached}} if cached else {}
    return {"prompt_tokens": prompt, "completion_tokens": completion, **details}


def usage_json(home: Home, fake: FakeOpenAI, *args: str) -> dict[str, Any]:
    result = run_cli_here("usage", "--json", *args, env=cli_env(home, fake))
    assert result.returncode == 0, result.stderr
    data: dict[str, Any] = json.loads(result.stdout)
    return data


def chat(home: Home, fake: FakeOpenAI, message: str, session: str = "direct", **env: str) -> str:
    env_ = cli_env(home, fake, **env)
    result = run_cli_here("chat", "--session", session, "-m", message, env=env_)
    assert result.returncode == 0, result.stderr
    return result.stdout


@pytest.mark.parametrize("transport", ["direct", "litellm"])
def test_turns_then_nanomem_usage_shows_the_exact_sums(
    home: Home, fake_llm: FakeOpenAI, transport: str
) -> None:
    fake_llm.reply("hello", usage=usage(1000, 50, cached=600))
    # A turn of two model calls: a tool call, then the answer.
    fake_llm.tool_call("read_file", {"path": "SOUL.md"}, usage=usage(1200, 20))
    fake_llm.reply("read it", usage=usage(1500, 70, cached=1024))
    chat(home, fake_llm, "hi", NANOMEM_LLM__TRANSPORT=transport)
    chat(home, fake_llm, "read your soul", NANOMEM_LLM__TRANSPORT=transport)
    # Another chat, not streamed, whose usage the fake estimates from the request's size.
    chat(home, fake_llm, "hi from elsewhere", "other", NANOMEM_LLM__STREAM="false")

    found = usage_json(home, fake_llm, "--chat", "cli:direct")
    total = found["total"]
    assert (total["calls"], total["prompt_tokens"], total["completion_tokens"]) == (3, 3700, 140)
    assert total["cached_tokens"] == 1624
    assert found["purposes"]["turn"]["calls"] == 3
    [day] = found["days"]
    assert day["chat"] == "cli:direct" and day["calls"] == 3
    everything = usage_json(home, fake_llm)
    assert everything["total"]["calls"] == 4
    [other] = [row for row in everything["days"] if row["chat"] == "cli:other"]
    assert other["calls"] == 1 and other["prompt_tokens"] > 0


def test_usage_in_the_chat_shows_the_last_turn_today_and_the_week(
    home: Home, fake_llm: FakeOpenAI
) -> None:
    fake_llm.reply("hello", usage=usage(1000, 50, cached=600))
    fake_llm.tool_call("read_file", {"path": "SOUL.md"}, usage=usage(1200, 20))
    fake_llm.reply("read it", usage=usage(1500, 70, cached=1024))
    chat(home, fake_llm, "hi")
    chat(home, fake_llm, "read your soul")
    requests = len(fake_llm.requests)
    shown = chat(home, fake_llm, "/usage")
    assert len(fake_llm.requests) == requests  # answered without the model
    assert "Last turn: 2,700 prompt (1,024 cached) · 90 completion · 2 calls" in shown
    assert "Today: 3,700 prompt (1,624 cached) · 140 completion · 3 calls" in shown
    assert "Last 7 days: 3,700 prompt (1,624 cached) · 140 completion · 3 calls" in shown
    assert "whole home today" in shown  # the owner, in a private chat
    # openai/fake is in no price table: its cost is unknown, never $0.
    assert "cost unknown" in shown and "$0" not in shown
    assert "Cost unknown for openai/fake" in shown


def test_a_priced_model_costs_what_litellms_table_says(home: Home, fake_llm: FakeOpenAI) -> None:
    fake_llm.reply("hello", usage=usage(1000, 100, cached=400))
    chat(home, fake_llm, "hi", NANOMEM_LLM__MODEL="openai/gpt-4o-mini")
    table = price_table()
    assert table.source is not None  # the file inside the installed litellm
    entry = json.loads(table.source.read_text())["gpt-4o-mini"]
    expected = (
        600 * entry["input_cost_per_token"]
        + 400 * entry["cache_read_input_token_cost"]
        + 100 * entry["output_cost_per_token"]
    )
    found = usage_json(home, fake_llm)
    assert found["total"]["cost_usd"] == pytest.approx(expected)
    assert found["models"]["openai/gpt-4o-mini"]["priced"] is True


def test_a_model_absent_from_the_price_table_has_an_unknown_cost(
    home: Home, fake_llm: FakeOpenAI
) -> None:
    fake_llm.reply("hello", usage=usage(1000, 100))
    fake_llm.reply("hello", usage=usage(10, 1))
    chat(home, fake_llm, "hi", NANOMEM_LLM__MODEL="openai/gpt-4o-mini")
    chat(home, fake_llm, "hi", NANOMEM_LLM__MODEL="openai/my-own-model-7b")
    found = usage_json(home, fake_llm)
    assert found["models"]["openai/my-own-model-7b"]["priced"] is False
    assert found["models"]["openai/my-own-model-7b"]["cost_usd"] is None
    total = found["total"]
    assert total["cost_usd"] is None  # not the known part passed off as the whole
    assert total["priced_cost_usd"] > 0 and total["unpriced_calls"] == 1
    shown = run_cli_here("usage", env=cli_env(home, fake_llm)).stdout
    assert "+ unknown (1 unpriced)" in shown
    assert "cost unknown for openai/my-own-model-7b" in shown


def test_consolidation_and_dream_are_counted_under_their_purpose(
    home: Home, fake_llm: FakeOpenAI
) -> None:
    fake_llm.reply("Ada likes green tea.", usage=usage(100, 10))
    chat(home, fake_llm, "I am Ada and I like green tea")
    # /new archives the session: one summary call.
    fake_llm.reply("- the person is Ada; she likes green tea", usage=usage(300, 30))
    chat(home, fake_llm, "/new")
    script_a_dream(fake_llm)  # an analysis, an edit, a closing word: three calls
    result = run_cli_here("dream", env=cli_env(home, fake_llm))
    assert result.returncode == 0, result.stderr
    found = usage_json(home, fake_llm)
    purposes = found["purposes"]
    assert purposes["turn"]["calls"] == 1 and purposes["turn"]["prompt_tokens"] == 100
    assert purposes["consolidation"]["calls"] == 1
    assert purposes["consolidation"]["prompt_tokens"] == 300
    assert purposes["dream"]["calls"] == 3
    chats = {row["chat"]: row["calls"] for row in found["days"]}
    assert chats == {"cli:direct": 2, "": 3}  # Dream works for no chat
    assert "(the home's own)" in run_cli_here("usage", env=cli_env(home, fake_llm)).stdout


def test_a_background_task_is_charged_to_the_chat_that_started_it(
    home: Home, fake_llm: FakeOpenAI
) -> None:
    fake_llm.tool_call("spawn", {"task": "count to three", "label": "count"}, usage=usage(100, 5))
    fake_llm.reply("Started it.", usage=usage(110, 6))
    fake_llm.reply("one two three", usage=usage(50, 4))  # the task's own turn
    chat(home, fake_llm, "count to three in the background")
    found = usage_json(home, fake_llm)
    assert found["purposes"]["turn"]["prompt_tokens"] == 210
    assert found["purposes"]["task"]["calls"] == 1
    assert found["purposes"]["task"]["prompt_tokens"] == 50
    assert [row["chat"] for row in found["days"]] == ["cli:direct"]


def test_a_torn_last_line_is_skipped_then_cut_by_the_next_append(
    home: Home, fake_llm: FakeOpenAI
) -> None:
    fake_llm.reply("one", usage=usage(100, 10))
    chat(home, fake_llm, "hi")
    whole = home.usage.read_bytes()
    torn = whole + whole[: len(whole) // 2]  # a crash mid-append
    home.usage.write_bytes(torn)
    assert usage_json(home, fake_llm)["total"]["calls"] == 1
    fake_llm.reply("two", usage=usage(200, 20))
    chat(home, fake_llm, "again")
    lines = home.usage.read_bytes().splitlines()
    assert lines[0] == whole.rstrip(b"\n") and len(lines) == 2
    total = usage_json(home, fake_llm)["total"]
    assert (total["calls"], total["prompt_tokens"]) == (2, 300)


def test_unreadable_lines_are_skipped_not_fatal(home: Home, fake_llm: FakeOpenAI) -> None:
    fake_llm.reply("one", usage=usage(100, 10))
    chat(home, fake_llm, "hi")
    good = home.usage.read_text()
    record = json.loads(good)
    hostile = [
        "not json",
        json.dumps({**record, "v": 99}),  # a later version: not ours to guess at
        json.dumps({**record, "prompt": -5}),
        json.dumps({**record, "prompt": "lots"}),
        json.dumps({**record, "ts": "yesterday"}),
        json.dumps({**record, "chat": "x" * 10_000}),  # longer than any record
        "[" * 100_000,
        "\x00" * 70_000,
    ]
    home.usage.write_text("\n".join(hostile) + "\n" + good)
    total = usage_json(home, fake_llm)["total"]
    assert (total["calls"], total["prompt_tokens"]) == (1, 100)


def test_old_records_are_left_out_and_days_are_local(home: Home, fake_llm: FakeOpenAI) -> None:
    now = time.time()
    records = [
        Record(now - 10 * 86400, "cli:direct", "turn", "a", "openai/fake", 5000, 1),
        Record(now - 2 * 86400, "cli:direct", "turn", "b", "openai/fake", 300, 3),
        Record(now, "cli:direct", "turn", "c", "openai/fake", 20, 2),
    ]
    home.usage.write_text("".join(r.to_json() + "\n" for r in records))
    week = usage_json(home, fake_llm)
    assert (week["total"]["calls"], week["total"]["prompt_tokens"]) == (2, 320)
    assert len(week["days"]) == 2
    assert usage_json(home, fake_llm, "--days", "1")["total"]["prompt_tokens"] == 20
    assert usage_json(home, fake_llm, "--days", "30")["total"]["prompt_tokens"] == 5320


@pytest.mark.slow  # a process of its own: the zone is read from TZ as it starts
@pytest.mark.parametrize("zone", ["Pacific/Kiritimati", "Pacific/Pago_Pago"])
def test_the_real_command_sums_days_of_the_local_zone(
    home: Home, fake_llm: FakeOpenAI, zone: str
) -> None:
    fake_llm.reply("hello", usage=usage(1000, 50, cached=600))
    env = cli_env(home, fake_llm, TZ=zone)
    turn = run_cli("chat", "-m", "hi", env=env)
    assert turn.returncode == 0, turn.stderr
    result = run_cli("usage", "--json", env=env)
    assert result.returncode == 0, result.stderr
    found = json.loads(result.stdout)
    today = datetime.now(ZoneInfo(zone)).date().isoformat()  # UTC+14 and UTC-11: 2 days apart
    assert found["to"] == today
    assert [(row["day"], row["calls"], row["cached_tokens"]) for row in found["days"]] == [
        (today, 1, 600)
    ]


@pytest.mark.parametrize("days", ["0", "-1", "many", "99999"])
def test_a_bad_number_of_days_is_refused(home: Home, days: str) -> None:
    result = run_cli_here("usage", "--days", days, env=cli_env(home))
    assert result.returncode == 2
    assert "--days" in result.stderr and "Traceback" not in result.stderr
    assert not home.usage.exists()


def test_a_chat_that_is_not_a_session_key_is_refused_with_a_hint(home: Home) -> None:
    result = run_cli_here("usage", "--chat", "direct", env=cli_env(home))
    assert result.returncode == 2
    assert "cli:direct?" in result.stderr and "Traceback" not in result.stderr


def test_an_unreadable_record_file_is_said_plainly(home: Home) -> None:
    home.usage.mkdir()  # not a file
    result = run_cli_here("usage", env=cli_env(home))
    assert result.returncode == 1
    assert f"cannot read {home.usage}" in result.stderr and "Traceback" not in result.stderr


def test_nanomem_usage_needs_no_model_and_no_gateway(home: Home) -> None:
    result = run_cli_here("usage", env=cli_env(home))  # no model configured, nothing running
    assert result.returncode == 0, result.stderr
    assert "no model calls recorded" in result.stdout


def test_the_price_table_is_read_without_importing_litellm() -> None:
    probe = (
        "import sys; from nanomem.features.usage import price_table; t = price_table();"
        "assert t.price('gpt-4o-mini') is not None; print('litellm' in sys.modules)"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    assert done.stdout.strip() == "False"


def test_reading_the_price_table_takes_a_few_mib_not_the_whole_table_as_objects() -> None:
    source = price_table().source
    assert source is not None
    tracemalloc.start()
    try:
        entries = read_table(source)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len(entries) > 1000
    assert peak < 4 * source.stat().st_size  # the bytes, their text, and one entry at a time


def test_prices_match_names_as_litellm_does(tmp_path: Path) -> None:
    table_file = tmp_path / "prices.json"
    table_file.write_text(
        json.dumps(
            {
                "gpt-x": {
                    "litellm_provider": "openai",
                    "input_cost_per_token": 2e-6,
                    "output_cost_per_token": 8e-6,
                },
                "claude-y": {
                    "litellm_provider": "anthropic",
                    "input_cost_per_token": 3e-6,
                    "output_cost_per_token": 1.5e-5,
                    "cache_read_input_token_cost": 3e-7,
                    "cache_creation_input_token_cost": 3.75e-6,
                },
                "embed-z": {"litellm_provider": "openai", "input_cost_per_token": 1e-7},
                "sample_spec": "not an entry",
            }
        )
    )
    table = PriceTable(read_table(table_file))
    assert table.price("gpt-x") is not None
    assert table.price("openai/GPT-X") == table.price("gpt-x")
    assert table.price("openrouter/gpt-x") is None  # another provider's gpt-x: not this price
    assert table.price("embed-z") is None  # no output price: not a chat model's
    claude = table.price("anthropic/claude-y")
    assert claude is not None
    # 1,000 prompt tokens of which 600 read from the cache and 100 written to it.
    assert claude.cost(1000, 10, cached=600, cache_write=100) == pytest.approx(
        300 * 3e-6 + 600 * 3e-7 + 100 * 3.75e-6 + 10 * 1.5e-5
    )


@pytest.mark.parametrize(
    "content",
    [
        "[" * 100_000,
        "[1, 2]",
        '{"gpt-x": ' + "[" * 100_000,  # one entry nested past Python's stack
        '{"gpt-x": {"input_cost_per_token": 1e-6} "gpt-y": {}}',
        '{"gpt-x": {}',
    ],
    ids=["brackets", "a list", "deep entry", "no comma", "unclosed"],
)
def test_a_broken_price_table_is_refused(tmp_path: Path, content: str) -> None:
    table = tmp_path / "prices.json"
    table.write_text(content)
    with pytest.raises(ValueError):
        read_table(table)


def test_a_price_table_past_its_size_bound_is_refused(tmp_path: Path) -> None:
    table = tmp_path / "prices.json"
    with table.open("wb") as fh:
        fh.truncate(MAX_TABLE_BYTES + 1)  # sparse: costs no disk
    with pytest.raises(ValueError, match="larger than"):
        read_table(table)


def _reply(prompt: int) -> Reply:
    return Reply("done", usage=Usage(prompt, 1), finish_reason="stop")


async def test_concurrent_chats_are_each_charged_their_own_calls(home: Home) -> None:
    provider = ScriptedProvider(latency=0.05)
    app = make_app(home, provider)
    try:
        provider.add(*(_reply(10) for _ in range(6)))
        senders = [("telegram", str(chat)) for chat in (11, 12, 13)] * 2
        await asyncio.gather(
            *(
                app.loop.handle(InboundMessage(ch, chat, "hi", Sender(chat, is_owner=True)))
                for ch, chat in senders
            )
        )
    finally:
        await app.aclose()
    records = [Record.parse(line) for line in home.usage.read_bytes().splitlines()]
    by_chat: dict[str, set[str]] = {}
    for record in records:
        assert record is not None and record.purpose == "turn"
        by_chat.setdefault(record.chat, set()).add(record.turn)
    assert sorted(by_chat) == ["telegram:11", "telegram:12", "telegram:13"]
    assert all(len(turns) == 2 for turns in by_chat.values())  # two turns each, told apart


async def test_a_record_that_cannot_be_written_never_fails_the_turn(home: Home) -> None:
    home.usage.mkdir(parents=True)  # not a file: every append fails
    app = make_app(home, ScriptedProvider([text("still here")]))
    try:
        msg = InboundMessage("cli", "direct", "hi", Sender("u", is_owner=True))
        reply = await app.loop.handle(msg)
    finally:
        await app.aclose()
    assert reply is not None and reply.content == "still here"

"""JSON nested 100k levels deep from a hostile model (tool-call arguments, a whole response) and
in files the agent or a person can write, through the real `nanomem` command: each is a clean
error where it arrives, never a crash of the turn or a traceback."""

from __future__ import annotations

import pytest

from nanomem.home import Home
from tests.conftest import cli_env, run_cli_here
from tests.fakes.openai_server import FakeOpenAI, echo_step
from tests.fakes.telegram_server import FakeTelegram
from tests.helpers import wait_until
from tests.helpers.gateway import GatewayProcess

DEEP = 100_000
NESTED = "[" * DEEP + "]" * DEEP


def test_tool_arguments_nested_100k_deep_are_an_observation(
    home: Home, fake_llm: FakeOpenAI
) -> None:
    fake_llm.tool_call("read_file", '{"path": ' + NESTED + "}")
    fake_llm.reply("recovered after the bad call")
    result = run_cli_here("chat", "-m", "read something", env=cli_env(home, fake_llm))
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "recovered after the bad call"
    observation = fake_llm.requests[1]["messages"][-1]["content"]
    assert observation.startswith("Error: invalid arguments for read_file")
    assert "deeper than 64" in observation
    assert "Traceback" not in result.stderr + (home.logs / "nanomem.log").read_text()


def test_a_model_response_nested_100k_deep_is_a_short_error(
    home: Home, fake_llm: FakeOpenAI
) -> None:
    fake_llm.raw('{"choices": ' + NESTED + "}")
    env = cli_env(home, fake_llm, NANOMEM_LLM__STREAM="false", NANOMEM_LLM__MAX_RETRIES="0")
    result = run_cli_here("chat", "-m", "answer me", env=env)
    log = (home.logs / "nanomem.log").read_text()
    assert result.returncode == 1 and len(result.stderr.strip().splitlines()) == 1
    assert "answer was malformed" in result.stderr and "malformed response" in log
    assert "Traceback" not in result.stderr + log


def test_a_history_line_nested_100k_deep_is_skipped(home: Home, fake_llm: FakeOpenAI) -> None:
    history = home.workspace / "memory" / "history.jsonl"
    history.parent.mkdir(parents=True, exist_ok=True)
    with history.open("a", encoding="utf-8") as fh:  # as a file tool of the agent could
        fh.write('{"cursor": 1, "content": ' + NESTED + "}\n")
    fake_llm.reply("still answering")
    result = run_cli_here("chat", "-m", "hello", env=cli_env(home, fake_llm))
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "still answering"
    assert "Traceback" not in result.stderr + (home.logs / "nanomem.log").read_text()


@pytest.mark.slow
def test_a_bot_api_answer_nested_100k_deep_does_not_stop_telegram(home: Home) -> None:
    with FakeTelegram() as telegram, FakeOpenAI() as llm:
        llm.set_fallback(echo_step)
        gateway = GatewayProcess(home, telegram, llm)
        try:
            # The next getUpdates gets the deep body; polling must go on after it.
            polls = telegram.getupdates_count
            telegram.fail_next("getUpdates", body='{"ok": true, "result": ' + NESTED + "}")
            telegram.send_text(1001, "before the deep answer")
            telegram.wait_for_messages(1001, 1, timeout=60)
            wait_until(lambda: telegram.getupdates_count >= polls + 2, 30, "polling after it")
            telegram.send_text(1001, "after the deep answer")
            replies = telegram.wait_for_messages(1001, 2, timeout=60)
            assert replies[-1]["text"].endswith("after the deep answer")
        finally:
            assert gateway.stop() == 0
    log = "".join(gateway.lines)
    assert "Traceback" not in log and "RecursionError" not in log, log

"""A message whose handling never ends (it hangs until the gateway is killed, or kills it)
must not come back at every start for ever. The real `nanomem gateway` against the loopback
Bot API and a loopback model that never answers that one message: the gateway is SIGKILLed
while its turn is in flight, started again, and so on; the attempts were counted before each
began, so the start after the last one parks it, tells the owner and the person, and asks the
model nothing more, while another chat is answered as usual."""

from __future__ import annotations

import signal
import sqlite3
from typing import Any

import pytest

from nanomem.agent.inbox import NEVER_FINISHED
from nanomem.agent.retries import GIVEN_UP
from nanomem.home import Home
from tests.conftest import cli_env, run_cli_here
from tests.fakes.openai_server import FakeOpenAI, Step, echo_step
from tests.fakes.telegram_server import FakeTelegram
from tests.helpers import wait_until
from tests.helpers.gateway import ALLOWED, GatewayProcess, user_texts
from tests.helpers.loopback import Model

OWNER = ALLOWED[0]  # the first user of telegram.allow_from
POISON = "summarise the attached report"
ATTEMPTS = 3


@pytest.fixture
def model() -> Model:
    def answer(request: dict[str, Any]) -> Step:
        if any(POISON in text for text in user_texts(request)):
            return Step.hang(3600)  # as a document whose parsing never ends
        return echo_step(request)

    return answer


def asked(llm: FakeOpenAI) -> int:
    return sum(any(POISON in t for t in user_texts(r)) for r in llm.requests)


def stored(home: Home) -> list[dict[str, Any]]:
    """The poisoned chat's messages in the inbox, read as another process would."""
    with sqlite3.connect(f"file:{home.inbox}?mode=ro", uri=True) as db:
        db.row_factory = sqlite3.Row
        rows = db.execute("SELECT * FROM messages WHERE chat = '1001' ORDER BY seq")
        return [dict(row) for row in rows]


def gateway(home: Home, telegram: FakeTelegram, llm: FakeOpenAI) -> GatewayProcess:
    return GatewayProcess(home, telegram, llm, NANOMEM_AGENT__MAX_ATTEMPTS=str(ATTEMPTS))


@pytest.mark.slow
def test_a_message_whose_turn_is_killed_every_time_is_parked_not_replayed_for_ever(
    servers: tuple[FakeTelegram, FakeOpenAI], home: Home
) -> None:
    telegram, llm = servers
    process = gateway(home, telegram, llm)
    telegram.send_text(1001, POISON)
    for attempt in range(1, ATTEMPTS + 1):
        wait_until(lambda n=attempt: asked(llm) == n, what=f"attempt {attempt} in flight")
        assert process.stop(signal.SIGKILL) == -signal.SIGKILL
        (row,) = stored(home)
        assert row["attempts"] == attempt and row["parked_at"] is None  # counted as it began
        process = gateway(home, telegram, llm)

    # The start after the last attempt: parked, the owner and the person told, nothing asked.
    try:
        (notice,) = telegram.wait_for_messages(OWNER, 1)
        assert "parked" in notice["text"] and "telegram:1001" in notice["text"]
        assert POISON in notice["text"] and f"nanomem inbox retry {row['seq']}" in notice["text"]
        assert [m["text"] for m in telegram.wait_for_messages(1001, 1)] == [GIVEN_UP]
        telegram.send_text(1002, "is the rest of you fine?")
        (reply,) = telegram.wait_for_messages(1002, 1)
        assert reply["text"].endswith("is the rest of you fine?")
        (row,) = stored(home)
        assert row["parked_at"] and row["attempts"] == ATTEMPTS
        assert row["last_error"] == NEVER_FINISHED
        assert asked(llm) == ATTEMPTS
    finally:
        assert process.stop() == 0, "".join(process.lines)

    # Parked stays parked: the next start neither replays it nor tells anyone again.
    with gateway(home, telegram, llm) as again:
        again.wait_for_line(r"1 message is parked")
    assert asked(llm) == ATTEMPTS and len(telegram.sent_messages(OWNER)) == 1
    status = run_cli_here("status", env=cli_env(home))
    (line,) = [line for line in status.stdout.splitlines() if POISON in line]
    assert f"{ATTEMPTS} attempts" in line and NEVER_FINISHED in line

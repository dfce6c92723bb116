"""A turn stuck in a worker thread must not keep the gateway alive after it was told to stop
(asyncio.to_thread cannot be cancelled, and asyncio.run and the interpreter wait for every
worker). The real `nanomem gateway` against the loopback Bot API and model: the model calls
`list_schedules`, whose worker thread waits for the home's `schedules` lock, which this test
holds as a hung `nanomem` process on the same home would (a genuine blocking path of today,
no patching). SIGTERM ends the process within `gateway.grace_s` and a bounded tail; a second
signal ends it at once."""

from __future__ import annotations

import fcntl
import os
import signal
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from nanomem.gateway.service import AFTER_GRACE_S
from nanomem.home import Home
from tests.fakes.openai_server import FakeOpenAI, Step, echo_step
from tests.fakes.telegram_server import FakeTelegram
from tests.helpers.gateway import GatewayProcess, user_texts
from tests.helpers.loopback import Model

STUCK = "what is on my schedule?"
GRACE_S = 2.0
SLACK_S = 5.0  # a loaded machine's scheduling, on top of the promised bound


@pytest.fixture
def model() -> Model:
    def answer(request: dict[str, Any]) -> Step:
        if request["messages"][-1].get("role") == "user" and STUCK in user_texts(request)[-1]:
            return Step.tool_call("list_schedules", {})
        return echo_step(request)

    return answer


@contextmanager
def schedules_locked(home: Home) -> Iterator[None]:
    """The home's `schedules` lock, held by this process (as another nanomem would)."""
    fd = os.open(home.locks / "schedules.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def stuck_turn(telegram: FakeTelegram, llm: FakeOpenAI) -> None:
    """Chat 1001's turn now waits in a worker thread for ever."""
    telegram.send_text(1001, STUCK)
    (status,) = telegram.wait_for_messages(1001, 1)  # the tool call's progress line: it runs
    assert "schedules" in status["text"].lower() and len(llm.requests) == 1
    time.sleep(0.5)  # its worker thread is waiting for the lock by now


def stopped_within(process: GatewayProcess, limit_s: float, sig: int = signal.SIGTERM) -> float:
    began = time.monotonic()
    process.proc.send_signal(sig)
    try:
        process.proc.wait(limit_s)
    except Exception:
        process.proc.kill()
        raise AssertionError(
            f"still running {limit_s:g} s after the signal:\n{''.join(process.lines)}"
        ) from None
    return time.monotonic() - began


@pytest.mark.slow
def test_a_turn_stuck_in_a_thread_cannot_outlive_the_grace_period(
    servers: tuple[FakeTelegram, FakeOpenAI], home: Home
) -> None:
    telegram, llm = servers
    process = GatewayProcess(home, telegram, llm, NANOMEM_GATEWAY__GRACE_S=str(GRACE_S))
    with schedules_locked(home):  # once the gateway has read its schedules
        stuck_turn(telegram, llm)
        took = stopped_within(process, GRACE_S + AFTER_GRACE_S + SLACK_S)
        assert process.stop(None) == 0, "".join(process.lines)
    log = "".join(process.lines)
    assert "worker thread(s) still busy" in log and "Traceback" not in log
    assert took >= GRACE_S  # the running turn got its grace period
    # The cut turn's message stays for the next start, its attempt counted (it ran to the end
    # of the grace period).
    with sqlite3.connect(f"file:{home.inbox}?mode=ro", uri=True) as db:
        rows = db.execute("SELECT chat, attempts, parked_at FROM messages").fetchall()
    assert rows == [("1001", 1, None)]


@pytest.mark.slow
def test_a_second_signal_ends_the_gateway_at_once_with_a_thread_stuck(
    servers: tuple[FakeTelegram, FakeOpenAI], home: Home
) -> None:
    telegram, llm = servers
    process = GatewayProcess(home, telegram, llm, NANOMEM_GATEWAY__GRACE_S="600")
    with schedules_locked(home):
        stuck_turn(telegram, llm)
        process.proc.send_signal(signal.SIGTERM)
        process.wait_for_line(r"stopping \(a second signal stops at once\)")
        stopped_within(process, 1.0 + SLACK_S)
        assert process.stop(None) == 130, "".join(process.lines)
    assert "Traceback" not in "".join(process.lines)


@pytest.mark.slow
def test_a_signal_after_the_gateway_stopped_still_ends_the_process_at_once(
    servers: tuple[FakeTelegram, FakeOpenAI], home: Home
) -> None:
    """The gateway has stopped and its process waits for the stuck worker: a signal then ends
    it with 130 (the handler stays to the end), not the default's kill."""
    telegram, llm = servers
    process = GatewayProcess(home, telegram, llm, NANOMEM_GATEWAY__GRACE_S="0.5")
    with schedules_locked(home):
        stuck_turn(telegram, llm)
        process.proc.send_signal(signal.SIGTERM)
        process.wait_for_line(r"gateway: stopped")  # then up to THREADS_S for the worker
        stopped_within(process, 1.0 + SLACK_S)
        assert process.stop(None) == 130, "".join(process.lines)
    log = "".join(process.lines)
    assert "a signal while the process ends" in log and "Traceback" not in log

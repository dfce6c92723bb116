"""Two `nanomem gateway` processes on one home would poll the same bot and answer every
message twice. Real gateways against the loopback Bot API: the second exits 2 naming the
first's pid and port, a message is answered once, `nanomem status` says which runs, and a
SIGKILLed gateway leaves no stale lock behind."""

from __future__ import annotations

import signal
import subprocess
import time

import pytest

from nanomem.home import Home
from tests.conftest import NANOMEM, cli_env, run_cli_here
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.telegram_server import FakeTelegram
from tests.helpers.gateway import GatewayProcess

SECOND_S = 30.0  # how long the second gateway is given to give up


def gateway_row(home: Home) -> str:
    status = run_cli_here("status", env=cli_env(home))
    assert status.returncode == 0, status.stderr
    (row,) = [line for line in status.stdout.splitlines() if line.split("  ")[0] == "gateway"]
    return row.removeprefix("gateway").strip()


@pytest.mark.slow
def test_a_second_gateway_on_the_home_exits_2_and_each_message_is_answered_once(
    servers: tuple[FakeTelegram, FakeOpenAI], home: Home
) -> None:
    telegram, llm = servers
    with GatewayProcess(home, telegram, llm) as first:
        second = subprocess.Popen(
            [*NANOMEM, "gateway"], env=first.env, stderr=subprocess.PIPE, text=True
        )
        try:
            _, err = second.communicate(timeout=SECOND_S)
        except subprocess.TimeoutExpired:  # it runs beside the first: what follows shows why
            err = "(still running)"
        try:
            telegram.send_text(1001, "only once, please")
            (reply,) = telegram.wait_for_messages(1001, 1)
            assert reply["text"].endswith("only once, please")
            time.sleep(2.0)  # a second poller would have answered by now
            assert len(telegram.sent_messages(1001)) == 1
            assert second.returncode == 2, err
            line = f"a gateway already runs on this home (pid {first.proc.pid}, port {first.port})"
            assert line in err and "Traceback" not in err
            assert gateway_row(home) == f"running (pid {first.proc.pid}, port {first.port})"
        finally:
            if second.poll() is None:
                second.send_signal(signal.SIGKILL)
                second.wait(10)
    assert gateway_row(home) == "not running"
    assert not (home.root / "gateway.json").exists()


@pytest.mark.slow
def test_a_killed_gateway_leaves_no_stale_lock(
    servers: tuple[FakeTelegram, FakeOpenAI], home: Home
) -> None:
    telegram, llm = servers
    killed = GatewayProcess(home, telegram, llm)
    assert killed.stop(signal.SIGKILL) == -signal.SIGKILL
    assert (home.root / "gateway.json").exists()  # left behind, and meaningless without the lock
    assert gateway_row(home) == "not running"
    with GatewayProcess(home, telegram, llm) as again:
        assert gateway_row(home) == f"running (pid {again.proc.pid}, port {again.port})"
        telegram.send_text(1002, "still here?")
        (reply,) = telegram.wait_for_messages(1002, 1)
        assert reply["text"].endswith("still here?")

"""A restart mid-task, through the real `nanomem gateway` (a subprocess) and the loopback Bot
API and model: the gateway is killed (SIGKILL) while a task waits for the model; the next start
tells the chat the task was interrupted, once, and the chat's transcript keeps it."""

from __future__ import annotations

import signal

import pytest

from nanomem.home import Home
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.telegram_server import FakeTelegram
from tests.helpers import wait_until
from tests.helpers.gateway import GatewayProcess, load_session, texts
from tests.helpers.loopback import Model
from tests.helpers.tasks import task_id, tasks_model

pytestmark = pytest.mark.slow
CHAT = 1000


@pytest.fixture
def model() -> Model:
    return tasks_model


def replies(telegram: FakeTelegram) -> list[str]:
    """What the bot said in the chat, without its tool-progress lines."""
    return [t for t in texts(telegram.sent_messages(CHAT)) if not t.startswith("⚙")]


def said_in(telegram: FakeTelegram, start: str) -> list[str]:
    return [t for t in replies(telegram) if t.startswith(start)]


def answer(telegram: FakeTelegram, text: str) -> str:
    before = len(replies(telegram))
    telegram.send_text(CHAT, text)
    return str(wait_until(lambda: replies(telegram)[before:][:1])[0])


def test_a_task_cut_by_a_kill_is_told_as_interrupted_once(
    home: Home, servers: tuple[FakeTelegram, FakeOpenAI]
) -> None:
    telegram, llm = servers
    first = GatewayProcess(home, telegram, llm)
    job = task_id(answer(telegram, "SPAWN research: HOLD read every paper"))
    wait_until(lambda: llm.held == 1, what="the task at the model")
    first.proc.send_signal(signal.SIGKILL)
    first.stop(sig=None)
    llm.release()  # nobody waits for that answer any more
    notice = f"task {job} (research) was interrupted by a restart; ask again to rerun it"
    with GatewayProcess(home, telegram, llm):
        wait_until(lambda: said_in(telegram, f"task {job}"), what="the interrupted notice")
        assert said_in(telegram, f"task {job}") == [notice]
        session = load_session(home, f"telegram:{CHAT}")
        assert [m["content"] for m in session.messages if m.get("task") == job] == [notice]
    with GatewayProcess(home, telegram, llm):  # told once: not again at the next start
        assert answer(telegram, "hello") == "chat answer to hello"
        assert said_in(telegram, f"task {job}") == [notice]
        assert f"{job}  interrupted" in answer(telegram, "/tasks")

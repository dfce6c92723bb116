"""Background tasks end to end: the real gateway in-process, python-telegram-bot against the
loopback Bot API, the model over HTTP from the loopback OpenAI fake. A chat hands off a job
with `spawn`, goes on talking, and is told the result (and its transcript keeps it)."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from nanomem.home import Home
from nanomem.memory.session import SessionStore, session_filename
from tests.fakes.openai_server import FakeOpenAI, Step
from tests.fakes.telegram_gateway import BOT, LiveGateway, telegram_gateway
from tests.fakes.telegram_server import FakeTelegram
from tests.helpers import until
from tests.helpers.gateway import API_KEY
from tests.helpers.loopback import Model
from tests.helpers.tasks import job_of, spawn, task_id, tasks_model

OWNER, FRIEND, MEMBER, GROUP = 1000, 1002, 1001, -100777
ALLOWED = {"allow_from": [OWNER, FRIEND, MEMBER, GROUP], "owner": OWNER}


@pytest.fixture
def model() -> Model:
    return tasks_model


@pytest.fixture
async def live(home: Home, servers: tuple[FakeTelegram, FakeOpenAI]) -> AsyncIterator[LiveGateway]:
    async with telegram_gateway(home, *servers, telegram=ALLOWED) as gateway:
        yield gateway


def sent(live: LiveGateway, chat: int) -> list[str]:
    return [str(m.get("text") or "") for m in live.telegram.sent_messages(chat)]


async def told(live: LiveGateway, chat: int, start: str) -> str:
    """The message in `chat` beginning with `start` (waited for)."""
    return str(
        await until(lambda: next((t for t in sent(live, chat) if t.startswith(start)), None))
    )


async def test_a_task_reports_in_its_own_chat_while_both_chats_go_on(
    live: LiveGateway, home: Home
) -> None:
    flights = await spawn(live, OWNER, "SPAWN flights: HOLD find flights to Oslo")
    hotels = await spawn(live, FRIEND, "SPAWN hotels: HOLD find hotels in Bergen")
    await until(lambda: live.llm.held == 2, what="both tasks at the model")
    # The chats go on while their tasks run.
    assert await live.say(OWNER, "hello again") == "chat answer to hello again"
    listed = await live.say(OWNER, "/tasks")
    assert f"{flights}  running" in listed and "flights" in listed and "hotels" not in listed
    assert "/stop <id>" in listed
    live.llm.release()
    result = await told(live, OWNER, f"task {flights} (flights) done")
    assert result.startswith(f"task {flights} (flights) done · 1 step · 12.4k tokens")
    assert "found: HOLD find flights to Oslo" in result and "Bergen" not in result
    other = await told(live, FRIEND, f"task {hotels} (hotels) done")
    assert "found: HOLD find hotels in Bergen" in other and "Oslo" not in other
    assert not any("Bergen" in text for text in sent(live, OWNER))
    # Recorded in the chat's session: the next turn's prompt has it, and only this chat's.
    await until(lambda: told_in_transcript(live, f"telegram:{OWNER}", flights))
    requests = len(live.llm.requests)
    await live.say(OWNER, "what did the research find?")
    prompt = json.dumps(live.llm.requests[requests]["messages"])
    assert "found: HOLD find flights to Oslo" in prompt and "Bergen" not in prompt
    listed = await live.say(OWNER, "/tasks")
    assert f"{flights}  done" in listed and "1 step · 12.4k tokens  flights" in listed


def told_in_transcript(live: LiveGateway, key: str, task: str) -> bool:
    """The chat's session file has the task's aside (appended, fsynced)."""
    path = live.app.home.sessions / session_filename(key)
    return path.exists() and f'"task": "{task}"' in path.read_text(encoding="utf-8")


async def test_stop_with_an_id_stops_a_task_of_this_chat_only(live: LiveGateway) -> None:
    job = await spawn(live, OWNER, "SPAWN slow: HOLD count the stars")
    await until(lambda: live.llm.held == 1)
    assert (await live.health())[1]["tasks"] == {"running": 1, "limit": 4}
    # Another chat cannot stop it (nor learn that it exists).
    assert await live.say(FRIEND, f"/stop {job}") == (
        f"Nothing called {job} runs in this chat; /stop alone stops the reply."
    )
    assert await live.say(FRIEND, "/tasks") == (
        "No background tasks in this chat. The agent starts one for a long job."
    )
    assert await live.say(OWNER, "/stop") == "Nothing is running."  # the reply, not the task
    stopping = await live.say(OWNER, f"/stop {job}")
    assert stopping == f"Stopping task {job} (slow); this chat is told when it has stopped."
    assert await told(live, OWNER, f"task {job} (slow) was stopped") == (
        f"task {job} (slow) was stopped (/stop) · 0 steps · 0 tokens"
    )
    ended = f"task {job} (slow) has ended already (stopped)."
    assert await live.say(OWNER, f"/stop {job}") == ended
    assert (await live.health())[1]["tasks"] == {"running": 0, "limit": 4}
    live.llm.release()


async def test_in_a_group_only_its_starter_or_the_owner_stops_a_task(live: LiveGateway) -> None:
    def in_group(text: str, user: int) -> Any:
        return live.say(GROUP, f"{BOT}{text}", chat_type="supergroup", user_id=user)

    job = task_id(await in_group("SPAWN group job: HOLD plan the party", FRIEND))
    await until(lambda: live.llm.held == 1)
    refused = await in_group(f"/stop {job}", MEMBER)
    assert refused == f"Only whoever started task {job} (group job), or the owner, can stop it."
    assert (await in_group(f"/stop {job}", OWNER)).startswith(f"Stopping task {job}")
    await told(live, GROUP, f"task {job} (group job) was stopped")
    live.llm.release()


async def test_a_failing_task_and_one_at_the_step_limit_are_reported(
    home: Home, servers: tuple[FakeTelegram, FakeOpenAI]
) -> None:
    limits = {"max_iterations": 3}
    async with telegram_gateway(home, *servers, telegram=ALLOWED, agent=limits) as live:
        broken = await spawn(live, OWNER, "SPAWN broken: FAIL at once")
        failed = await told(live, OWNER, f"task {broken} (broken) failed")
        assert failed == (
            f"task {broken} (broken) failed: the model call failed (bad_request) · 0 steps · "
            "0 tokens"
        )
        endless = await spawn(live, OWNER, "SPAWN endless: LOOP for ever")
        limit = await told(live, OWNER, f"task {endless} (endless) stopped at the step limit")
        assert "(agent.max_iterations = 3)" in limit and "· 3 steps ·" in limit
        assert "Traceback" not in "".join(sent(live, OWNER))


async def test_the_number_of_tasks_is_capped(
    home: Home, servers: tuple[FakeTelegram, FakeOpenAI]
) -> None:
    agent = {"max_background_tasks": 1}
    async with telegram_gateway(home, *servers, telegram=ALLOWED, agent=agent) as live:
        await spawn(live, OWNER, "SPAWN first: HOLD one")
        refused = await live.say(FRIEND, "SPAWN second: HOLD two")
        assert refused == (
            "chat: Error: 1 background tasks run already (agent.max_background_tasks = 1); "
            "wait for one to end, or do this job here"
        )
        live.llm.release()
        await told(live, OWNER, "task ")
        assert await spawn(live, FRIEND, "SPAWN third: three")  # room again


async def ask_api(live: LiveGateway, text: str, session: str = "laptop") -> str:
    """One completion of the agent API (its session `api:<session>`), its text."""
    body = {"model": "nanomem", "messages": [{"role": "user", "content": text}]}
    headers = {"Authorization": f"Bearer {API_KEY}"}
    url = f"http://127.0.0.1:{live.gateway.port}/v1/chat/completions"
    async with (
        aiohttp.ClientSession() as client,
        client.post(url, json=body | {"session_id": session}, headers=headers) as response,
    ):
        assert response.status == 200, await response.text()
        return str((await response.json())["choices"][0]["message"]["content"])


async def test_the_api_learns_a_result_from_its_session(
    home: Home, servers: tuple[FakeTelegram, FakeOpenAI]
) -> None:
    """The API cannot push: the result waits in the session's transcript (the next request
    sees it), and /tasks, sent as a message, says how each task ended."""
    api = {"enabled": True, "keys": [API_KEY]}
    async with telegram_gateway(home, *servers, telegram=ALLOWED, api=api) as live:
        job = task_id(await ask_api(live, "SPAWN notes: HOLD sum up my notes"))
        await until(lambda: live.llm.held == 1)
        assert f"{job}  running" in await ask_api(live, "/tasks")
        live.llm.release()
        await until(lambda: told_in_transcript(live, "api:laptop", job))
        assert f"{job}  done" in await ask_api(live, "/tasks")
        requests = len(live.llm.requests)
        await ask_api(live, "what did it find?")
        prompt = json.dumps(live.llm.requests[requests]["messages"])
        assert f"task {job} (notes) done" in prompt and "found: HOLD sum up my notes" in prompt


async def test_a_task_asks_its_chat_before_a_shell_command(
    home: Home, servers: tuple[FakeTelegram, FakeOpenAI]
) -> None:
    """The task carries its starter's context: the owner is asked in the chat, with buttons,
    like in any turn, and the command runs once allowed."""
    shell = {"shell_enabled": True, "shell_approval": "ask", "shell_approval_timeout_s": 20}
    async with telegram_gateway(home, *servers, telegram=ALLOWED, tools=shell) as live:
        job = await spawn(live, OWNER, "SPAWN touch: RUN touch made-by-task")
        asked = await until(
            lambda: next(
                (m for m in live.telegram.sent_messages(OWNER) if m.get("reply_markup")), None
            )
        )
        assert "touch made-by-task" in asked["text"]
        live.telegram.press(asked, live.telegram.button_data(asked, "Allow once"), user_id=OWNER)
        result = await told(live, OWNER, f"task {job} (touch) done · 2 steps")
        assert "the tool said:" in result and "denied" not in result
    assert (home.workspace / "made-by-task").exists()


async def test_a_graceful_stop_tells_the_chat_of_a_task_it_cut_short(
    home: Home, servers: tuple[FakeTelegram, FakeOpenAI]
) -> None:
    quick = {"grace_s": 0.2}  # the task does not finish within it
    async with telegram_gateway(home, *servers, telegram=ALLOWED, gateway=quick) as live:
        job = await spawn(live, OWNER, "SPAWN long: HOLD read the whole library")
        await until(lambda: live.llm.held == 1)
    notice = f"task {job} (long) was interrupted by a restart; ask again to rerun it"
    assert notice in sent(live, OWNER)
    (record,) = json.loads(home.tasks.read_text())["tasks"]
    assert (record["state"], record["told"]) == ("interrupted", True)
    live.llm.release()


async def test_a_result_that_comes_during_a_turn_is_recorded_after_it(
    home: Home, servers: tuple[FakeTelegram, FakeOpenAI]
) -> None:
    """The chat is told at once, but its transcript gets the result only once the turn that
    runs meanwhile has ended: never inside a turn."""
    shell = {"shell_enabled": True, "shell_approval": "ask", "shell_approval_timeout_s": 20}
    async with telegram_gateway(home, *servers, telegram=ALLOWED, tools=shell) as live:
        job = await spawn(live, OWNER, "SPAWN quick: HOLD look it up")
        await until(lambda: live.llm.held == 1)
        live.telegram.send_text(OWNER, "RUN echo busy")  # a turn that waits for the owner
        asked = await until(
            lambda: next(
                (m for m in live.telegram.sent_messages(OWNER) if m.get("reply_markup")), None
            )
        )
        live.llm.release()
        await told(live, OWNER, f"task {job} (quick) done")  # told while the turn waits
        key = f"telegram:{OWNER}"
        assert not told_in_transcript(live, key, job)
        live.telegram.press(asked, live.telegram.button_data(asked, "Deny"), user_id=OWNER)
        await until(lambda: told_in_transcript(live, key, job))
        messages = (await SessionStore(home.sessions).get(key)).messages  # as on disk
        assert messages[-1].get("task") == job
        assert [m["role"] for m in messages[-5:-1]] == ["user", "assistant", "tool", "assistant"]
        assert "denied by the owner" in messages[-3]["content"]


async def test_a_groups_task_is_a_group_turn(live: LiveGateway, home: Home) -> None:
    """No personal memory in a group's task (its prompt is the group's), as in its chat."""
    (home.workspace / "USER.md").write_text("The owner's door code is 4711.\n")
    mine = await spawn(live, OWNER, "SPAWN private: look up my code")
    ours = await spawn(
        live, GROUP, f"{BOT}SPAWN shared: plan", chat_type="supergroup", user_id=MEMBER
    )
    await told(live, OWNER, f"task {mine} (private) done")
    await told(live, GROUP, f"task {ours} (shared) done")
    prompts = {job_of(r): r["messages"][0]["content"] for r in live.llm.requests if job_of(r)}
    assert "4711" in prompts["look up my code"] and "4711" not in prompts["plan"]


def slow_to_say_started(body: dict[str, Any]) -> Step:
    """The chat's reply after `spawn` takes a while; the task itself answers at once."""
    step = tasks_model(body)
    if job_of(body) is None and body["messages"][-1]["role"] == "tool":
        return dataclasses.replace(step, latency=1.5)
    return step


@pytest.mark.parametrize("model", [slow_to_say_started])
async def test_a_quick_task_tells_its_chat_only_after_the_turn_that_started_it(
    live: LiveGateway,
) -> None:
    """What a task says comes after its chat's "started task …", however quick the task."""
    live.telegram.send_text(OWNER, "SPAWN quick: look it up")
    done = await told(live, OWNER, "task ")
    texts = sent(live, OWNER)  # in the order the bot sent them (a status line is among them)
    started = next((i for i, text in enumerate(texts) if "started task" in text), None)
    assert started is not None and started < texts.index(done), texts
    assert done.startswith(f"task {task_id(texts[started])} (quick) done")

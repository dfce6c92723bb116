"""A model for background-task tests (tests/features/test_tasks*.py): what a chat types
decides what it does, and a task's job decides what the task does."""

from __future__ import annotations

import re
from typing import Any

from tests.fakes.openai_server import Step
from tests.fakes.telegram_gateway import LiveGateway
from tests.helpers import WAIT_S, until

USAGE = {"prompt_tokens": 12000, "completion_tokens": 400, "total_tokens": 12400}


def job_of(body: dict[str, Any]) -> str | None:
    """The job, when the request is a background task's (its first message says so)."""
    messages = body["messages"]
    first = str(messages[1]["content"]) if len(messages) > 1 else ""
    return first.rsplit("\n\n", 1)[-1] if first.startswith("[background task") else None


def said(message: dict[str, Any]) -> str:
    """What the person typed (after the runtime header)."""
    return str(message["content"]).rsplit("\n\n", 1)[-1]


def tasks_model(body: dict[str, Any]) -> Step:
    """A chat: "SPAWN <label>: <job>" spawns, "RUN <command>" runs it in the shell; anything
    else is answered. A task: "HOLD" waits
    for FakeOpenAI.release(), "FAIL" is a model error, "LOOP" never stops calling tools,
    "RUN <command>" runs it in the shell; otherwise the job comes back as what it found."""
    messages = body["messages"]
    last = messages[-1]
    job = job_of(body)
    if job is not None:
        if "FAIL" in job:
            return Step.error(400, "the model refused the task")
        if "LOOP" in job:
            return Step.tool_call("list_dir", {"path": "."})
        if last["role"] == "tool":
            return Step.reply(f"the tool said: {last['content']}", usage=USAGE)
        if command := re.fullmatch(r"RUN (.+)", job):
            return Step.tool_call("exec", {"command": command[1]})
        hold = 0 if "HOLD" in job else None
        return Step("reply", text=f"found: {job}", usage=USAGE, hold_after=hold)
    if last["role"] == "tool":
        return Step.reply(f"chat: {last['content']}")
    if command := re.fullmatch(r"RUN (.+)", said(last)):
        return Step.tool_call("exec", {"command": command[1]})
    spawned = re.fullmatch(r"SPAWN (.+?): (.+)", said(last), re.S)
    if spawned:
        return Step.tool_call("spawn", {"label": spawned[1], "task": spawned[2]})
    return Step.reply(f"chat answer to {said(last)}")


def task_id(reply: str) -> str:
    found = re.search(r"started task ([0-9a-f]{4})", reply)
    assert found is not None, reply
    return found.group(1)


async def spawn(live: LiveGateway, chat: int, text: str, **sender: Any) -> str:
    """Send a SPAWN line to `chat`; the task's id, from the chat's reply (looked for among
    every message after the one sent: a tool's status line may come before it)."""
    seen = max((m["message_id"] for m in live.telegram.sent_messages(chat)), default=0)
    live.telegram.send_text(chat, text, **sender)

    def started() -> str | None:
        for message in live.telegram.sent_messages(chat):
            said = str(message.get("text") or "")
            if message["message_id"] > seen and "started task" in said:
                return said
        return None

    return task_id(str(await until(started, WAIT_S)))

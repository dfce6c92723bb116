"""What background work adds to a chat between its turns (a task's result, an `aside`) is
never taken for a turn's reply: a failed turn followed by one can still be retried."""

from __future__ import annotations

from typing import Any

from nanomem.agent.bus import InboundMessage
from nanomem.audience import Sender
from nanomem.features.tasks import BackgroundTasks
from nanomem.home import Home
from nanomem.providers.provider import ProviderError, Reply
from nanomem.providers.scripted import ScriptedProvider, call, text
from tests.conftest import make_app


def model(messages: list[dict[str, Any]]) -> Reply:
    """The task finds something; the chat spawns it, then its model call fails, then it
    answers."""
    if str(messages[1]["content"]).startswith("[background task"):
        return text("the answer is 42")
    if messages[-1]["role"] == "tool":
        raise ProviderError("unreachable", "down")
    return call("spawn", {"task": "find the answer", "label": "answer"})


async def test_a_failed_turn_with_a_task_result_after_it_can_be_retried(home: Home) -> None:
    provider = ScriptedProvider([model] * 3 + [text("Here it is.")])
    app = make_app(home, provider)
    me = Sender("me", is_owner=True)
    failed = await app.loop.handle(InboundMessage("cli", "direct", "what is the answer?", me))
    assert failed is not None and failed.part.style == "error"
    (ended,) = await app.feature(BackgroundTasks).wait()
    session = await app.sessions.get("cli:direct")
    aside = session.messages[-1]
    assert aside["aside"] is True and aside["task"] == ended.id
    assert aside["content"].startswith(f"task {ended.id} (answer) done · 1 step")
    retried = await app.loop.handle(InboundMessage("cli", "direct", "/retry", me))
    assert retried is not None and retried.content == "Here it is."
    assert "the answer is 42" in str(provider.calls[-1])  # the retry's prompt has the result
    await app.loop.close()

import asyncio

from nanomem.provider import Reply, ToolCall
from nanomem.react import CANCELLED_RESULT, ReactResult, react, seal_tool_calls
from nanomem.scripted import ScriptedProvider, call, text
from nanomem.tools import Tool, ToolRegistry


def two_calls() -> Reply:
    return Reply(
        content=None,
        tool_calls=(ToolCall("a", "first", "{}"), ToolCall("b", "second", "{}")),
        finish_reason="tool_calls",
    )


async def test_tool_calls_of_one_step_run_concurrently_and_return_in_order() -> None:
    second_started = asyncio.Event()

    async def first() -> str:
        """Waits until the second tool has started: deadlocks if calls run one by one."""
        await asyncio.wait_for(second_started.wait(), timeout=2)
        return "first done"

    async def second() -> str:
        """Signals that it runs."""
        second_started.set()
        return "second done"

    tools = ToolRegistry([Tool.from_function(first), Tool.from_function(second)])
    provider = ScriptedProvider([two_calls(), text("all done")])
    result = await react(provider, [{"role": "user", "content": "go"}], tools, 5)
    assert result.text == "all done"
    tool_messages = [m for m in result.messages if m["role"] == "tool"]
    assert [(m["tool_call_id"], m["content"]) for m in tool_messages] == [
        ("a", "first done"),
        ("b", "second done"),
    ]
    # The second model call saw both results.
    assert [m["role"] for m in provider.calls[1]] == ["user", "assistant", "tool", "tool"]


async def test_iteration_limit_ends_with_none_not_silence() -> None:
    def ping() -> str:
        """Ping."""
        return "pong"

    provider = ScriptedProvider([call("ping", {}) for _ in range(10)])
    result = await react(provider, [], ToolRegistry([Tool.from_function(ping)]), 3)
    assert result.text is None
    assert len(provider.calls) == 3


async def test_bad_calls_become_observations_for_the_model() -> None:
    def ping() -> str:
        """Ping."""
        return "pong"

    provider = ScriptedProvider([call("ping", '{"oops'), call("nope", {}), text("ok")])
    result = await react(provider, [], ToolRegistry([Tool.from_function(ping)]), 5)
    observations = [m["content"] for m in result.messages if m["role"] == "tool"]
    assert observations[0].startswith("Error: invalid arguments for ping")
    assert observations[1].startswith("Error: unknown tool 'nope'")
    assert result.text == "ok"


async def test_partial_turn_is_visible_after_cancellation() -> None:
    async def forever() -> str:
        """Never finishes."""
        await asyncio.sleep(3600)
        return "never"

    provider = ScriptedProvider([call("forever", {}, call_id="c9")])
    out = ReactResult(text=None)
    task = asyncio.create_task(
        react(provider, [], ToolRegistry([Tool.from_function(forever)]), 5, out=out)
    )
    while not out.messages:
        await asyncio.sleep(0.01)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert out.messages[0]["tool_calls"][0]["id"] == "c9"
    sealed = seal_tool_calls(out.messages)
    assert sealed[-1] == {
        "role": "tool",
        "tool_call_id": "c9",
        "name": "forever",
        "content": CANCELLED_RESULT,
    }

import asyncio
import json
from pathlib import Path

from nanomem.agent.react_loop import CANCELLED_RESULT, ReactResult, react, seal_tool_calls
from nanomem.providers.port import Reply, ToolCall
from nanomem.providers.scripted import ScriptedProvider, call, text
from nanomem.tools import OUTSIDE
from nanomem.tools.files import FileTools
from nanomem.tools.registry import Tool, ToolRegistry, read_only_tool
from tests.helpers import until


def two_calls() -> Reply:
    return Reply(
        content=None,
        tool_calls=(ToolCall("a", "first", "{}"), ToolCall("b", "second", "{}")),
        finish_reason="tool_calls",
    )


async def test_read_only_calls_of_one_step_run_concurrently_and_return_in_order() -> None:
    second_started = asyncio.Event()

    @read_only_tool
    async def first() -> str:
        """Waits until the second tool has started: deadlocks if calls run one by one."""
        await asyncio.wait_for(second_started.wait(), timeout=2)
        return "first done"

    @read_only_tool
    async def second() -> str:
        """Signals that it runs."""
        second_started.set()
        return "second done"

    tools = ToolRegistry([Tool.from_function(first), Tool.from_function(second)])
    provider = ScriptedProvider([two_calls(), text("all done")])
    result = await react(provider, [{"role": "user", "content": "go"}], tools, 5, context=OUTSIDE)
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
    result = await react(provider, [], ToolRegistry([Tool.from_function(ping)]), 3, context=OUTSIDE)
    assert result.text is None
    assert len(provider.calls) == 3


async def test_bad_calls_become_observations_for_the_model() -> None:
    def ping() -> str:
        """Ping."""
        return "pong"

    provider = ScriptedProvider([call("ping", '{"oops'), call("nope", {}), text("ok")])
    result = await react(provider, [], ToolRegistry([Tool.from_function(ping)]), 5, context=OUTSIDE)
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
        react(
            provider, [], ToolRegistry([Tool.from_function(forever)]), 5, out=out, context=OUTSIDE
        )
    )
    await until(lambda: out.messages)
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


def calls_of(*calls: tuple[str, dict[str, object]]) -> Reply:
    return Reply(
        content=None,
        tool_calls=tuple(ToolCall(f"c{i}", n, json.dumps(a)) for i, (n, a) in enumerate(calls)),
        finish_reason="tool_calls",
    )


async def test_calls_that_may_write_run_one_after_another_in_call_order() -> None:
    log: list[str] = []

    async def slow_write(tag: str) -> str:
        """Writes slowly: overlapping runs would interleave their log lines."""
        log.append(f"start {tag}")
        await asyncio.sleep(0.01)
        log.append(f"end {tag}")
        return tag

    @read_only_tool
    async def peek(tag: str) -> str:
        """Reads."""
        log.append(f"peek {tag}")
        return tag

    tools = ToolRegistry([Tool.from_function(slow_write), Tool.from_function(peek)])
    step = calls_of(
        ("slow_write", {"tag": "a"}), ("peek", {"tag": "b"}), ("slow_write", {"tag": "c"})
    )
    provider = ScriptedProvider([step, text("done")])
    result = await react(provider, [], tools, 5, context=OUTSIDE)
    assert log == ["start a", "end a", "peek b", "start c", "end c"]
    assert [m["content"] for m in result.messages if m["role"] == "tool"] == ["a", "b", "c"]


async def test_an_unknown_tool_counts_as_one_that_may_write() -> None:
    tools = ToolRegistry([Tool.from_function(read_only_tool(lambda: "x"), name="look")])
    assert tools.is_read_only("look") and not tools.is_read_only("nope")


def test_the_file_and_memory_tools_declare_what_they_only_read(tmp_path: Path) -> None:
    from nanomem.agent.skills import Skills
    from nanomem.features.dream.dream import MemoryTools
    from nanomem.features.recall.recall import Recall
    from nanomem.memory.history import HistoryStore

    registry = ToolRegistry(
        [
            *FileTools(tmp_path).tools(),
            *Skills(tmp_path).tools(),
            *Recall(HistoryStore(tmp_path), tmp_path / "index.sqlite3").tools(),
        ]
    )
    memory = MemoryTools(tmp_path).registry()
    read_only = {n for r in (registry, memory) for n in r.names if r.is_read_only(n)}
    assert read_only == {"read_file", "list_dir", "read_skill", "search_history", "read_memory"}


async def test_eight_edits_of_one_file_in_one_step_are_all_kept(tmp_path: Path) -> None:
    (tmp_path / "list.md").write_text("".join(f"item {i}: todo\n" for i in range(8)))
    edits = [
        (
            "edit_file",
            {"path": "list.md", "old_text": f"item {i}: todo", "new_text": f"item {i}: done"},
        )
        for i in range(8)
    ]
    provider = ScriptedProvider([calls_of(*edits), text("all done")])
    result = await react(
        provider, [], ToolRegistry(FileTools(tmp_path).tools()), 5, context=OUTSIDE
    )
    assert [m["content"] for m in result.messages if m["role"] == "tool"] == ["Edited list.md"] * 8
    assert (tmp_path / "list.md").read_text() == "".join(f"item {i}: done\n" for i in range(8))

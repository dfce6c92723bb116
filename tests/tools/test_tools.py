import asyncio
import json
from typing import Annotated

from pydantic import Field

from nanomem.tools import OUTSIDE
from nanomem.tools.registry import Tool, ToolError, ToolRegistry


def greet(name: Annotated[str, Field(description="Who to greet")], times: int = 1) -> str:
    """Greet someone."""
    return " ".join([f"hello {name}"] * times)


async def slow_double(x: int) -> str:
    """Double a number slowly."""
    await asyncio.sleep(0)
    return str(2 * x)


def failing(path: str) -> str:
    """Always fails with a message for the model."""
    raise ToolError(f"no file at {path!r}")


def crashing() -> str:
    """Has a bug."""
    raise RuntimeError("boom")


def registry(max_output_chars: int = 16000) -> ToolRegistry:
    tools = [greet, slow_double, failing, crashing]
    return ToolRegistry([Tool.from_function(f) for f in tools], max_output_chars=max_output_chars)


def test_schema_comes_from_signature_and_docstring() -> None:
    schema = Tool.from_function(greet).schema()["function"]
    assert schema["name"] == "greet"
    assert schema["description"] == "Greet someone."
    params = schema["parameters"]
    assert params["required"] == ["name"]
    assert params["properties"]["name"] == {"description": "Who to greet", "type": "string"}
    assert params["properties"]["times"]["default"] == 1


async def test_sync_and_async_tools_run() -> None:
    tools = registry()
    assert (
        await tools.call("greet", json.dumps({"name": "ada", "times": 2}), OUTSIDE)
        == "hello ada hello ada"
    )
    assert await tools.call("slow_double", '{"x": 21}', OUTSIDE) == "42"


async def test_malformed_json_becomes_an_observation() -> None:
    result = await registry().call("greet", '{"name": "ada"', OUTSIDE)
    assert result.startswith("Error: invalid arguments for greet")


async def test_non_object_arguments_are_refused() -> None:
    result = await registry().call("greet", '["ada"]', OUTSIDE)
    assert "must be a JSON object" in result


async def test_wrong_types_and_unknown_fields_are_reported() -> None:
    tools = registry()
    assert "times" in await tools.call("greet", '{"name": "a", "times": "many"}', OUTSIDE)
    assert "extra" in (await tools.call("greet", '{"name": "a", "colour": 1}', OUTSIDE)).lower()
    assert "name" in await tools.call("greet", "{}", OUTSIDE)


async def test_unknown_tool_lists_the_real_ones() -> None:
    result = await registry().call("delete_everything", "{}", OUTSIDE)
    assert result.startswith("Error: unknown tool 'delete_everything'")
    assert "greet" in result


async def test_tool_errors_and_crashes_become_observations() -> None:
    tools = registry()
    assert await tools.call("failing", '{"path": "x"}', OUTSIDE) == "Error: no file at 'x'"
    assert (
        await tools.call("crashing", "{}", OUTSIDE) == "Error: crashing failed: RuntimeError: boom"
    )


async def test_output_is_capped_with_a_note() -> None:
    tools = registry(max_output_chars=500)
    result = await tools.call("greet", json.dumps({"name": "x" * 2000}), OUTSIDE)
    assert len(result) < 600
    assert "[output truncated: 1506 more characters not shown]" in result

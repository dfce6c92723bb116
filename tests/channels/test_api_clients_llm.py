"""The `llm` CLI drives /v1 as its users set it up: an OpenAI-compatible model in
extra-openai-models.yaml, whose only way to choose nanomem's session is a header
(X-Session-Id); its system prompt (`-s`), `--schema` and `--functions` take part in the turn."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

from tests.helpers import WAIT_S
from tests.helpers.clients import Agent

LLM = str(Path(sys.executable).with_name("llm"))
WEATHER = 'def weather(city: str) -> str:\n    return f"sunny, 21 C in {city}"\n'


def configure(agent: Agent, folder: Path, session: str) -> dict[str, str]:
    """The user's llm folder: the model, with its header, and its key as `llm keys set` keeps it."""
    folder.mkdir()
    (folder / "extra-openai-models.yaml").write_text(
        "- model_id: nanomem\n"
        "  model_name: nanomem\n"
        f"  api_base: {agent.base}\n"
        "  api_key_name: nanomem\n"
        "  supports_tools: true\n"
        "  supports_schema: true\n"
        "  headers:\n"
        f"    X-Session-Id: {session}\n"
    )
    (folder / "keys.json").write_text(json.dumps({"nanomem": agent.key}))
    return {**os.environ, "LLM_USER_PATH": str(folder)}


async def llm(env: dict[str, str], *args: str) -> str:
    process = await asyncio.create_subprocess_exec(
        LLM,
        "-m",
        "nanomem",
        *args,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), WAIT_S)
    assert process.returncode == 0, err.decode()
    return out.decode().strip()


async def test_the_header_keeps_one_session_and_the_system_prompt_is_the_clients(
    agent: Agent, tmp_path: Path
) -> None:
    env = configure(agent, tmp_path / "llm", "laptop")
    await llm(env, "-s", "Be brief.", "Remember: the boat is blue")
    assert "Be brief." in agent.model_texts()
    await llm(env, "What colour is the boat?")
    assert "the boat is blue" in agent.model_texts()  # the header's session remembers
    assert await agent.said("laptop") == ["Remember: the boat is blue", "What colour is the boat?"]
    assert "Be brief." not in await agent.file_text("laptop")


async def test_schema_and_functions(agent: Agent, tmp_path: Path) -> None:
    env = configure(agent, tmp_path / "llm", "cli-tools")
    shown = await llm(env, "--schema", "city, temperature_c int", "The forecast for Paris")
    assert json.loads(shown) == {"city": "Paris", "temperature_c": 21}
    said = 'What should I wear? use weather {"city": "Paris"}'
    assert await llm(env, "--functions", WEATHER, said) == "tool said: sunny, 21 C in Paris"
    assert await agent.tool_results("cli-tools") == ["sunny, 21 C in Paris"]

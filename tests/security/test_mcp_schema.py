"""A hostile MCP server's tools cannot swell the tools list or stall the agent: a 2 kB input
schema whose `$defs` each reference the next four times (4^12 copies in full) is left out
within milliseconds, off the event loop; a server listing many large tools gets only what fits
in mcp.max_tools and mcp.max_tools_bytes. Real servers built with the SDK, as child processes
(tests/fakes/mcp_hostile.py): slow tier."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from nanomem.agent import InboundMessage
from nanomem.app import App
from nanomem.audience import Sender
from nanomem.home import Home
from nanomem.providers.scripted import ScriptedProvider, text
from tests.conftest import cli_env, run_cli, run_cli_here
from tests.fakes.openai_server import FakeOpenAI
from tests.helpers.mcp import mcp_ready

pytestmark = pytest.mark.slow

HOSTILE = str(Path(__file__).parents[1] / "fakes" / "mcp_hostile.py")
OWNER = Sender("owner", is_owner=True)


def hostile(mode: str, **env: str) -> dict[str, Any]:
    return {"command": sys.executable, "args": [HOSTILE, mode], "env": env, "timeout_s": 30}


def turn(app: App, content: str) -> Any:
    return app.loop.handle(InboundMessage("cli", "1", content, OWNER))


def mcp_names(tools: list[dict[str, Any]] | None) -> list[str]:
    return [t["function"]["name"] for t in tools or [] if t["function"]["name"].startswith("mcp_")]


def test_a_one_shot_chat_leaves_out_a_schema_that_multiplies(home: Home) -> None:
    with home.config.open("a", encoding="utf-8") as fh:
        fh.write(
            f"\n[mcp.servers.deep]\ncommand = {json.dumps(sys.executable)}\n"
            f'args = [{json.dumps(HOSTILE)}, "deep"]\ntimeout_s = 30\n'
        )
    with FakeOpenAI() as llm:
        llm.reply("fine")
        began = time.monotonic()
        done = run_cli("chat", "-m", "hi", env=cli_env(home, llm), timeout=60)
        took = time.monotonic() - began
        sent = llm.requests[0]["tools"]
    assert done.returncode == 0, done.stderr
    assert "fine" in done.stdout
    assert mcp_names(sent) == ["mcp_deep_echo"]
    assert len(json.dumps(sent)) < 64 * 1024  # our own tools and the echo tool
    assert took < 10, took  # the server's start and the answer (about 3 s); the schema: ms
    logged = home.logs.joinpath("nanomem.log").read_text(encoding="utf-8")
    assert "mcp deep: mcp_deep_deep left out: its schema is over 64 kB" in logged


async def test_a_schema_that_multiplies_never_stalls_another_chat(app_of: Any) -> None:
    # 4^9 copies: about 10 MB once expanded, seconds of work on the event loop before.
    provider = ScriptedProvider([text("still here")])
    app = app_of(provider, deep=hostile("deep", FAKE_MCP_DEPTH="9"))
    stalls: list[float] = []

    async def beat() -> None:
        while True:
            before = time.monotonic()
            await asyncio.sleep(0.01)
            stalls.append(time.monotonic() - before)

    beating = asyncio.create_task(beat())
    try:
        await mcp_ready(app, "deep")
        assert (await turn(app, "hello")).content == "still here"
    finally:
        beating.cancel()
    assert max(stalls) < 1.0, max(stalls)
    assert mcp_names(provider.tools_seen[0]) == ["mcp_deep_echo"]
    listing = (await turn(app, "/mcp")).content
    assert "ready, 1 tool, 1 left out" in listing
    assert "left out: mcp_deep_deep (its schema is over 64 kB)" in listing
    assert app.health()["mcp"].body["deep"]["left_out"] == 1


async def test_the_whole_tools_list_is_bounded(app_of: Any, home: Home) -> None:
    # 300 tools of about 3 kB: 900 kB with every turn, before.
    provider = ScriptedProvider([text("answered")])
    many = hostile("many", FAKE_MCP_TOOLS="300", FAKE_MCP_SCHEMA_BYTES="3000")
    with home.config.open("a", encoding="utf-8") as fh:  # for `nanomem status`
        fh.write(f"\n[mcp.servers.many]\ncommand = {json.dumps(sys.executable)}\n")
        fh.write(f"args = {json.dumps(many['args'])}\n")
    app = app_of(provider, many=many)
    await mcp_ready(app, "many")
    assert (await turn(app, "hello")).content == "answered"
    offered = mcp_names(provider.tools_seen[0])
    assert 0 < len(offered) <= 128
    sent = [t for t in provider.tools_seen[0] or [] if t["function"]["name"] in offered]
    assert len(json.dumps(sent)) <= 256 * 1024
    assert offered == [f"mcp_many_tool{i}" for i in range(len(offered))]  # the first that fit
    listing = (await turn(app, "/mcp")).content
    left = 300 - len(offered)
    assert f"ready, {len(offered)} tools, {left} left out" in listing
    assert f"mcp_many_tool{len(offered)} (over mcp.max_tools_bytes, 256 kB of tools)" in listing
    assert f"and {left - 10} more" in listing
    await asyncio.sleep(0.5)  # the state file for status
    shown = await asyncio.to_thread(run_cli_here, "status", env=cli_env(home))
    assert f"{left} left out" in shown.stdout
    assert "left out: mcp_many_tool" in shown.stdout


async def test_a_smaller_count_bound_leaves_out_the_rest(home: Home) -> None:
    from tests.conftest import make_app

    provider = ScriptedProvider([text("answered")])
    servers = {"many": hostile("many", FAKE_MCP_TOOLS="20")}
    app = make_app(
        home, provider, mcp={"servers": servers, "max_tools": 5}, dream={"enabled": False}
    )
    try:
        await mcp_ready(app, "many")
        assert (await turn(app, "hello")).content == "answered"
        assert mcp_names(provider.tools_seen[0]) == [f"mcp_many_tool{i}" for i in range(5)]
        listing = (await turn(app, "/mcp")).content
        assert "mcp_many_tool5 (over mcp.max_tools, 5 tools)" in listing
    finally:
        await app.stop_features(grace_s=1)
        await app.aclose()

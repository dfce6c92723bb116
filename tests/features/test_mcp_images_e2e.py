"""An MCP tool's image reaches a vision model: a real FastMCP server over streamable HTTP, the
real app with each model client (the lean one and litellm) against the loopback
OpenAI-compatible fake, which records what each model call was sent."""

from __future__ import annotations

import base64
import json
import re
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest

from nanomem.agent import InboundMessage
from nanomem.app import App, build_app
from nanomem.audience import Sender
from nanomem.home import Home
from tests.conftest import TEST_KEY, settings_for
from tests.fakes.mcp_server import TINY_PNG, HttpMcpServer
from tests.fakes.openai_server import FakeOpenAI
from tests.helpers.mcp import mcp_ready

OWNER = Sender("owner", is_owner=True)
MEMBER = Sender("77", "Bo", shared_room=True)
SAVED = re.compile(r"\[image saved: (media/tool-[0-9a-f]{12}\.png) \(image/png, (\d+) bytes\)\]")
DATA_URL = "data:image/png;base64," + base64.b64encode(TINY_PNG).decode()


@pytest.fixture(scope="module")
def mcp_server() -> Iterator[HttpMcpServer]:
    with HttpMcpServer("http") as server:
        yield server


@pytest.fixture
def model() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as server:
        yield server


@pytest.fixture
async def app_with(
    home: Home, model: FakeOpenAI, mcp_server: HttpMcpServer
) -> AsyncIterator[Callable[..., App]]:
    """The real app, its model the loopback fake over `transport`, one MCP server `tracker`."""
    apps: list[App] = []

    def build(transport: str = "direct", vision: bool = True, groups: bool = False) -> App:
        llm = {
            "model": "openai/fake",
            "api_base": model.base_url,
            "api_key": TEST_KEY,
            "timeout_s": 10,
            "transport": transport,
            "supports_images": vision,
        }
        servers = {"tracker": {"url": mcp_server.url, "groups": groups}}
        settings = settings_for(home, llm=llm, mcp={"servers": servers}, dream={"enabled": False})
        apps.append(build_app(settings, home))
        return apps[-1]

    yield build
    for app in apps:
        await app.stop_features(grace_s=1)
        await app.aclose()


def image_parts(request: dict[str, Any]) -> list[str]:
    return [
        part["image_url"]["url"]
        for message in request["messages"]
        if isinstance(message.get("content"), list)
        for part in message["content"]
        if part.get("type") == "image_url"
    ]


@pytest.mark.parametrize("transport", ["direct", "litellm"])
async def test_a_tools_image_reaches_a_vision_model_once(
    app_with: Callable[..., App], model: FakeOpenAI, transport: str
) -> None:
    app = app_with(transport)
    await mcp_ready(app)
    model.tool_call("mcp_tracker_picture", {})
    model.reply("a single pixel")
    reply = await app.loop.handle(InboundMessage("telegram", "1", "show me", OWNER))
    assert reply.content == "a single pixel"
    first, second = model.requests
    assert image_parts(first) == []
    tool, shown = second["messages"][-2:]
    assert tool["role"] == "tool"
    saved = SAVED.search(tool["content"])
    assert saved is not None and int(saved[2]) == len(TINY_PNG)
    # After the tool results: a user message with the image (no image in a `tool` message).
    assert shown["role"] == "user" and shown["content"][0]["type"] == "text"
    assert saved[1] in shown["content"][0]["text"]
    assert image_parts(second) == [DATA_URL]
    assert (app.workspace / saved[1]).read_bytes() == TINY_PNG  # tools can open it later
    session = await app.sessions.get("telegram:1")
    assert all(isinstance(m.get("content"), str | None) for m in session.messages)
    assert "image_url" not in json.dumps(session.messages)
    assert any(saved[0] in str(m.get("content")) for m in session.messages)
    model.reply("still a pixel")
    await app.loop.handle(InboundMessage("telegram", "1", "and now?", OWNER))
    later = model.requests[-1]
    assert image_parts(later) == []  # sent once, not with every later turn
    assert any(saved[0] in str(m.get("content")) for m in later["messages"])


async def test_a_model_without_vision_gets_the_note_only(
    app_with: Callable[..., App], model: FakeOpenAI
) -> None:
    app = app_with(vision=False)
    await mcp_ready(app)
    model.tool_call("mcp_tracker_picture", {})
    model.reply("I cannot see it")
    await app.loop.handle(InboundMessage("telegram", "1", "show me", OWNER))
    second = model.requests[1]
    assert second["messages"][-1]["role"] == "tool"
    saved = SAVED.search(second["messages"][-1]["content"])
    assert saved is not None and (app.workspace / saved[1]).read_bytes() == TINY_PNG
    assert image_parts(second) == []


async def test_a_groups_images_go_to_its_own_folder(
    app_with: Callable[..., App], model: FakeOpenAI
) -> None:
    app = app_with(groups=True)
    await mcp_ready(app)
    model.tool_call("mcp_tracker_picture", {})
    model.reply("a pixel for the group")
    await app.loop.handle(InboundMessage("telegram", "-100", "@bot show us", MEMBER))
    second = model.requests[1]
    saved = SAVED.search(second["messages"][-2]["content"])
    assert saved is not None  # named as the group's file tools see it, from its folder
    room = app.workspace / "rooms" / "telegram_-100"
    assert (room / saved[1]).read_bytes() == TINY_PNG
    assert not (app.workspace / saved[1]).exists()
    assert image_parts(second) == [DATA_URL]

"""The agent API as agent frameworks meet it: the real Gateway and API channel in-process,
its model the lean provider talking HTTP to FakeOpenAI with SchemaModel as the model, so a
client's tools and response_format cross a real wire both ways (tests/channels/
test_api_clients_*). The `agent` fixture, a plugin of tests/conftest.py.

The gateway serves on the test's event loop: a framework's blocking call runs in a thread
(`await agent.call(fn, ...)`), as in a program of its own."""

from __future__ import annotations

import asyncio
import functools
import re
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any, Literal, TypeVar

import pytest
from pydantic import BaseModel, Field

from nanomem.app import build_app
from nanomem.channel_registry import load_channel
from nanomem.gateway.service import Gateway
from nanomem.home import Home
from nanomem.memory.session import SessionStore
from tests.conftest import TEST_KEY, settings_for
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.schema_model import SchemaModel, text_of, unmarked
from tests.helpers import WAIT_S, until
from tests.helpers.gateway import API_KEY

T = TypeVar("T")
# What the model fills a schema's properties of these names with: the conversation's values.
VALUES = {"city": "Paris", "name": "Ada", "temperature_c": 21, "summary": "sunny"}
_RUNTIME = re.compile(r"^\[runtime [^\]\n]*\]\n\n")  # the block nanomem puts before a message


class Forecast(BaseModel):
    """What the frameworks' structured-output tests ask for."""

    city: str
    temperature_c: int = Field(ge=-60, le=60)
    summary: Literal["sunny", "cloudy", "rain"]


def weather(city: str) -> str:
    """The client's own tool: the weather in a city."""
    return f"sunny, 21 C in {city}"


# The same tool as OpenAI's chat-completions wire spells it.
WEATHER_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "weather",
        "description": "The weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}


class Agent:
    def __init__(self, home: Home, model: FakeOpenAI, gateway: Gateway) -> None:
        self.home, self.model, self.gateway = home, model, gateway
        self.key = API_KEY
        self.base = ""

    async def call(self, fn: Callable[..., T], *args: Any, **kw: Any) -> T:
        """A blocking client call, in a thread: the gateway serves on this loop meanwhile."""
        return await asyncio.wait_for(asyncio.to_thread(functools.partial(fn, *args, **kw)), WAIT_S)

    async def messages(self, session: str) -> list[dict[str, Any]]:
        """What the session `api:<session>` holds on disk (a fresh store reads the file, not
        the gateway's copy in memory)."""
        return list((await SessionStore(self.home.sessions).get(f"api:{session}")).messages)

    async def said(self, session: str) -> list[str]:
        """The person's words the session holds, in order (without nanomem's runtime block)."""
        messages = await self.messages(session)
        return [_RUNTIME.sub("", str(m.get("content"))) for m in messages if m["role"] == "user"]

    async def file_text(self, session: str) -> str:
        """The session's file as it is on disk."""
        path = (await SessionStore(self.home.sessions).get(f"api:{session}")).path
        return path.read_text(encoding="utf-8")

    async def tool_results(self, session: str, *, as_saved: bool = False) -> list[str]:
        """The tool results the session holds, by default without the markers nanomem puts
        around outside text."""
        saved = [str(m.get("content")) for m in await self.messages(session) if m["role"] == "tool"]
        return saved if as_saved else [unmarked(text) for text in saved]

    def model_saw(self, index: int = -1) -> list[dict[str, Any]]:
        """The messages of one request the model received (the last by default)."""
        return list(self.model.requests[index]["messages"])

    def model_texts(self, index: int = -1) -> str:
        """All the text of one request the model received, its messages' contents one a line."""
        return "\n".join(text_of(m.get("content")) for m in self.model_saw(index))


@pytest.fixture(scope="module")
def clients_model() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as server:
        yield server


@pytest.fixture
async def agent(home: Home, clients_model: FakeOpenAI) -> AsyncIterator[Agent]:
    model = clients_model
    model.clear()
    model.set_fallback(SchemaModel(VALUES))
    settings = settings_for(
        home,
        # No retries of the model's failures: a test of the clients' own retries sees each.
        llm={"api_base": model.base_url, "api_key": TEST_KEY, "timeout_s": 30, "max_retries": 0},
        gateway={"port": 0},
        api={"enabled": True, "keys": [API_KEY], "max_body_mb": 1},
        dream={"enabled": False},
    )
    app = build_app(settings, home)
    gateway = Gateway(app, {"api": load_channel("api").from_app(app)})
    task = asyncio.create_task(gateway.run())
    served = Agent(home, model, gateway)
    await until(lambda: gateway.port and _up(gateway))
    served.base = f"http://127.0.0.1:{gateway.port}/v1"
    yield served
    gateway.request_stop()
    assert await asyncio.wait_for(task, WAIT_S) == 0


def _up(gateway: Gateway) -> bool:
    report = gateway.health.channels.get("api")
    return report is not None and report.state == "up"

"""The agent API served in-process by the real Gateway and API channel (a scripted model):
the `served` fixture, a plugin of tests/conftest.py."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import openai
import pytest

from nanomem.channel_registry import load_channel
from nanomem.gateway.service import Gateway
from nanomem.home import Home
from nanomem.providers.scripted import ScriptedProvider
from tests.conftest import make_app
from tests.helpers import WAIT_S, until
from tests.helpers.gateway import API_KEY


class Served:
    def __init__(self, gateway: Gateway, provider: ScriptedProvider) -> None:
        self.gateway, self.provider = gateway, provider
        self.base = ""
        self.clients: list[openai.AsyncOpenAI] = []

    def client(self, key: str = API_KEY, max_retries: int = 0) -> openai.AsyncOpenAI:
        """An SDK client, closed with the fixture: left to the garbage collector, it would
        close itself on a later test's event loop, and that loop log the error."""
        client = openai.AsyncOpenAI(
            base_url=self.base, api_key=key, max_retries=max_retries, timeout=WAIT_S
        )
        self.clients.append(client)
        return client

    async def post(self, body: bytes, key: str | None = API_KEY) -> tuple[int, dict[str, Any]]:
        headers = {"Content-Type": "application/json"}
        if key is not None:
            headers["Authorization"] = f"Bearer {key}"
        async with (
            aiohttp.ClientSession() as session,
            session.post(f"{self.base}/chat/completions", data=body, headers=headers) as resp,
        ):
            return resp.status, await resp.json()


def up(gateway: Gateway) -> bool:
    report = gateway.health.channels.get("api")
    return report is not None and report.state == "up"


@pytest.fixture
async def served(home: Home) -> AsyncIterator[Served]:
    provider = ScriptedProvider()
    app = make_app(
        home,
        provider,
        gateway={"port": 0},
        api={"enabled": True, "keys": [API_KEY], "max_body_mb": 1},
        dream={"enabled": False},
    )
    gateway = Gateway(app, {"api": load_channel("api").from_app(app)})
    task = asyncio.create_task(gateway.run())
    served = Served(gateway, provider)
    await until(lambda: gateway.port and up(gateway))
    served.base = f"http://127.0.0.1:{gateway.port}/v1"
    yield served
    for client in served.clients:
        await client.close()
    gateway.request_stop()
    assert await asyncio.wait_for(task, WAIT_S) == 0

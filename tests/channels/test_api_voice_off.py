"""The agent API's `input_audio` where voice is off: the answer is the line saying so (how to
turn it on), and the model is not asked. In-process gateway, loopback Bot API and model."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from nanomem.features.voice.endpoint import DISABLED, TURN_ON
from nanomem.home import Home
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.telegram_gateway import LiveGateway, obedient, telegram_gateway
from tests.fakes.telegram_server import FakeTelegram
from tests.helpers.loopback import Model

KEY = "sk-voice-off-test-key-1234567890"
WAV = b"RIFF\x24\x00\x00\x00WAVEfmt \x10\x00\x00\x00\x01\x00\x01\x00" + b"\x00" * 20


@pytest.fixture
def model() -> Model:
    return obedient


@pytest.fixture(params=[{"enabled": False}, {"api_base": ""}], ids=["disabled", "no-endpoint"])
def voice(request: pytest.FixtureRequest) -> dict[str, Any]:
    return dict(request.param)


@pytest.fixture
async def live(
    home: Home, servers: tuple[FakeTelegram, FakeOpenAI], voice: dict[str, Any]
) -> AsyncIterator[LiveGateway]:
    telegram, llm = servers
    # An Anthropic model: no OpenAI-compatible connection for voice to borrow.
    llm_section = {"model": "anthropic/claude-sonnet-4"} if "api_base" in voice else {}
    api = {"enabled": True, "keys": [KEY]}
    async with telegram_gateway(home, telegram, llm, api=api, voice=voice, llm=llm_section) as gw:
        yield gw


async def test_input_audio_gets_the_voice_is_off_line_and_no_model_turn(
    live: LiveGateway, servers: tuple[FakeTelegram, FakeOpenAI], voice: dict[str, Any]
) -> None:
    audio = {"data": base64.b64encode(WAV).decode(), "format": "wav"}
    content = [{"type": "text", "text": "listen"}, {"type": "input_audio", "input_audio": audio}]
    body = {"model": "nanomem", "messages": [{"role": "user", "content": content}]}
    address = f"http://127.0.0.1:{live.gateway.port}/v1/chat/completions"
    headers = {"Authorization": f"Bearer {KEY}"}
    async with (
        aiohttp.ClientSession() as session,
        session.post(address, json=body, headers=headers) as response,
    ):
        assert response.status == 200, await response.text()
        answer = (await response.json())["choices"][0]["message"]["content"]
    assert answer == (DISABLED if voice.get("enabled") is False else TURN_ON)
    assert servers[1].requests == []  # the model was not asked

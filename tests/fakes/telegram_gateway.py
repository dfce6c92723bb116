"""The real gateway in-process: the whole app (the model over HTTP to the loopback OpenAI fake)
and the real Telegram channel (python-telegram-bot against the loopback Bot API fake)."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from channels.telegram.channel import TelegramChannel
from nanomem.app import App, build_app
from nanomem.channel_registry import load_channel
from nanomem.gateway.service import Gateway
from nanomem.home import Home
from tests.conftest import TEST_KEY, settings_for
from tests.fakes.openai_server import FakeOpenAI, Step
from tests.fakes.telegram_server import FakeTelegram
from tests.helpers import until

BOT = "@nanomem_test_bot "  # what addresses the bot in a group
WAIT_S = 30.0  # the safety net of every wait


class LiveGateway:
    def __init__(self, gateway: Gateway, telegram: FakeTelegram, llm: FakeOpenAI) -> None:
        self.gateway, self.telegram, self.llm = gateway, telegram, llm

    @property
    def app(self) -> App:
        return self.gateway.app

    async def reply(self, chat: int, send: Callable[[], Any]) -> str:
        """Send, then the next message the bot sends to `chat` that is not a progress line
        (found by message id: progress lines may be deleted meanwhile)."""
        seen = max((m["message_id"] for m in self.telegram.sent_messages(chat)), default=0)
        send()

        def replied() -> str | None:
            for message in self.telegram.sent_messages(chat):
                text = str(message.get("text") or "")
                if message["message_id"] > seen and not text.startswith("⚙"):
                    return text
            return None

        return str(await until(replied, WAIT_S))

    async def say(self, chat: int, text: str, **sender: Any) -> str:
        """`text` from a person in `chat` (a group: pass chat_type and user_id), its reply."""
        return await self.reply(chat, lambda: self.telegram.send_text(chat, text, **sender))

    async def health(self) -> tuple[int, dict[str, Any]]:
        """GET /health over HTTP: its status code and JSON body."""
        import aiohttp

        url = f"http://127.0.0.1:{self.gateway.port}/health"
        async with aiohttp.ClientSession() as session, session.get(url) as response:
            return response.status, await response.json()


@asynccontextmanager
async def telegram_gateway(
    home: Home, fake: FakeTelegram, llm: FakeOpenAI, /, **sections: dict[str, Any]
) -> AsyncIterator[LiveGateway]:
    """`sections` override settings (telegram's merge over the fake's address and token)."""
    values: dict[str, dict[str, Any]] = {
        "llm": {"api_base": llm.base_url, "api_key": TEST_KEY, "timeout_s": 10, "stream": False},
        "telegram": {
            "enabled": True,
            "token": fake.token,
            "base_url": fake.base_url,
            "base_file_url": fake.base_file_url,
        },
        "gateway": {"port": 0, "grace_s": 2},
        "dream": {"enabled": False},
    }
    for section, overrides in sections.items():
        values.setdefault(section, {}).update(overrides)
    settings = settings_for(home, **values)
    app = build_app(settings, home, durable=True)
    channel = TelegramChannel(
        settings.telegram,
        workspace=app.workspace,
        commands=app.loop.commands.all(),
        poll_timeout_s=1,
        watch_every_s=0.1,
    )
    channels: dict[str, Any] = {"telegram": channel}
    if settings.api.enabled:  # the agent API beside it, on the gateway's port
        channels["api"] = load_channel("api").from_app(app)
    gateway = Gateway(app, channels)
    task = asyncio.create_task(gateway.run())
    try:
        await until(lambda: _up(gateway) or task.done(), WAIT_S)
        if task.done():
            raise AssertionError(f"the gateway stopped at start: {task.result()}")
        yield LiveGateway(gateway, fake, llm)
    finally:
        gateway.request_stop()
        await asyncio.wait_for(task, WAIT_S)


def _up(gateway: Gateway) -> bool:
    report = gateway.health.channels.get("telegram")
    return report is not None and report.state == "up"


def obedient(request: dict[str, Any]) -> Step:
    """A model that does what a message spells out: "CALL <tool> <json arguments>" is that tool
    call (what a prompt injection gets out of a real model); its result is the reply."""
    last = request["messages"][-1]
    if last["role"] == "tool":
        return Step.reply(f"tool said: {last['content']}")
    found = re.search(r"CALL (\w+) (\{.*\})", str(last["content"]), re.S)
    if found is None:
        return Step.reply("plain answer")
    return Step.tool_call(found.group(1), json.loads(found.group(2)))


def call(tool: str, **arguments: Any) -> str:
    """What to say for `obedient` to make that call."""
    return f"CALL {tool} {json.dumps(arguments)}"

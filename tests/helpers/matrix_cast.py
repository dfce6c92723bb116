"""The tests' Matrix cast: the bot's account and the people around it, and the real
`nanomem gateway` run as that bot against the model's fake."""

from __future__ import annotations

import json
from typing import Any

from nanomem.home import Home
from tests.fakes.openai_server import FakeOpenAI, Step
from tests.helpers.gateway import GatewayProcess
from tests.helpers.matrix import Person
from tests.helpers.synapse import Synapse


class Cast:
    """The bot's account and the people around it, new ones for each test (rooms too)."""

    def __init__(self, server: Synapse, tag: str) -> None:
        self.server = server
        self.bot = server.register(f"bot{tag}")
        self.owner = Person(server, server.register(f"owner{tag}"))
        self.friend = Person(server, server.register(f"friend{tag}"))
        self.stranger = Person(server, server.register(f"stranger{tag}"))

    def env(self, **extra: str) -> dict[str, str]:
        return {
            "NANOMEM_MATRIX__ENABLED": "true",
            "NANOMEM_MATRIX__HOMESERVER": self.server.url,
            "NANOMEM_MATRIX__USER_ID": self.bot.user_id,
            "NANOMEM_MATRIX__ACCESS_TOKEN": self.bot.token,
            "NANOMEM_MATRIX__OWNER": self.owner.user.user_id,
            "NANOMEM_MATRIX__ALLOW_FROM": json.dumps([self.friend.user.user_id]),
            **extra,
        }


def said(request: dict[str, Any]) -> str:
    """What the person wrote last (the core puts a runtime line before it)."""
    users = [m for m in request["messages"] if m.get("role") == "user"]
    return str(users[-1]["content"]).rsplit("\n\n", 1)[-1]


def echo(request: dict[str, Any]) -> Step:
    return Step.reply(f"echo: {said(request)}")


def gateway(home: Home, cast: Cast, llm: FakeOpenAI, **extra: str) -> GatewayProcess:
    process = GatewayProcess(home, None, llm, **cast.env(**extra))
    process.wait_for_line(r"matrix: running")
    return process

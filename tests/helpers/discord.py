"""`nanomem gateway` with the Discord channel, against the loopback Discord
(tests/fakes/discord_server.py). discord.py has no base-URL setting: the channel sets its
`discord.http.Route.BASE` from `discord.api_base` before the client starts, and the gateway's
websocket address comes from the fake's `GET /gateway/bot`."""

from __future__ import annotations

import json
from typing import Any

from nanomem.home import Home
from tests.fakes.discord_server import FakeDiscord
from tests.fakes.openai_server import FakeOpenAI
from tests.helpers.gateway import GatewayProcess

OWNER = "200000000000000001"
FRIEND = "200000000000000002"  # in discord.allow_from
STRANGER = "200000000000000099"


class DiscordGateway(GatewayProcess):
    """The real gateway with Discord enabled (owner OWNER, FRIEND allowed), connected."""

    def __init__(
        self, home: Home, fake: FakeDiscord, llm: FakeOpenAI, *, connects: bool = True, **env: str
    ) -> None:
        settings = {
            "NANOMEM_DISCORD__ENABLED": "true",
            "NANOMEM_DISCORD__TOKEN": fake.token,
            "NANOMEM_DISCORD__API_BASE": fake.api_base,
            "NANOMEM_DISCORD__OWNER": OWNER,
            "NANOMEM_DISCORD__ALLOW_FROM": json.dumps([FRIEND]),
        }
        sessions = len(fake.identifies)
        super().__init__(home, None, llm, **(settings | env))
        self.wait_for_line(r"discord: running")
        if connects:
            fake.wait(lambda: len(fake.identifies) > sessions and fake.connected())


def said(fake: FakeDiscord, channel: str, text: str, seen: int = 0) -> dict[str, Any]:
    """The bot's message in `channel` (after its first `seen`) that reads `text` in full, once
    it does (a growing reply reads so only at its end)."""

    def found() -> dict[str, Any] | None:
        return next((m for m in fake.sent(channel)[seen:] if m["content"] == text), None)

    try:
        return fake.wait(found)  # type: ignore[no-any-return]
    except AssertionError:
        shown = [m["content"] for m in fake.sent(channel)[seen:]]
        raise AssertionError(f"the bot never said {text!r} in {channel}; it said {shown}") from None

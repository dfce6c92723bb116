"""The loopback Slack with its people and conversations, and `nanomem gateway` pointed at it
(slack-sdk takes the Web API's address as `base_url`: our `slack.api_base`; Socket Mode's
websocket address comes from the fake's `apps.connections.open`)."""

from __future__ import annotations

import json
from typing import Any

from nanomem.home import Home
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.slack_server import APP_TOKEN, BOT_TOKEN, BOT_USER, SIGNING_SECRET, FakeSlack
from tests.helpers import wait_until
from tests.helpers.gateway import GatewayProcess

OWNER, MEMBER, STRANGER = "UOWNER001", "UMEMBER01", "USTRANGE1"
DM, MEMBER_DM, STRANGER_DM = "DOWNER001", "DMEMBER01", "DSTRANGE1"
GENERAL = "CGENERAL1"  # a public channel the app, the owner and the member are in
MENTION = f"<@{BOT_USER}>"


def slack_fake() -> FakeSlack:
    fake = FakeSlack().start()
    for user, name in ((OWNER, "owner"), (MEMBER, "member"), (STRANGER, "stranger")):
        fake.add_user(user, name)
    fake.add_conversation(DM, "im", OWNER)
    fake.add_conversation(MEMBER_DM, "im", MEMBER)
    fake.add_conversation(STRANGER_DM, "im", STRANGER)
    fake.add_conversation(GENERAL, "channel")
    return fake


def slack_env(fake: FakeSlack, **extra: str) -> dict[str, str]:
    return {
        "NANOMEM_SLACK__ENABLED": "true",
        "NANOMEM_SLACK__BOT_TOKEN": BOT_TOKEN,
        "NANOMEM_SLACK__APP_TOKEN": APP_TOKEN,
        "NANOMEM_SLACK__SIGNING_SECRET": SIGNING_SECRET,
        "NANOMEM_SLACK__API_BASE": fake.base_url,
        "NANOMEM_SLACK__OWNER": OWNER,
        "NANOMEM_SLACK__ALLOW_FROM": json.dumps([MEMBER]),
        **extra,
    }


def slack_gateway(home: Home, fake: FakeSlack, llm: FakeOpenAI, **env: str) -> GatewayProcess:
    """The real gateway with Slack alone, running (in Socket Mode: connected)."""
    gateway = GatewayProcess(home, None, llm, **slack_env(fake, **env))
    gateway.wait_for_line(r"slack: running")
    if env.get("NANOMEM_SLACK__MODE", "socket") == "socket":
        wait_until(fake.connected, timeout=30, what="the Socket Mode connection")
    return gateway


def replies(fake: FakeSlack, channel: str, thread: str | None = None) -> list[str]:
    """What the app posted in a conversation (a thread's alone with `thread`), as it shows now."""
    return [m["text"] for m in fake.messages_in(channel, thread)]


def reply_count(fake: FakeSlack, channel: str, text: str) -> int:
    return sum(text in shown for shown in replies(fake, channel))


def blocks_message(fake: FakeSlack, channel: str, label: str) -> dict[str, Any]:
    """The newest message the app posted in `channel` with a button `label`."""
    for message in reversed(fake.messages_in(channel)):
        for block in message.get("blocks") or []:
            for element in block.get("elements", []) if block.get("type") == "actions" else []:
                if element.get("text", {}).get("text") == label:
                    return message
    raise AssertionError(f"no button {label!r} in {channel}: {fake.messages_in(channel)}")

"""The Telegram channel in-process against the loopback Bot API: its settings and commands."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from channels.telegram.channel import TelegramChannel
from nanomem.agent.bus import InboundMessage
from nanomem.agent.commands import Command
from nanomem.config import TelegramSettings
from tests.fakes.telegram_server import FakeTelegram

OWNER, FRIEND, STRANGER, GROUP = 42, 43, 666, -100123


async def _answer(msg: InboundMessage, args: str) -> str:
    return ""


COMMANDS = [
    Command("help", "show the commands", _answer, immediate=True),
    Command("new", "start a new conversation", _answer),
    Command("stop", "stop the reply in progress", _answer, immediate=True),
    Command("dream-restore", "list memory versions, or undo one", _answer),
]


def telegram_settings(fake: FakeTelegram, **values: Any) -> TelegramSettings:
    base = {"enabled": True, "token": fake.token, "allow_from": [OWNER, FRIEND]}
    base |= {"base_url": fake.base_url, "base_file_url": fake.base_file_url}
    return TelegramSettings.model_validate(base | values)


def make_channel(fake: FakeTelegram, workspace: Path, **values: Any) -> TelegramChannel:
    return TelegramChannel(
        telegram_settings(fake, **values),
        workspace=workspace,
        commands=COMMANDS,
        poll_timeout_s=1,
        typing_every_s=0.2,
        watch_every_s=0.1,
    )

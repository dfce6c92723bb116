"""Which channels exist, found by name: adding a channel adds one line here (and its folder
under channels/). The core never imports the `channels` package; only this table names it."""

from __future__ import annotations

import importlib
from typing import Any

from nanomem.config import Settings

CHANNELS = {
    "terminal": "channels.terminal.channel:TerminalChannel",
    "telegram": "channels.telegram.channel:TelegramChannel",
    "api": "channels.api.channel:ApiChannel",
    "matrix": "channels.matrix.channel:MatrixChannel",
    "slack": "channels.slack.channel:SlackChannel",
    "discord": "channels.discord.channel:DiscordChannel",
    "web": "channels.web.channel:WebChannel",
    "terminal-outbox": "channels.terminal.outbox:TerminalOutbox",
}
# Served by every gateway whatever the settings: what the agent says unasked in a terminal
# session (a reminder made in `nanomem chat`) waits there for the next look at that chat.
ALWAYS_SERVED = ("terminal-outbox",)
NO_CHANNEL = (
    "no channel is enabled, so it serves only what terminal chats left for later (reminders) "
    "and Dream: enable a messenger in {config} (telegram.enabled = true and telegram.token, "
    "or the matrix, discord or slack section: README's Messengers), or api.enabled = true"
)


def load_channel(name: str) -> type[Any]:
    module_name, _, attr = CHANNELS[name].partition(":")
    return getattr(importlib.import_module(module_name), attr)


def enabled_channels(settings: Settings) -> list[str]:
    """Channels whose settings section says `enabled = true` (the terminal has none)."""
    return [name for name in CHANNELS if getattr(getattr(settings, name, None), "enabled", False)]

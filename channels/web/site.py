"""What every page module of the web app is given: the app, its settings, where it is."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from channels.web.channel import WebChannel
    from nanomem.app import App
    from nanomem.config import WebAppSettings


@dataclass
class Site:
    app: App  # the home, the bus, the memory, the features
    settings: WebAppSettings
    channel: WebChannel  # the chat channel: its bus once started, its listeners


# The page modules, in the order their links appear; each has
# `add_routes(web_app: aiohttp.web.Application, site: Site) -> None`.
PAGES = (
    "channels.web.auth",
    "channels.web.chat",
    "channels.web.memory_page",
    "channels.web.timeline",
    "channels.web.dream_review",
    "channels.web.recall_page",
    "channels.web.operations",
)

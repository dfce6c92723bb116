"""The web app's channel: the chat in a browser (channels/web/chat.py) and the memory's pages,
all on the gateway's HTTP server at `/`, for the owner alone (channels/web/auth.py)."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aiohttp import web

from channels.web.site import PAGES, Site
from nanomem.agent import BaseChannel, Capabilities, OutboundMessage
from nanomem.config import ConfigError

if TYPE_CHECKING:
    from nanomem.agent import MessageBus
    from nanomem.app import App

STATIC_PREFIX = "/static/"
STATIC_DIR = Path(__file__).resolve().parent / "static"  # our script, style and vendor/


class WebChannel(BaseChannel):
    name = "web"
    capabilities = Capabilities(streams=True, buttons=True, files=True, turns=True)

    def __init__(self, app: App) -> None:
        self.site = Site(app, app.settings.web, self)
        self.bus: MessageBus | None = None

    @classmethod
    def from_app(cls, app: App) -> WebChannel:
        gateway = app.settings.gateway
        if problem := app.settings.web.start_problem(gateway.host, gateway.tls_cert is not None):
            raise ConfigError(problem)
        return cls(app)

    def routes(self, web_app: web.Application) -> None:
        web_app.router.add_static(STATIC_PREFIX, STATIC_DIR, append_version=True)
        for module in PAGES:
            importlib.import_module(module).add_routes(web_app, self.site)

    def listens(self, server: str) -> str:
        return f"{server}/ (the web app)"

    async def start(self, bus: Any) -> None:
        self.bus = bus

    async def stop(self) -> None:
        return None

    async def send(self, msg: OutboundMessage) -> None:
        # channels/web/chat.py takes this over: the reply to every open page of that chat.
        return None

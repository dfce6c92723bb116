"""MCP tests: the app's MCP servers, started and waited for, and the `app_of` fixture (a
plugin of tests/conftest.py) that builds apps with given servers and stops them after the test."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from nanomem.app import App
from nanomem.features.mcp import Mcp
from nanomem.home import Home
from nanomem.providers.scripted import ScriptedProvider
from tests.conftest import make_app
from tests.helpers import until

AppOf = Callable[..., App]


async def mcp_ready(app: App, *names: str) -> Mcp:
    """Start the app's features and wait for the named MCP servers (every enabled one when no
    name is given) to be ready."""
    mcp = app.feature(Mcp)
    await app.start_features()
    waited = [s for n, s in mcp.servers.items() if (n in names if names else s.settings.enabled)]
    await until(
        lambda: all(s.state.kind == "ready" for s in waited),
        what=f"the MCP servers {', '.join(names) or 'enabled'} to come up",
    )
    return mcp


@pytest.fixture
async def app_of(home: Home) -> AsyncIterator[AppOf]:
    """Builds the app with these MCP servers (stopped after the test)."""
    apps: list[App] = []

    def build(provider: ScriptedProvider, **servers: dict[str, Any]) -> App:
        app = make_app(home, provider, mcp={"servers": servers}, dream={"enabled": False})
        apps.append(app)
        return app

    yield build
    for app in apps:
        await app.stop_features(grace_s=1)
        await app.aclose()

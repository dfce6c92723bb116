"""MCP tests: the app's MCP servers, started and waited for."""

from __future__ import annotations

from nanomem.app import App
from nanomem.features.mcp import Mcp
from tests.helpers import until


async def mcp_ready(app: App) -> Mcp:
    """Start the app's features and wait for every enabled MCP server to be ready."""
    mcp = app.feature(Mcp)
    await app.start_features()
    await until(
        lambda: all(s.state.kind == "ready" for s in mcp.servers.values() if s.settings.enabled),
        what="the MCP servers to come up",
    )
    return mcp

"""One MCP server started as the feature starts it, until it lists its tools or fails, then
stopped (`nanomem doctor`)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from nanomem.config import McpServerSettings, McpSettings
from nanomem.features.mcp.offers import Limits
from nanomem.features.mcp.state import ServerState

STOP_S = 2.0


@dataclass(frozen=True)
class Probed:
    transport: str  # "stdio: npx", "http: https://host/mcp" (no credentials)
    state: ServerState
    tools: int  # listed, after the allowlist


async def probe(name: str, server: McpServerSettings, settings: McpSettings) -> Probed:
    """Within `server.timeout_s`: a server still starting then is "starting"."""
    from nanomem.features.mcp.server import McpServer  # the SDK: only when asked

    started = McpServer(name, server, Limits.of(settings), lambda _: None)
    started.start()
    try:
        await asyncio.wait_for(started.settled(), server.timeout_s)
    except TimeoutError:
        pass
    finally:
        state, tools = started.state, len(started.offers)  # stopping forgets them
        await started.stop(STOP_S)
    return Probed(started.transport, state, tools)

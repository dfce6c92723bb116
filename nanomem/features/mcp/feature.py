"""MCP servers' tools as the agent's own: `mcp_<server>_<tool>`, offered while the server is
up, each answer wrapped as someone else's text. `/mcp` and GET /health say how each stands."""

from __future__ import annotations

import asyncio
import importlib
from collections.abc import Mapping
from contextlib import suppress
from pathlib import Path
from typing import TYPE_CHECKING, Any

from loguru import logger

from nanomem.agent import Command, Core, Feature, HealthReport, InboundMessage, Reach
from nanomem.audience import is_shared_room
from nanomem.config import McpServerSettings
from nanomem.features.mcp.naming import clean_schema, tool_name
from nanomem.features.mcp.results import result_images, result_text
from nanomem.features.mcp.state import forget_states, write_states
from nanomem.memory import Session
from nanomem.tools import (
    PROMPT_SECTION,
    Tool,
    ToolContext,
    ToolError,
    ToolOutput,
    ToolRegistry,
    truncated,
    untrusted,
)

if TYPE_CHECKING:
    from nanomem.features.mcp.server import McpServer

MAX_DESCRIPTION = 1024  # a tool's description as the server gives it, at most
CUT_NOTE_CHARS = 64  # "[output truncated: N more characters not shown]"


class Mcp(Feature):
    name = "mcp"

    def __init__(
        self,
        servers: Mapping[str, McpServerSettings],
        registry: ToolRegistry,
        state_folder: Path,
    ) -> None:
        from nanomem.features.mcp.server import McpServer  # only with a server configured

        self.servers = {name: McpServer(name, s, self._changed) for name, s in servers.items()}
        self._registry = registry
        self._state_folder = state_folder
        self._keeps_state = False  # a one-shot turn's servers leave no file for status
        self._published: dict[str, list[str]] = {}
        self._started = False
        self._writer: asyncio.Task[None] | None = None
        self._dirty = False

    def commands(self) -> list[Command]:
        return [Command("mcp", "list the MCP servers, their state and tools", self._cmd_mcp)]

    def prompt_section(self) -> str:
        return PROMPT_SECTION

    def health(self) -> Mapping[str, HealthReport]:
        body = {
            name: {
                "state": server.state.kind,
                "detail": server.state.describe(),
                "tools": len(server.state.tools),
            }
            for name, server in self.servers.items()
        }
        down = any(server.state.down for server in self.servers.values())
        return {"mcp": HealthReport(body, warning=down)}

    async def start(self, reach: Reach) -> None:
        self._keeps_state = True
        await self._start()

    async def before_turn(self, session: Session, context: ToolContext) -> None:
        """A one-shot turn (`nanomem chat -m`) has nothing that started the servers: it starts
        them and waits for each to come up or fail, at most its `timeout_s`."""
        if self._started:
            return
        await self._start()
        waiting = [s for s in self.servers.values() if s.settings.enabled]
        if waiting:
            limit = max(s.settings.timeout_s for s in waiting)
            settling = [asyncio.ensure_future(s.settled()) for s in waiting]
            _, late = await asyncio.wait(settling, timeout=limit)
            for still in late:  # the turn goes on without it
                still.cancel()

    async def stop(self, grace_s: float) -> None:
        await asyncio.gather(*(server.stop(grace_s) for server in self.servers.values()))
        if self._writer is not None:
            await asyncio.gather(self._writer, return_exceptions=True)
        if self._keeps_state:
            with suppress(OSError):
                await asyncio.to_thread(forget_states, self._state_folder)

    async def _start(self) -> None:
        if self._started:
            return
        self._started = True
        # The SDK takes a moment to import: off the event loop, so the prompt stays live.
        await asyncio.to_thread(importlib.import_module, "mcp")
        for server in self.servers.values():
            server.start()
        self._save_soon()

    def _changed(self, server: McpServer) -> None:
        kind = server.state.kind
        if kind == "ready":
            self._publish(server, [self._tool(server, tool) for tool in server.tools])
        elif kind in ("stopped", "disabled"):
            self._publish(server, [])
        # Restarting, or starting again: its tools stay offered and answer that it is
        # restarting, so a model that just used one learns why it cannot now.
        self._save_soon()

    def _publish(self, server: McpServer, tools: list[Tool]) -> None:
        for name in self._published.pop(server.name, []):
            self._registry.remove(name)
        for tool in tools:
            self._registry.add(tool)
        self._published[server.name] = [tool.name for tool in tools]

    def _tool(self, server: McpServer, tool: Any) -> Tool:
        source = f"mcp {server.name}/{tool.name}"
        # The markers and the truncation note fit within tools.max_output_chars too.
        room = len(untrusted(source, "")) + CUT_NOTE_CHARS
        limit = max(self._registry.max_output_chars - room, 100)

        async def run(arguments: dict[str, Any], context: ToolContext) -> ToolOutput:
            result = await server.call(tool.name, arguments)
            said = result_text(result)
            text = untrusted(source, truncated(said, limit)) if said else ""
            if result.isError:
                raise ToolError(text or "the server reported an error")
            return ToolOutput(text, result_images(result))

        description = " ".join((tool.description or tool.title or tool.name).split())
        hints = tool.annotations
        return Tool.from_schema(
            tool_name(server.name, tool.name),
            f"{description[:MAX_DESCRIPTION]} (MCP server {server.name})",
            clean_schema(tool.inputSchema),
            run,
            read_only=bool(hints is not None and hints.readOnlyHint),
            audience=None if server.settings.groups else _not_in_groups,
        )

    async def _cmd_mcp(self, msg: InboundMessage, args: str) -> str:
        # A group hears only of the servers it may use: the others are the owner's business.
        in_group = msg.sender.shared_room or is_shared_room(msg.session_key)
        shown = {n: s for n, s in self.servers.items() if s.settings.groups or not in_group}
        if not shown:
            return "No MCP servers are available in this chat."
        lines = ["MCP servers:"]
        for name, server in shown.items():
            lines.append(f"- {name} ({server.transport}): {server.state.describe()}")
            if server.state.tools:
                lines.append(f"  tools: {', '.join(server.state.tools)}")
            if not server.settings.groups:
                lines.append("  (not in group chats)")
        return "\n".join(lines)

    def _save_soon(self) -> None:
        """The state file follows the servers: one writer, the latest state last."""
        if not self._keeps_state:
            return
        self._dirty = True
        if self._writer is None or self._writer.done():
            self._writer = asyncio.get_running_loop().create_task(self._write())

    async def _write(self) -> None:
        while self._dirty:
            self._dirty = False
            states = {name: server.state for name, server in self.servers.items()}
            try:
                await asyncio.to_thread(write_states, self._state_folder, states)
            except OSError as exc:
                logger.warning("mcp: cannot write {} ({})", self._state_folder, exc.strerror)


def _not_in_groups(context: ToolContext) -> bool:
    return not context.shared_room


def build(core: Core) -> Mcp | None:
    servers = core.settings.mcp.servers
    if not servers:
        return None  # the SDK is never imported
    return Mcp(servers, core.tools, core.home.mcp_state)

"""MCP servers' tools as the agent's own: `mcp_<server>_<tool>`, offered while the server is
up, each answer wrapped as someone else's text. `/mcp` and GET /health say how each stands."""

from __future__ import annotations

import asyncio
import importlib
from collections.abc import Mapping
from contextlib import suppress
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from loguru import logger

from nanomem.agent import Command, Core, Feature, HealthReport, InboundMessage, Reach
from nanomem.config import McpSettings
from nanomem.features.mcp.offers import Limits, Offer, choose
from nanomem.features.mcp.results import result_images, result_text
from nanomem.features.mcp.state import SHOWN_LEFT_OUT, forget_states, write_states
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

CUT_NOTE_CHARS = 64  # "[output truncated: N more characters not shown]"


class Mcp(Feature):
    name = "mcp"

    def __init__(self, settings: McpSettings, registry: ToolRegistry, state_folder: Path) -> None:
        from nanomem.features.mcp.server import McpServer  # only with a server configured

        self._limits = Limits.of(settings)
        self.servers = {
            name: McpServer(name, s, self._limits, self._changed)
            for name, s in settings.servers.items()
        }
        self._registry = registry
        self._state_folder = state_folder
        self._keeps_state = False  # a one-shot turn's servers leave no file for status
        self._published: list[str] = []
        self._built: dict[str, tuple[Offer, Tool]] = {}  # by the model's name
        self._told: set[str] = set()  # the tools whose leaving out is logged
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
                "left_out": server.state.left_out_count,
            }
            for name, server in self.servers.items()
        }
        down = any(server.state.down for server in self.servers.values())
        return {"mcp": HealthReport(body, warning=down)}

    async def start(self, reach: Reach) -> None:
        self._keeps_state = True
        if names := [name for name, s in self.servers.items() if s.settings.enabled]:
            logger.info("mcp: starting {} (each says when its tools are listed)", ", ".join(names))
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
        # Restarting, or starting again, a server keeps its offers: its tools stay offered and
        # answer that it is restarting, so a model that just used one learns why it cannot now.
        self._publish()
        self._save_soon()

    def _publish(self) -> None:
        """Offer the tools that fit in the whole list's bounds; say which do not, and why."""
        chosen = choose({name: s.offers for name, s in self.servers.items()}, self._limits)
        for name in self._published:
            self._registry.remove(name)
        self._published = []
        built: dict[str, tuple[Offer, Tool]] = {}
        for name, offers in chosen.items():
            server = self.servers[name]
            kept = [offer for offer in offers if offer.kept]
            left_out = [offer for offer in offers if not offer.kept]
            for offer in kept:
                earlier = self._built.get(offer.name)
                same = earlier is not None and earlier[0].tool is offer.tool
                tool = earlier[1] if earlier is not None and same else self._tool(server, offer)
                built[offer.name] = (offer, tool)
                self._registry.add(tool)
                self._published.append(offer.name)
            self._told.difference_update(offer.name for offer in kept)
            self._tell(name, left_out)
            server.state = replace(
                server.state,
                tools=tuple(offer.name for offer in kept),
                left_out=tuple(offer.shown() for offer in left_out[:SHOWN_LEFT_OUT]),
                left_out_count=len(left_out),
            )
        self._built = built

    def _tell(self, server: str, left_out: list[Offer]) -> None:
        """One log line for each tool newly left out (a few, then how many more)."""
        new = [offer for offer in left_out if offer.name not in self._told]
        for offer in new[:SHOWN_LEFT_OUT]:
            logger.warning("mcp {}: {} left out: {}", server, offer.name, offer.reason)
        if len(new) > SHOWN_LEFT_OUT:
            logger.warning("mcp {}: {} more tools left out", server, len(new) - SHOWN_LEFT_OUT)
        self._told.update(offer.name for offer in new)

    def _tool(self, server: McpServer, offer: Offer) -> Tool:
        source = f"mcp {server.name}/{offer.tool.name}"
        # The markers and the truncation note fit within tools.max_output_chars too.
        room = len(untrusted(source, "")) + CUT_NOTE_CHARS
        limit = max(self._registry.max_output_chars - room, 100)
        real = offer.tool.name

        async def run(arguments: dict[str, Any], context: ToolContext) -> ToolOutput:
            result = await server.call(real, arguments)
            said = result_text(result)
            text = untrusted(source, truncated(said, limit)) if said else ""
            if result.isError:
                raise ToolError(text or "the server reported an error")
            return ToolOutput(text, result_images(result))

        hints = offer.tool.annotations
        assert offer.parameters is not None
        return Tool.from_schema(
            offer.name,
            offer.description,
            offer.parameters,
            run,
            read_only=bool(hints is not None and hints.readOnlyHint),
            audience=None if server.settings.groups else _not_in_groups,
        )

    def shown(self, *, in_group: bool) -> dict[str, McpServer]:
        """The servers /mcp and the web page show: a group hears only of the servers it may
        use, the others are the owner's business."""
        return {n: s for n, s in self.servers.items() if s.settings.groups or not in_group}

    async def _cmd_mcp(self, msg: InboundMessage, args: str) -> str:
        shown = self.shown(in_group=msg.sender.shared_room)
        if not shown:
            return "No MCP servers are available in this chat."
        lines = ["MCP servers:"]
        for name, server in shown.items():
            lines.append(f"- {name} ({server.transport}): {server.state.describe()}")
            if server.state.tools:
                lines.append(f"  tools: {', '.join(server.state.tools)}")
            if left_out := server.state.left_out_line():
                lines.append(f"  {left_out}")
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
    settings = core.settings.mcp
    if not settings.servers:
        return None  # the SDK is never imported
    return Mcp(settings, core.tools, core.home.mcp_state)

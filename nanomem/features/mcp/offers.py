"""Which MCP tools go to the model, with every turn: each server's schemas cleaned within a
size bound (off the event loop, in the MCP schemas' own pool: nanomem/pools.py), then all
servers' tools within a count and a size (mcp.max_tools, mcp.max_tools_bytes). Our own
tools are never counted: they always go. A tool left out keeps its reason, for /mcp and
`nanomem status`."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

from nanomem.config import McpSettings
from nanomem.features.mcp.naming import SchemaTooLarge, clean_schema, kilobytes, tool_name
from nanomem.pools import MCP_SCHEMAS
from nanomem.text.plural import plural

MAX_DESCRIPTION = 1024  # a tool's description as the server gives it, at most
# Cleaning work for one server's list, in bytes of schemas built (those that turned out too
# large included), beyond which its other tools are left out unread: a server listing
# thousands of tools just under the bound costs milliseconds, not seconds.
WORK_FACTOR = 4


@dataclass(frozen=True)
class Limits:
    max_tools: int
    max_tools_bytes: int
    max_schema_bytes: int

    @classmethod
    def of(cls, settings: McpSettings) -> Limits:
        return cls(settings.max_tools, settings.max_tools_bytes, settings.max_schema_bytes)

    def over_count(self) -> str:
        # Shown in parentheses after the tool's name: none of its own (never "((...))").
        return f"over mcp.max_tools, {plural(self.max_tools, 'tool')}"

    def over_bytes(self) -> str:
        return f"over mcp.max_tools_bytes, {kilobytes(self.max_tools_bytes)} of tools"


@dataclass(frozen=True)
class Offer:
    """One of a server's tools as the model would see it, or why it is left out."""

    name: str  # the model's name for it
    tool: Any  # the server's `Tool`
    description: str
    parameters: dict[str, Any] | None  # None: left out
    size: int = 0  # bytes of its entry in the tools list
    reason: str = ""  # why it is left out

    @property
    def kept(self) -> bool:
        return self.parameters is not None and not self.reason

    def left_out(self, reason: str) -> Offer:
        return replace(self, reason=reason)

    def shown(self) -> str:
        return f"{self.name} ({self.reason})"


def prepare(server: str, tools: Iterable[Any], limits: Limits) -> list[Offer]:
    """Blocking, bounded in time and memory by `limits`: the server's tools as offers."""
    offers: list[Offer] = []
    kept = work = 0
    most_work = WORK_FACTOR * limits.max_tools_bytes + limits.max_schema_bytes
    for tool in tools:
        name = tool_name(server, tool.name)
        said = " ".join((tool.description or tool.title or tool.name).split())
        description = f"{said[:MAX_DESCRIPTION]} (MCP server {server})"
        offer = Offer(name, tool, description, None)
        if kept >= limits.max_tools:
            offers.append(offer.left_out(limits.over_count()))
            continue
        if work > most_work:
            offers.append(offer.left_out(limits.over_bytes()))
            continue
        try:
            parameters = clean_schema(tool.inputSchema, limits.max_schema_bytes)
        except SchemaTooLarge as exc:
            work += limits.max_schema_bytes
            offers.append(offer.left_out(str(exc)))
            continue
        entry = {"name": name, "description": description, "parameters": parameters}
        size = len(json.dumps({"type": "function", "function": entry}))
        work += size
        if len(json.dumps(parameters)) > limits.max_schema_bytes:
            # Within the bound as counted while it was built, over it as written (escapes).
            over = f"its schema is over {kilobytes(limits.max_schema_bytes)}"
            offers.append(offer.left_out(over))
            continue
        offers.append(replace(offer, parameters=parameters, size=size))
        kept += 1
    return offers


async def prepared(server: str, tools: list[Any], limits: Limits) -> list[Offer]:
    """`prepare`, off the event loop: a hostile list stalls neither the loop nor the default
    executor that file and network work share."""
    return await MCP_SCHEMAS.run(prepare, server, tools, limits)


def choose(servers: dict[str, list[Offer]], limits: Limits) -> dict[str, list[Offer]]:
    """Every server's offers (in the configured order) with the whole list's bounds applied:
    the first tools that fit are kept, the rest left out with the reason."""
    count = size = 0
    chosen: dict[str, list[Offer]] = {}
    for server, offers in servers.items():
        chosen[server] = []
        for offer in offers:
            if offer.kept and count >= limits.max_tools:
                offer = offer.left_out(limits.over_count())
            elif offer.kept and size + offer.size > limits.max_tools_bytes:
                offer = offer.left_out(limits.over_bytes())
            elif offer.kept:
                count += 1
                size += offer.size
            chosen[server].append(offer)
    return chosen

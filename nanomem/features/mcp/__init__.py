"""MCP servers' tools for the agent (issue 24): see feature.py."""

from nanomem.features.mcp.feature import Mcp, build

__all__ = ["Mcp", "build"]

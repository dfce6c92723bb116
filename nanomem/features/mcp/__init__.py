"""MCP servers' tools for the agent (issue 24): see feature.py."""

from nanomem.features.mcp.feature import Mcp, build
from nanomem.features.mcp.state import status_lines

__all__ = ["Mcp", "build", "status_lines"]

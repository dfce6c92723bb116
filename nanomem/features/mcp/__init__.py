"""MCP servers' tools for the agent (issue 24): see feature.py."""

from typing import TYPE_CHECKING

from nanomem.exports import lazy_exports

if TYPE_CHECKING:
    from nanomem.features.mcp.feature import Mcp, build
    from nanomem.features.mcp.probe import Probed, probe
    from nanomem.features.mcp.state import status_lines

__all__ = ["Mcp", "Probed", "build", "probe", "status_lines"]
__getattr__ = lazy_exports(
    __name__,
    {
        "feature": ("Mcp", "build"),
        "probe": ("Probed", "probe"),
        "state": ("status_lines",),
    },
)

"""What the model can do: the tool registry, workspace file tools and the shell tool."""

from typing import TYPE_CHECKING

from nanomem.exports import lazy_exports

if TYPE_CHECKING:
    from nanomem.tools.files import FileTools
    from nanomem.tools.registry import Tool, ToolError, ToolRegistry, read_only_tool
    from nanomem.tools.safe_open import read_checked
    from nanomem.tools.shell import ShellTool

__all__ = [
    "FileTools",
    "ShellTool",
    "Tool",
    "ToolError",
    "ToolRegistry",
    "read_checked",
    "read_only_tool",
]
__getattr__ = lazy_exports(
    __name__,
    {
        "files": ("FileTools",),
        "registry": ("Tool", "ToolError", "ToolRegistry", "read_only_tool"),
        "safe_open": ("read_checked",),
        "shell": ("ShellTool",),
    },
)

"""What the model can do: the tool registry, workspace file tools and the shell tool (with its
sandbox, and the protections nanomem gives itself against the commands it runs)."""

from typing import TYPE_CHECKING

from nanomem.exports import lazy_exports

if TYPE_CHECKING:
    from nanomem.tools.confine import emit, serve, titled
    from nanomem.tools.context import OUTSIDE, Outlet, ToolContext
    from nanomem.tools.files import MAX_SEND_BYTES, FileTools
    from nanomem.tools.images import (
        IMAGE_TYPES,
        MAX_IMAGE_BYTES,
        Image,
        ToolOutput,
        image_suffix,
        save_images,
    )
    from nanomem.tools.isolated import ChildLimits, run_isolated, stop_all
    from nanomem.tools.limits import Limits
    from nanomem.tools.orphans import REAPER, kill_children, own_children, spawn_lock
    from nanomem.tools.pdf import PdfText, PdfUnreadable, pdf_text
    from nanomem.tools.prctl import hide_environment
    from nanomem.tools.registry import Tool, ToolError, ToolRegistry, read_only_tool, truncated
    from nanomem.tools.safe_open import read_checked, read_text_below
    from nanomem.tools.sandbox import Decision, decide
    from nanomem.tools.shell import ShellTool
    from nanomem.tools.untrusted import PROMPT_SECTION, untrusted

__all__ = [
    "IMAGE_TYPES",
    "MAX_IMAGE_BYTES",
    "MAX_SEND_BYTES",
    "OUTSIDE",
    "PROMPT_SECTION",
    "REAPER",
    "ChildLimits",
    "Decision",
    "FileTools",
    "Image",
    "Limits",
    "Outlet",
    "PdfText",
    "PdfUnreadable",
    "ShellTool",
    "Tool",
    "ToolContext",
    "ToolError",
    "ToolOutput",
    "ToolRegistry",
    "decide",
    "emit",
    "hide_environment",
    "image_suffix",
    "kill_children",
    "own_children",
    "pdf_text",
    "read_checked",
    "read_only_tool",
    "read_text_below",
    "run_isolated",
    "save_images",
    "serve",
    "spawn_lock",
    "stop_all",
    "titled",
    "truncated",
    "untrusted",
]
__getattr__ = lazy_exports(
    __name__,
    {
        "context": ("OUTSIDE", "Outlet", "ToolContext"),
        "files": ("FileTools", "MAX_SEND_BYTES"),
        "images": (
            "IMAGE_TYPES",
            "MAX_IMAGE_BYTES",
            "Image",
            "ToolOutput",
            "image_suffix",
            "save_images",
        ),
        "registry": ("Tool", "ToolError", "ToolRegistry", "read_only_tool", "truncated"),
        "limits": ("Limits",),
        "orphans": ("REAPER", "kill_children", "own_children", "spawn_lock"),
        "confine": ("emit", "serve", "titled"),
        "isolated": ("ChildLimits", "run_isolated", "stop_all"),
        "pdf": ("PdfText", "PdfUnreadable", "pdf_text"),
        "prctl": ("hide_environment",),
        "safe_open": ("read_checked", "read_text_below"),
        "sandbox": ("Decision", "decide"),
        "shell": ("ShellTool",),
        "untrusted": ("PROMPT_SECTION", "untrusted"),
    },
)

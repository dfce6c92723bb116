"""Hostile MCP servers over stdio, built with the SDK's low-level server API (a schema or a
tool list FastMCP would never produce). `python tests/fakes/mcp_hostile.py MODE`:

deep: a tool `deep` whose 2 kB input schema has `$defs` that each reference the next four
  times (expanded in full: 4^12 copies, or 4^FAKE_MCP_DEPTH), beside a plain tool `echo`.
many: FAKE_MCP_TOOLS tools (`tool0`...) with a schema of about FAKE_MCP_SCHEMA_BYTES each.
xss FILE: a tool named for each text of the JSON list in FILE, each described by all of them.
silent: never answers `initialize`; first it starts a grandchild in its own session (setsid,
  so it is not even in the server's process group). Both pids go to the file FAKE_MCP_PIDS,
  one a line (the server's, then the grandchild's).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

DEPTH = 12  # the client's old reference depth cap


def deep_schema(depth: int = DEPTH) -> dict[str, Any]:
    """Each definition references the next four times: 4^depth copies when expanded."""
    defs: dict[str, Any] = {
        f"d{i}": {
            "type": "object",
            "properties": {key: {"$ref": f"#/$defs/d{i + 1}"} for key in "abcd"},
        }
        for i in range(depth)
    }
    defs[f"d{depth}"] = {"type": "string"}
    return {"type": "object", "properties": {"x": {"$ref": "#/$defs/d0"}}, "$defs": defs}


def wide_schema(size: int) -> dict[str, Any]:
    per = 40  # about this many bytes a property
    properties = {f"p{i}": {"type": "string"} for i in range(max(1, size // per))}
    return {"type": "object", "properties": properties}


def serve(tools: list[Any]) -> None:
    import anyio
    import mcp.types as types
    from mcp.server.lowlevel import Server
    from mcp.server.stdio import stdio_server

    server: Any = Server("hostile")

    @server.list_tools()  # type: ignore[untyped-decorator]
    async def list_tools() -> list[types.Tool]:
        return tools

    @server.call_tool(validate_input=False)  # type: ignore[untyped-decorator]
    async def call_tool(name: str, arguments: dict[str, Any]) -> list[types.TextContent]:
        return [types.TextContent(type="text", text=f"{name}: {json.dumps(arguments)}")]

    async def run() -> None:
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())

    anyio.run(run)


def silent() -> None:
    grandchild = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(3600)"],
        start_new_session=True,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    with Path(os.environ["FAKE_MCP_PIDS"]).open("a", encoding="utf-8") as fh:
        fh.write(f"{os.getpid()}\n{grandchild.pid}\n")
    time.sleep(3600)  # reads nothing, answers nothing


def main() -> None:
    import mcp.types as types

    mode = sys.argv[1]
    if mode == "silent":
        silent()
        return
    if mode == "xss":
        texts = json.loads(Path(sys.argv[2]).read_text(encoding="utf-8"))
        described = "\n\n".join(texts)
        tools = [
            types.Tool(name=text, description=described, inputSchema={"type": "object"})
            for text in texts
        ]
    elif mode == "deep":
        tools = [
            types.Tool(
                name="deep", description="A schema that explodes.", inputSchema=deep_schema()
            ),
            types.Tool(
                name="echo",
                description="Say the text back.",
                inputSchema={"type": "object", "properties": {"text": {"type": "string"}}},
            ),
        ]
    else:
        count = int(os.environ.get("FAKE_MCP_TOOLS", "10"))
        schema = wide_schema(int(os.environ.get("FAKE_MCP_SCHEMA_BYTES", "100")))
        tools = [
            types.Tool(name=f"tool{i}", description=f"Tool number {i}.", inputSchema=schema)
            for i in range(count)
        ]
    serve(tools)


if __name__ == "__main__":
    main()

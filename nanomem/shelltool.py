"""The shell tool: off unless tools.shell_enabled; runs in the workspace with a timeout."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from pathlib import Path
from typing import Annotated

from pydantic import Field

from nanomem.tools import Tool


class ShellTool:
    def __init__(self, workspace: Path, *, timeout_s: float, max_output_chars: int) -> None:
        self.workspace = workspace
        self.timeout_s = timeout_s
        self.max_output_chars = max_output_chars

    def tools(self) -> list[Tool]:
        return [Tool.from_function(self.exec, name="exec")]

    async def exec(self, command: Annotated[str, Field(description="A shell command line")]) -> str:
        """Run a shell command in the workspace and return its exit code and output."""
        process = await asyncio.create_subprocess_shell(
            command,
            cwd=self.workspace,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            start_new_session=True,  # so a timeout can kill the whole process group
        )
        try:
            output, _ = await asyncio.wait_for(process.communicate(), self.timeout_s)
        except (TimeoutError, asyncio.CancelledError) as exc:
            _kill_group(process.pid)
            await process.wait()
            if isinstance(exc, asyncio.CancelledError):
                raise
            return f"Error: command timed out after {self.timeout_s:g}s and was killed"
        text = output.decode("utf-8", errors="replace")
        if len(text) > self.max_output_chars:
            # Keep both ends: errors tend to be at the end, context at the start.
            half = self.max_output_chars // 2
            text = f"{text[:half]}\n[... {len(text) - 2 * half} characters cut ...]\n{text[-half:]}"
        return f"exit code {process.returncode}\n{text}"


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)

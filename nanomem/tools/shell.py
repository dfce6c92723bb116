"""The shell tool: off unless tools.shell_enabled; runs in the workspace with a timeout, a
minimal environment (none of our secrets), resource limits (tools.shell_limits) and output read
within a fixed memory bound; in the bubblewrap sandbox where the platform allows
(tools.shell_sandbox), under the reaper elsewhere. A group's command never runs unsandboxed,
and has no network unless tools.shell_network_groups."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import signal
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Annotated, Protocol

from pydantic import Field

from nanomem.audience import room_folder
from nanomem.tools.context import ToolContext
from nanomem.tools.isolated import drain
from nanomem.tools.limits import Limits
from nanomem.tools.orphans import REAPER, own_children, spawn_lock, start_ticks, sweep
from nanomem.tools.prctl import adopt_orphans
from nanomem.tools.registry import Tool, ToolError
from nanomem.tools.sandbox import SANDBOX_HOME, Mode, command_argv, decide

BASE_ENV = ("PATH", "HOME", "LANG", "TERM")
DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"
CHUNK = 64 * 1024
STOP_GRACE_S = 5.0


def command_env(
    allowed: Iterable[str] = (), environ: Mapping[str, str] = os.environ
) -> dict[str, str]:
    """What a command sees: PATH, HOME, LANG, TERM and the names tools.shell_env lists."""
    env = {name: environ[name] for name in (*BASE_ENV, *allowed) if name in environ}
    env.setdefault("PATH", DEFAULT_PATH)
    return env


class Approval(Protocol):
    """Asks before a command runs (tools.shell_approval); the agent's chat answers it."""

    async def refusal(self, command: str, context: ToolContext) -> str | None:
        """None when the command may run; otherwise the reason the model is told."""


class ShellTool:
    def __init__(
        self,
        workspace: Path,
        *,
        timeout_s: float,
        max_output_chars: int,
        allowed_env: Iterable[str] = (),
        approval: Approval | None = None,
        sandbox: Mode = "auto",
        network: bool = True,
        network_groups: bool = False,
        limits: Limits | None = None,
        hidden: Iterable[Path] = (),
    ) -> None:
        self.approval = approval  # None: every command runs (tools.shell_approval = "off")
        self.workspace = workspace
        self.timeout_s = timeout_s
        self.max_output_chars = max_output_chars
        self.allowed_env = tuple(allowed_env)
        self.sandbox = sandbox
        self.network = network  # honoured by the sandbox only
        # A group's command with network reaches every loopback service here (the agent API
        # among them): its own switch, off by default, whatever `network` says.
        self.network_groups = network_groups
        self.limits = limits or Limits()
        self.hidden = tuple(hidden)  # not even readable in the sandbox: nanomem's home

    def tools(self) -> list[Tool]:
        return [Tool.from_function(self.exec, name="exec")]

    async def exec(
        self,
        context: ToolContext,
        command: Annotated[str, Field(description="A shell command line")],
    ) -> str:
        """Run a shell command in the workspace and return its exit code and output."""
        decision = await asyncio.to_thread(decide, self.sandbox)
        if decision.refuses:
            raise ToolError(f"the shell cannot run: {decision.describe(self.network)}")
        sandboxed = decision.binary is not None
        session = context.session
        shared = context.shared_room
        room = room_folder(self.workspace, session, shared) if session is not None else None
        # Like the file tools, a group stays in its room (memory.groups_see_personal or not),
        # and only the sandbox can hold a command there.
        if room is not None and not sandboxed:
            raise ToolError("the shell is not available in group chats without its sandbox")
        if self.approval is not None and (refused := await self.approval.refusal(command, context)):
            return refused  # the model reads it and carries on
        folder = self.workspace
        if room is not None:
            folder = room  # a group's command writes its own room and sees nothing else of ours
            folder.mkdir(parents=True, exist_ok=True)
        env = command_env(self.allowed_env)
        if decision.binary is not None:
            env["HOME"] = SANDBOX_HOME  # the real one is not in the sandbox
            argv = command_argv(
                decision.binary,
                folder,
                network=self.network and (room is None or self.network_groups),
                command=command,
                hidden=self.hidden,
                tmpfs_mb=self.limits.tmpfs_mb,
            )
        else:
            # The reaper owns the command's whole process tree (setsid'd children included).
            argv = [sys.executable, "-I", "-S", str(REAPER), str(os.getpid()), command]
            _adopt_orphans()
        argv = self.limits.wrap(argv)  # bwrap or the reaper, and all they start
        async with spawn_lock():
            process = await asyncio.create_subprocess_exec(
                *argv,
                cwd=folder,
                env=env,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
                start_new_session=True,
            )
            own_children.add(process.pid)
        since = start_ticks(process.pid)
        try:
            return await self._collect(process, sandboxed)
        finally:
            own_children.discard(process.pid)
            if not sandboxed and since is not None:
                async with spawn_lock():
                    await asyncio.to_thread(sweep, since, frozenset(own_children))

    async def _collect(self, process: asyncio.subprocess.Process, sandboxed: bool) -> str:
        assert process.stdout is not None
        # Room for the exit code and the cut note: the registry's own cap must not cut the end.
        output = BoundedOutput(self.max_output_chars - 100)
        try:
            await asyncio.wait_for(output.read_all(process.stdout), self.timeout_s)
            await asyncio.wait_for(process.wait(), self.timeout_s)
        except (TimeoutError, asyncio.CancelledError) as exc:
            await _stop(process, sandboxed)
            if isinstance(exc, asyncio.CancelledError):
                raise
            return f"Error: command timed out after {self.timeout_s:g}s and was killed"
        return f"exit code {process.returncode}\n{output.text()}"


class BoundedOutput:
    """Keeps the start and the end of a stream within a fixed size, however much arrives:
    errors tend to be at the end, context at the start."""

    def __init__(self, max_chars: int) -> None:
        self.keep = max(2, max_chars // 2) * 4  # bytes per end; a character is at most 4
        self.max_chars = max_chars
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    async def read_all(self, stream: asyncio.StreamReader) -> None:
        while chunk := await stream.read(CHUNK):
            self.total += len(chunk)
            room = self.keep - len(self.head)
            if room > 0:
                self.head += chunk[:room]
                chunk = chunk[room:]
            if chunk:
                self.tail += chunk
                del self.tail[: max(0, len(self.tail) - self.keep)]

    def text(self) -> str:
        half = self.max_chars // 2
        head = self.head.decode("utf-8", errors="replace")
        tail = self.tail.decode("utf-8", errors="replace")
        dropped = self.total - len(self.head) - len(self.tail)
        if not dropped:
            whole = head + tail
            if len(whole) <= self.max_chars:
                return whole
            head, tail = whole[:half], whole[-half:]
        else:
            head, tail = head[:half], tail[-half:]
        cut = self.total - len(head.encode()) - len(tail.encode())
        return f"{head}\n[... {cut} bytes cut ...]\n{tail}"


@functools.cache
def _adopt_orphans() -> None:
    adopt_orphans()


async def _stop(process: asyncio.subprocess.Process, sandboxed: bool) -> None:
    """Ask the reaper to kill the tree; if it cannot, kill its process group ourselves. Killing
    bwrap kills its PID namespace, with everything in it.

    The output is read to its end meanwhile, unkept: its reading stopped with the timeout, and
    a full pipe nobody reads never shows its end of file, so the pipe's transport stays open,
    `wait()` waits for it, and it outlives the event loop (asyncio's "Exception ignored ...
    Event loop is closed" as it is collected at exit)."""
    assert process.stdout is not None
    with contextlib.suppress(ProcessLookupError):
        process.send_signal(signal.SIGKILL if sandboxed else signal.SIGTERM)
    try:
        async with asyncio.timeout(STOP_GRACE_S):
            await drain(process.stdout)
            await process.wait()
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        with contextlib.suppress(TimeoutError):  # a leftover holding the pipe is the sweep's
            async with asyncio.timeout(STOP_GRACE_S):
                await drain(process.stdout)
        await process.wait()

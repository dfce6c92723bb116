"""The stdio transport of a local MCP server, ours rather than the SDK's `stdio_client`:
the SDK hands the child HOME, LOGNAME, PATH, SHELL, TERM and USER and writes its stderr to
ours. Here the child gets PATH, HOME and LANG and its configured `env`, nothing else (never
nanomem's keys); its stderr goes to our log, masked and bounded; and we see its exit.

The child runs under the shell's reaper (nanomem/tools/reaper.py): whatever it starts, even in
a session of its own, dies with it, and all of it dies with nanomem, however nanomem ends
(the reaper's parent-death signal), killed with SIGKILL included."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager, suppress
from pathlib import Path
from typing import Any

from loguru import logger

from nanomem.log import redact
from nanomem.tools import REAPER, own_children, spawn_lock

INHERITED = ("PATH", "HOME", "LANG")
STDERR_LINES = 200  # logged per start; a chatty server cannot fill the log
STDERR_LINE_CHARS = 500
MAX_MESSAGE_CHARS = 16 * 1024 * 1024  # one message from the server, at most (then it restarts)
CLOSE_S = 2.0  # after stdin closes, before SIGTERM (and as long again before SIGKILL)


def child_environment(env: Mapping[str, str]) -> dict[str, str]:
    inherited = {name: os.environ[name] for name in INHERITED if name in os.environ}
    return {**inherited, **env}


def program(command: str, path: str) -> str:
    """Blocking: the file `command` names, looked up in the child's PATH as exec would (the
    reaper runs it as is); FileNotFoundError or PermissionError as starting it would raise."""
    found = shutil.which(command, path=path)
    if found is not None:
        return found
    if "/" in command and Path(command).exists():
        raise PermissionError(command)
    raise FileNotFoundError(command)


@asynccontextmanager
async def stdio_transport(
    server: str,
    command: str,
    args: list[str],
    env: Mapping[str, str],
    on_lost: Callable[[str], None],
) -> AsyncIterator[tuple[Any, Any]]:
    """The SDK's pair of streams to and from the child; `on_lost(reason)` when it exits or
    floods us (one message over MAX_MESSAGE_CHARS: the connection is dropped)."""
    import anyio
    import mcp.types as types
    from anyio.streams.text import TextReceiveStream
    from mcp.shared.message import SessionMessage

    incoming_writer, incoming = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    outgoing, outgoing_reader = anyio.create_memory_object_stream[SessionMessage](0)
    environment = child_environment(env)
    found = await asyncio.to_thread(program, command, environment.get("PATH", os.defpath))
    reaper = [sys.executable, "-I", "-S", str(REAPER), str(os.getpid()), "--", found, *args]
    async with spawn_lock():
        process = await anyio.open_process(
            reaper,
            env=environment,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,  # its own process group: stopping it ends its children too
        )
        own_children.add(process.pid)

    async def read_stdout() -> None:
        assert process.stdout is not None
        async with incoming_writer:
            pending: list[str] = []  # a message's pieces so far: joined once, when it ends
            size = 0
            async for chunk in TextReceiveStream(process.stdout, errors="replace"):
                if "\n" not in chunk:
                    pending.append(chunk)
                    size += len(chunk)
                    if size > MAX_MESSAGE_CHARS:
                        on_lost(f"a message over {MAX_MESSAGE_CHARS // 2**20} MiB")
                        return
                    continue
                lines = ("".join(pending) + chunk).split("\n")
                tail = lines.pop()
                pending, size = [tail], len(tail)
                if any(len(line) > MAX_MESSAGE_CHARS for line in lines):
                    on_lost(f"a message over {MAX_MESSAGE_CHARS // 2**20} MiB")
                    return
                for line in lines:
                    if not line.strip():
                        continue
                    try:
                        message = types.JSONRPCMessage.model_validate_json(line)
                    except ValueError as exc:  # a stray print: the SDK hears of it, we log it
                        logger.debug("mcp {}: not a JSON-RPC line on stdout", server)
                        await incoming_writer.send(exc)
                        continue
                    await incoming_writer.send(SessionMessage(message))

    async def write_stdin() -> None:
        assert process.stdin is not None
        async with outgoing_reader:
            async for message in outgoing_reader:
                data = message.message.model_dump_json(by_alias=True, exclude_none=True)
                await process.stdin.send((data + "\n").encode())

    async def read_stderr() -> None:
        assert process.stderr is not None
        logged = 0
        buffer = ""
        async for chunk in TextReceiveStream(process.stderr, errors="replace"):
            lines = (buffer + chunk).split("\n")
            buffer = lines.pop()[-STDERR_LINE_CHARS:]
            for line in lines:
                logged += 1
                if logged <= STDERR_LINES:
                    logger.info("mcp {} stderr: {}", server, redact(line[:STDERR_LINE_CHARS]))
                elif logged == STDERR_LINES + 1:
                    logger.info("mcp {}: more stderr is not logged until it restarts", server)

    async def watch() -> None:
        on_lost(f"exit {await process.wait()}")

    async with anyio.create_task_group() as tasks:
        for job in (read_stdout, write_stdin, read_stderr, watch):
            tasks.start_soon(job)
        try:
            yield incoming, outgoing
        finally:
            with anyio.CancelScope(shield=True):
                await _end(process)
            own_children.discard(process.pid)
            tasks.cancel_scope.cancel()


async def _end(process: Any) -> None:
    """Close its stdin (the spec's polite stop), then SIGTERM, then SIGKILL its group (the
    reaper kills its whole tree on SIGTERM)."""
    import anyio

    if process.stdin is not None:
        with suppress(Exception):
            await process.stdin.aclose()
    for sig in (None, signal.SIGTERM, signal.SIGKILL):
        if sig is not None:
            with suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, sig)
        with anyio.move_on_after(CLOSE_S):
            await process.wait()
            break
    # Whatever it started and left behind, in its group.
    with suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
    with suppress(Exception), anyio.move_on_after(CLOSE_S):
        await process.aclose()  # its pipes: none is left for the garbage collector

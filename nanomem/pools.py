"""Bounded pools for blocking work of a kind that hostile input can flood.

`asyncio.to_thread` shares the loop's default executor with everything else (inbox writes,
file tools, prompt renders): six stuck calls of one kind fill it and every chat waits. Each
kind here has its own few threads, and a gate for the child processes it starts, so a flood
of one kind waits behind itself only. Work in a pool's thread still cannot be stopped: what
may run for ever belongs in a child process (nanomem/tools/isolated.py), behind `slot()`.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import weakref
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from typing import Any, TypeVar

T = TypeVar("T")
WORKERS = "nanomem-worker"  # the names of our worker threads begin so: a bounded stop finds them


class Pool:
    """At most `size` calls (or child processes) of one kind at once."""

    def __init__(self, name: str, size: int) -> None:
        self.name, self.size = name, size
        self._executor: ThreadPoolExecutor | None = None  # made at first use
        # One gate per event loop: a test's loop, or a restart's, starts with a fresh one.
        self._gates: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore]
        self._gates = weakref.WeakKeyDictionary()

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """`fn(*args)` in one of this pool's threads (as `asyncio.to_thread` would)."""
        if self._executor is None:
            prefix = f"{WORKERS}-{self.name}"
            self._executor = ThreadPoolExecutor(self.size, thread_name_prefix=prefix)
        call = functools.partial(contextvars.copy_context().run, fn, *args)
        return await asyncio.get_running_loop().run_in_executor(self._executor, call)

    def shutdown(self) -> None:
        """Idle threads end now, queued calls are dropped; a busy thread ends with its call."""
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None

    @asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        """Held while one child process of this kind runs; waiting for it blocks nothing."""
        loop = asyncio.get_running_loop()
        gate = self._gates.get(loop)
        if gate is None:
            gate = self._gates[loop] = asyncio.Semaphore(self.size)
        async with gate:
            yield


# Documents a chat sends, read_file's PDFs and web_fetch's pages: reads and parsers.
DOCUMENTS = Pool("documents", 2)
# Cleaning the schemas MCP servers send (nanomem/features/mcp/).
MCP_SCHEMAS = Pool("mcp-schemas", 2)
# Parsing a search provider's answer (DuckDuckGo's HTML page: up to tools.web.max_bytes).
SEARCH = Pool("search", 2)
# Checking an API client's response_format schema, and a model's answer against it.
CLIENT_SCHEMAS = Pool("client-schemas", 2)
POOLS = (DOCUMENTS, MCP_SCHEMAS, SEARCH, CLIENT_SCHEMAS)

"""One MCP server kept connected: started in the background, restarted with backoff when it
fails to start, exits or stops answering; its tools called with a time limit."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager, suppress
from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit

from loguru import logger

from nanomem.config import McpServerSettings
from nanomem.features.mcp.offers import Limits, Offer, prepared
from nanomem.features.mcp.state import Kind, ServerState
from nanomem.log import redact
from nanomem.tools import ToolError, untrusted

FIRST_DELAY_S = 1.0
MAX_DELAY_S = 60.0
STEADY_S = 60.0  # ready this long: the next failure starts the backoff afresh
PING_S = 30.0  # a server reached by URL is pinged this often when idle (a stdio one: its exit)
EXITED_WAIT_S = 2.0  # a call cut short by the connection: how long to wait to learn why
REQUEST_TIMEOUT = 408  # the SDK's code for a request its read timeout ended (HTTP's)

OnChange = Callable[["McpServer"], None]


class McpServer:
    def __init__(
        self, name: str, settings: McpServerSettings, limits: Limits, on_change: OnChange
    ) -> None:
        self.name, self.settings = name, settings
        self._limits = limits
        self._on_change = on_change
        self.state = ServerState("starting" if settings.enabled else "disabled")
        self.offers: list[Offer] = []  # its tools as last listed (allowlist applied), prepared
        self._session: Any = None
        self._lost: asyncio.Event = asyncio.Event()
        self._wake = asyncio.Event()  # the connection is lost, or its tool list changed
        self._relist = False
        self._lost_reason = ""
        self._came_up = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._calls: set[asyncio.Future[Any]] = set()  # requests under way
        self._delay = FIRST_DELAY_S  # before the next start
        self._checks: set[asyncio.Future[None]] = set()  # pings after a call timed out

    @property
    def transport(self) -> str:
        if self.settings.command is not None:
            return f"stdio: {self.settings.command}"
        url = self.settings.url or ""
        kind = "sse" if _is_sse(url) else "http"
        parts = urlsplit(url)  # shown without a password or a query that may hold a token
        host = parts.hostname or ""
        shown = f"{parts.scheme}://{host}{f':{parts.port}' if parts.port else ''}{parts.path}"
        return f"{kind}: {redact(shown)}"

    def start(self) -> None:
        if self.settings.enabled and self._task is None:
            self._task = asyncio.create_task(self._run(), name=f"mcp-{self.name}")

    async def stop(self, grace_s: float) -> None:
        task, self._task = self._task, None
        if task is None:
            return
        task.cancel()
        # The child is ended in the transport's own cleanup (SIGTERM, then SIGKILL).
        await asyncio.wait([task], timeout=max(grace_s, 0.1) + 5)
        self.offers = []
        self._set(ServerState("stopped"))

    async def settled(self) -> None:
        """Once it has come up, or failed its first start (for a one-shot turn that waits)."""
        await self._came_up.wait()

    async def call(self, tool: str, arguments: dict[str, Any]) -> Any:
        """The server's `CallToolResult`; ToolError when it cannot answer now or in time."""
        session = self._session
        if self.state.kind != "ready" or session is None:
            raise ToolError(self.unavailable())
        limit = self.settings.timeout_s
        request = asyncio.ensure_future(
            asyncio.wait_for(
                session.call_tool(tool, arguments, read_timeout_seconds=timedelta(seconds=limit)),
                limit + 1,
            )
        )
        self._calls.add(request)
        try:
            return await request
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                request.cancel()
                raise  # the turn was stopped
            # Cut short because the connection was lost (see _run): said at once, not after
            # the time limit.
            raise ToolError(self._stopped_during(tool)) from None
        except TimeoutError:
            self._check_alive(session)
            raise ToolError(
                f"MCP server {self.name} did not answer {tool} within {limit:g} s "
                "(tool call abandoned)"
            ) from None
        except Exception as exc:
            from mcp.shared.exceptions import McpError
            from mcp.types import CONNECTION_CLOSED

            if isinstance(exc, McpError) and exc.error.code == REQUEST_TIMEOUT:
                self._check_alive(session)
                raise ToolError(
                    f"MCP server {self.name} did not answer {tool} within {limit:g} s "
                    "(tool call abandoned)"
                ) from None
            if isinstance(exc, McpError) and exc.error.code != CONNECTION_CLOSED:
                said = untrusted(f"mcp {self.name}/{tool}", redact(exc.error.message))
                raise ToolError(f"MCP server {self.name} refused the call: {said}") from None
            # The connection went: the server exited or stopped answering. It restarts; the
            # reason (its exit code) is worth a moment's wait.
            lost = self._lost
            with suppress(TimeoutError):
                await asyncio.wait_for(lost.wait(), EXITED_WAIT_S)
            self.lose(_describe(exc))
            raise ToolError(self._stopped_during(tool)) from None
        finally:
            self._calls.discard(request)

    def _stopped_during(self, tool: str) -> str:
        return (
            f"MCP server {self.name} stopped during the call ({self._lost_reason}); it is "
            "restarting, try again shortly"
        )

    def unavailable(self) -> str:
        state = self.state
        if state.kind == "restarting":
            return f"MCP server {self.name} is restarting ({state.reason}); try again shortly"
        if state.kind == "failed":
            return f"MCP server {self.name} is not working ({state.reason}); the owner can fix it"
        return f"MCP server {self.name} is {state.kind}; try again shortly"

    def lose(self, reason: str) -> None:
        """The connection is gone (the child exited, a request failed): reconnect."""
        if not self._lost.is_set():
            self._lost_reason = reason
            self._lost.set()
            self._wake.set()
            if self.state.kind == "ready":  # from now on its tools say so, not at the restart
                when = time.time() + self._delay
                self._set(ServerState("restarting", reason, when, self.state.tools))

    async def _run(self) -> None:
        self._delay = FIRST_DELAY_S
        while True:
            self._lost = asyncio.Event()
            self._wake = asyncio.Event()
            self._relist = False
            self._lost_reason = ""
            since = time.monotonic()
            failed_to_start = False
            try:
                await self._serve()
                reason = self._lost_reason or "the connection closed"
            except asyncio.CancelledError:
                raise
            except FileNotFoundError:
                reason, failed_to_start = f"command not found: {self.settings.command}", True
            except PermissionError:
                reason, failed_to_start = f"cannot run {self.settings.command}", True
            except Exception as exc:  # an ExceptionGroup from the SDK's task groups too
                reason = self._lost_reason or _describe(exc)
            finally:
                self._session = None
            self._lost_reason = reason
            for request in list(self._calls):  # nobody will answer them now
                request.cancel()
            if time.monotonic() - since > STEADY_S:
                self._delay = FIRST_DELAY_S
            kind: Kind = "failed" if failed_to_start else "restarting"
            delay = self._delay
            logger.warning("mcp {}: {}; next start in {:g} s", self.name, reason, delay)
            self._set(ServerState(kind, reason, time.time() + delay, self.state.tools))
            self._came_up.set()  # a one-shot turn waits no longer: it goes on without it
            await asyncio.sleep(delay)
            self._delay = min(delay * 2, MAX_DELAY_S)
            self._set(ServerState("starting", tools=self.state.tools))

    async def _serve(self) -> None:
        """Connect, list the tools, and hold the session until the connection is lost."""
        import anyio
        from mcp import ClientSession

        async with AsyncExitStack() as stack:
            read, write = await stack.enter_async_context(self._transport())
            limit = timedelta(seconds=self.settings.timeout_s)
            session = await stack.enter_async_context(
                ClientSession(
                    read, write, read_timeout_seconds=limit, message_handler=self._notified
                )
            )
            try:
                with anyio.fail_after(self.settings.timeout_s):
                    await session.initialize()
                    tools = await _all_tools(session)
            except TimeoutError:
                self.lose(f"did not answer within {self.settings.timeout_s:g} s")
                raise
            self._session = session
            await self._ready(tools)
            logger.info("mcp {}: ready, {} tools listed", self.name, len(self.offers))
            self._came_up.set()
            while not self._lost.is_set():
                try:
                    await asyncio.wait_for(self._wake.wait(), PING_S)
                except TimeoutError:
                    if self.settings.url is not None:
                        await self._ping(session)
                    continue
                self._wake.clear()
                if self._relist and not self._lost.is_set():
                    self._relist = False
                    await self._list_again(session)

    async def _ready(self, tools: list[Any]) -> None:
        self.offers = await prepared(self.name, self._allowed(tools), self._limits)
        # Which of them the model gets is the feature's word (the whole list is bounded).
        self._set(ServerState("ready"))

    async def _notified(self, message: Any) -> None:
        """The SDK's message handler: a changed tool list is listed again (not here: this
        runs in the session's own receive loop, which the request would wait on)."""
        from mcp import types

        if isinstance(message, types.ServerNotification) and isinstance(
            message.root, types.ToolListChangedNotification
        ):
            self._relist = True
            self._wake.set()

    async def _list_again(self, session: Any) -> None:
        try:
            tools = await asyncio.wait_for(_all_tools(session), self.settings.timeout_s)
        except Exception as exc:
            logger.warning("mcp {}: could not list its changed tools ({})", self.name, exc)
            return
        await self._ready(tools)
        logger.info("mcp {}: its tools changed; {} listed now", self.name, len(self.offers))

    async def _ping(self, session: Any) -> None:
        try:
            await asyncio.wait_for(session.send_ping(), self.settings.timeout_s)
        except TimeoutError:
            self.lose("it stopped answering")
        except Exception as exc:
            self.lose(f"no answer to a ping ({_describe(exc)})")

    def _check_alive(self, session: Any) -> None:
        """After a call ran out of time: a server that answers no ping either is hung as a
        whole (not just that tool) and is restarted."""
        if self._session is session and not self._lost.is_set():
            check = asyncio.ensure_future(self._ping(session))
            self._checks.add(check)
            check.add_done_callback(self._checks.discard)

    def _transport(self) -> Any:
        settings = self.settings
        if settings.command is not None:
            from nanomem.features.mcp.stdio import stdio_transport

            env = {name: value.get_secret_value() for name, value in settings.env.items()}
            return stdio_transport(self.name, settings.command, settings.args, env, self.lose)
        url = settings.url or ""
        headers = {name: value.get_secret_value() for name, value in settings.headers.items()}
        if _is_sse(url):
            from mcp.client.sse import sse_client

            return sse_client(url, headers=headers, timeout=settings.timeout_s)
        return _streamable(url, headers)

    def _allowed(self, tools: list[Any]) -> list[Any]:
        wanted = self.settings.tools
        if wanted is None:
            return tools
        names = {tool.name for tool in tools}
        if missing := [name for name in wanted if name not in names]:
            logger.warning("mcp {}: no such tools to allow: {}", self.name, ", ".join(missing))
        return [tool for tool in tools if tool.name in wanted]

    def _set(self, state: ServerState) -> None:
        self.state = state
        try:
            self._on_change(self)
        except Exception:  # a mistake in publishing its tools must not cycle the server
            logger.exception("mcp {}: could not follow its state", self.name)


def _is_sse(url: str) -> bool:
    return urlsplit(url).path.rstrip("/").endswith("/sse")


@asynccontextmanager
async def _streamable(url: str, headers: dict[str, str]) -> AsyncIterator[Any]:
    """The streamable HTTP transport's two streams, over a client carrying our headers."""
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    # The SDK's own timeouts (30 s to connect, reads may stream for 300 s): starting and each
    # call have their limit (timeout_s) on top.
    async with (
        create_mcp_http_client(headers=headers) as client,
        streamable_http_client(url, http_client=client) as (read, write, _),
    ):
        yield read, write


async def _all_tools(session: Any) -> list[Any]:
    tools: list[Any] = []
    cursor = None
    for _ in range(100):  # pages; a server that never stops paging is cut off
        page = await session.list_tools(cursor=cursor)
        tools += page.tools
        cursor = page.nextCursor
        if not cursor:
            break
    return tools


def _describe(exc: BaseException) -> str:
    """A short reason from what may be an exception group of the SDK's task groups."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    text = str(exc) or type(exc).__name__
    return redact(text.splitlines()[0][:200])

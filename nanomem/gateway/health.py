"""What `GET /health` reports: uptime, each channel's state, the features' blocks (the last
Dream run, the schedules), queue depths."""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from aiohttp import web
from loguru import logger

from nanomem.agent import HealthReport, MessageBus
from nanomem.config import ConfigError, GatewaySettings
from nanomem.gateway.connection_guard import ConnectionGuard
from nanomem.log import redact

State = Literal["starting", "up", "down", "stopping"]
# The gateway's own keys of the body; a feature's block cannot take one.
OWN_KEYS = frozenset({"status", "uptime_s", "started_at", "channels", "queues"})


def _iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).isoformat(timespec="seconds")


@dataclass
class ChannelReport:
    state: State = "starting"
    detail: str = ""
    since: str = ""
    restarts: int = 0


class Health:
    def __init__(
        self,
        bus: MessageBus,
        features: Callable[[], Mapping[str, HealthReport]] = dict,
    ) -> None:
        self.bus = bus
        self.features = features  # their blocks by key (Core.health): last_dream, schedules
        self.started = time.time()
        self.channels: dict[str, ChannelReport] = {}
        self.problems: dict[str, Callable[[], str | None]] = {}  # live checks, per channel
        self._failed: set[str] = set()

    def set_channel(self, name: str, state: State, detail: str = "") -> None:
        report = self.channels.setdefault(name, ChannelReport())
        if state == "down":
            self._failed.add(name)
        elif state == "up" and name in self._failed:
            self._failed.discard(name)
            report.restarts += 1  # back up after a failure
        report.state, report.detail, report.since = state, redact(detail), _iso(time.time())

    def snapshot(self) -> tuple[bool, dict[str, Any]]:
        """(healthy, the JSON body); healthy means every channel is up and has no problem.
        A feature's warning (schedules that failed to arm) makes the status "warning", not
        unhealthy: a restart (what a 503 asks a supervisor for) cannot mend a bad entry, only
        a person can."""
        channels: dict[str, dict[str, Any]] = {}
        for name, report in self.channels.items():
            shown = asdict(report)
            check = self.problems.get(name)
            problem = check() if check is not None and report.state == "up" else None
            if problem:
                shown.update(state="down", detail=redact(problem))
            channels[name] = shown
        healthy = all(c["state"] == "up" for c in channels.values())
        blocks = self._blocks()
        troubled = any(report.warning for report in blocks.values())
        body = {
            "status": "degraded" if not healthy else "warning" if troubled else "ok",
            "uptime_s": round(time.time() - self.started, 1),
            "started_at": _iso(self.started),
            "channels": channels,
            **{key: blocks[key].body for key in sorted(blocks)},
            "queues": {
                "inbound": self.bus.inbound_depth,
                "outbound": self.bus.outbound_depth(),
                # Stored, not yet answered and delivered (a small indexed count).
                "inbox": self.bus.inbox.count() if self.bus.inbox is not None else None,
                # Of those, given up on after failing: they wait for the owner, not for us.
                "parked": self.bus.inbox.count_parked() if self.bus.inbox is not None else None,
            },
        }
        return healthy, body

    def _blocks(self) -> dict[str, HealthReport]:
        blocks = dict(self.features())
        for key in OWN_KEYS & blocks.keys():  # a mistake in a feature: never a failed /health
            logger.error("health: a feature's block may not be called {!r}", key)
            del blocks[key]
        return blocks


# The gateway's Health on its HTTP server, for a channel's pages that show it (the web app).
HEALTH = web.AppKey("nanomem_health", Health)
# Adds a channel's own routes (the agent API) to the gateway's one HTTP server.
AddRoutes = Callable[[web.Application], None]
_SHARED = (
    "two parts of the gateway would answer at one path ({path}): give telegram.webhook_url a "
    "path nothing else of the gateway serves, e.g. https://bot.example.org/telegram/webhook"
)


def _shared_path(app: web.Application) -> str | None:
    """A path two of the server's routes answer (the first one added would take every request
    meant for the other), or None: whichever channels are on, each path has one owner."""
    resources = list(app.router.resources())
    for resource in resources:
        path = resource.get_info().get("path")
        if path is None:
            continue
        for other in resources:
            if other is not resource and _answers(other, str(path)):
                return str(path)
    return None


def _answers(resource: web.AbstractResource, path: str) -> bool:
    info = resource.get_info()
    if "path" in info:
        return bool(info["path"] == path)
    if "pattern" in info:
        return info["pattern"].fullmatch(path) is not None
    prefix = str(info.get("prefix", "")).rstrip("/")
    return bool(prefix) and (path == prefix or path.startswith(prefix + "/"))


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class _GuardedSite(web.BaseSite):
    """A TCP site whose connections pass through a ConnectionGuard."""

    def __init__(
        self,
        runner: web.AppRunner,
        host: str,
        port: int,
        guard: ConnectionGuard,
        tls: ssl.SSLContext | None = None,
    ):
        super().__init__(runner, ssl_context=tls)
        self._host, self._port, self._guard = host, port, guard

    @property
    def name(self) -> str:
        scheme = "https" if self._ssl_context is not None else "http"
        return f"{scheme}://{self._host}:{self._port}"

    async def start(self) -> None:
        await super().start()
        assert self._runner.server is not None
        self._server = await asyncio.get_running_loop().create_server(
            self._guard.wrap(self._runner.server),
            self._host,
            self._port,
            backlog=self._backlog,
            ssl=self._ssl_context,
        )


async def serve_health(
    health: Health,
    host: str,
    port: int,
    routes: Iterable[AddRoutes] = (),
    *,
    max_connections: int = 256,
    read_timeout_s: float = 15.0,
    tls: ssl.SSLContext | None = None,
) -> tuple[web.AppRunner, int]:
    """Serve GET /health (200, or 503 when a channel is down) and the channels' routes, over
    https with `tls`; returns the runner and port."""
    guard = ConnectionGuard(max_connections, read_timeout_s)

    async def handle(_: web.Request) -> web.Response:
        healthy, body = health.snapshot()
        return web.json_response(body, status=200 if healthy else 503)

    @web.middleware
    async def answering(request: web.Request, handler: Handler) -> web.StreamResponse:
        """While a request is answered, its connection's read deadline does not run."""
        guard.request_started(request.transport)
        try:
            return await handler(request)
        finally:
            guard.request_ended(request.transport)

    app = web.Application(middlewares=[answering])
    app[HEALTH] = health
    app.router.add_get("/health", handle)
    for add in routes:
        try:
            add(app)
        except RuntimeError as exc:  # aiohttp: that method at that path is served already
            raise ConfigError(_SHARED.format(path=str(exc))) from None
    if (shared := _shared_path(app)) is not None:
        raise ConfigError(_SHARED.format(path=repr(shared)))
    # A client that hangs up cancels its handler: the agent API stops that turn. Bodies come
    # as sent: a handler decodes them (nanomem.text.inflate), so a Content-Encoding aiohttp cannot
    # read, or bytes that are not what it says, get the handler's answer, not aiohttp's.
    runner = web.AppRunner(
        app,
        access_log=None,
        shutdown_timeout=1.0,
        handler_cancellation=True,
        auto_decompress=False,
    )
    await runner.setup()
    try:
        await _GuardedSite(runner, host, port, guard, tls).start()
    except OSError:
        await runner.cleanup()
        raise
    return runner, int(runner.addresses[0][1])


def tls_context(settings: GatewaySettings) -> ssl.SSLContext | None:
    """The server's TLS from gateway.tls_cert and tls_key (None: plain http); ConfigError
    naming the file when they cannot be used."""
    if settings.tls_cert is None or settings.tls_key is None:
        return None
    cert, key = settings.tls_cert.expanduser(), settings.tls_key.expanduser()
    for name, path in (("tls_cert", cert), ("tls_key", key)):
        if not path.is_file():
            raise ConfigError(f"gateway.{name}: {path} does not exist (a PEM file is needed)")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(cert, key)
    except (OSError, ssl.SSLError) as exc:
        reason = getattr(exc, "reason", None) or getattr(exc, "strerror", None) or "unreadable"
        raise ConfigError(
            f"gateway.tls_cert {cert} and gateway.tls_key {key} cannot be used ({reason}): "
            "give a PEM certificate (chain) and its private key"
        ) from None
    return context

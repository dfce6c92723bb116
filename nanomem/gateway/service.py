"""`nanomem gateway`: the agent loop, every enabled channel and GET /health in one asyncio loop."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import signal
import sys
import threading
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, NoReturn, Protocol

from loguru import logger

from nanomem.agent import (
    Channel,
    ChannelDown,
    OutboundMessage,
    OwnerAway,
    Reach,
    Readmit,
    Retries,
    Text,
    forms,
    keep_telling,
    parked_notice,
    pump_outbound,
)
from nanomem.app import App
from nanomem.channel_registry import ALWAYS_SERVED, NO_CHANNEL, enabled_channels, load_channel
from nanomem.config import ConfigError
from nanomem.gateway.health import Health, serve_health, tls_context
from nanomem.pools import POOLS, WORKERS

SIGNALS = (signal.SIGTERM, signal.SIGINT)
RETRY_FIRST_S, RETRY_MAX_S = 1.0, 300.0
STOP_CHANNEL_S = 25.0  # per channel, after the grace period
PARKED_CHECK_S = 5.0  # how often messages parked after their last attempt are looked for
FD_RESERVE = 256  # file descriptors kept for all but the HTTP server's connections
FORCED_EXIT_S = 1.0  # after a second signal: cancel everything, then leave whatever happens
# After gateway.grace_s: cancelled turns saved, replies delivered, channels stopped. The
# process has ended this long after the first signal at the latest, whatever hangs.
AFTER_GRACE_S = 10.0
THREADS_S = 2.0  # the last wait for work in worker threads, which nothing can cancel


class GatewayChannel(Channel, Protocol):
    """A channel `nanomem gateway` runs unattended: built from the app, watched, restarted."""

    @classmethod
    def from_app(cls, app: App) -> GatewayChannel:
        """Build from the app's settings; raise ConfigError when the settings cannot work."""
        ...


class Gateway:
    def __init__(self, app: App, channels: dict[str, GatewayChannel]) -> None:
        self.app = app
        self.channels = channels
        self.health = Health(app.bus, app.health)  # the features' blocks among the rest
        self.port = 0
        self._stop = asyncio.Event()
        self._forced = False
        self._exit_code = 0
        self._tasks: list[asyncio.Task[Any]] = []
        self._cancelling: asyncio.Future[Any] | None = None  # the second signal's hard stop
        self.owns_process = False  # `serve`: a stop that hangs ends the process (os._exit)

    @classmethod
    def from_app(cls, app: App) -> Gateway:
        names = enabled_channels(app.settings)
        if not names:  # it still fires what the terminal left for later, and runs Dream
            logger.warning("gateway: {}", NO_CHANNEL.format(config=app.home.config))
        built = [load_channel(name).from_app(app) for name in [*names, *ALWAYS_SERVED]]
        return cls(app, {channel.name: channel for channel in built})

    async def run(self, listening: Callable[[int], None] | None = None) -> int:
        """Serve until SIGTERM/SIGINT, then shut down gracefully; the exit code. `listening`
        is told the port once the server listens."""
        settings, loop = self.app.settings.gateway, asyncio.get_running_loop()
        _make_room_for(settings.max_connections)
        tls = tls_context(settings)
        try:
            routes = [channel.routes for channel in self.channels.values()]
            runner, self.port = await serve_health(
                self.health,
                settings.host,
                settings.port,
                routes,
                max_connections=settings.max_connections,
                read_timeout_s=settings.read_timeout_s,
                tls=tls,
            )
        except OSError as exc:
            raise ConfigError(_cannot_listen(settings.host, settings.port, exc)) from None
        if listening is not None:
            listening(self.port)
        for sig in SIGNALS:
            loop.add_signal_handler(sig, self.request_stop)
        self._say_where(f"{settings.scheme}://{settings.host}:{self.port}")
        dispatcher = asyncio.create_task(self.app.loop.run(), name="agent-loop")
        dispatcher.add_done_callback(self._dispatcher_ended)
        await self._start_features()
        if self._reaches_owner():
            parked = asyncio.create_task(self._tell_owner_of_parked(), name="parked-notices")
            self._tasks.append(parked)
        for name, channel in self.channels.items():
            self.health.problems[name] = channel.problem
            self._tasks.append(asyncio.create_task(self._supervise(name, channel), name=name))
        retries = self._start_retries()
        try:
            await self._stop.wait()
            if retries is not None:  # nothing more is handed in: it waits for the next start
                retries.cancel()
                await asyncio.gather(retries, return_exceptions=True)
            await self._shutdown(dispatcher, settings.grace_s)
        finally:
            await runner.cleanup()
            self._handle_signals_to_the_end(loop)
        logger.info("gateway: stopped")
        return self._exit_code

    def _handle_signals_to_the_end(self, loop: asyncio.AbstractEventLoop) -> None:
        """Off the loop; in `serve`, a plain handler in its place until the process is gone
        (the default would kill it: exit 143, not 130), swapped with both signals blocked."""
        held = signal.pthread_sigmask(signal.SIG_BLOCK, SIGNALS)
        try:
            for sig in SIGNALS:
                loop.remove_signal_handler(sig)
                if self.owns_process:
                    signal.signal(sig, _stop_at_once)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, held)

    async def _start_features(self) -> None:
        """The features' background work (Dream's schedule and review notices, scheduled
        turns); what they start unasked goes to the chats of channels that can take a message
        nobody asked for (not the API: its replies go to a waiting request), and what is for
        the owner through the owner outlet, when a channel can reach the owner."""
        pushing = {name for name, c in self.channels.items() if c.capabilities.pushes}
        owner = self._tell_owner if self._reaches_owner() else None
        for channel in self.channels.values():
            channel.reach_owner(owner)
        await self.app.start_features(Reach(frozenset(pushing), self._admits, owner))

    def _say_where(self, server: str) -> None:
        """Where each channel takes messages: in the log, and on stdout for a person at a
        terminal (stderr may show only warnings)."""
        logger.info("gateway: health at {}/health", server)
        lines = [("health", f"{server}/health")]
        for name, channel in self.channels.items():
            if said := channel.listens(server):
                logger.info("gateway: {}: {}", name, said)
                lines.append((name, said))
        if sys.stdout.isatty():
            width = max(len(name) for name, _ in lines)
            shown = "\n".join(f"  {name.ljust(width)}  {where}" for name, where in lines)
            print(f"nanomem gateway is running (Ctrl-C stops it):\n{shown}", flush=True)

    def _reaches_owner(self) -> bool:
        return any(channel.capabilities.reaches_owner for channel in self.channels.values())

    def _start_retries(self) -> asyncio.Task[None] | None:
        """Messages whose handling failed go back to their channel when their next attempt is
        due (agent/retries.py): the channels' that store what they receive, and the features'
        (the schedules' firings)."""
        if self.app.bus.inbox is None:
            return None
        readmit: dict[str, Readmit] = self.app.inbox_channels()
        for name, channel in self.channels.items():
            readmit[name] = channel.readmit
        return asyncio.create_task(Retries(self.app.bus, readmit).run(), name="retries")

    def _admits(self, session: str, sender: str) -> bool:
        name, _, chat = session.partition(":")
        channel = self.channels.get(name)
        return channel is None or channel.admits(chat, sender)

    def _owner(self) -> tuple[GatewayChannel, str] | None:
        """The first channel that can reach the owner privately, and the owner's chat there."""
        for channel in self.channels.values():
            if channel.capabilities.reaches_owner and (chat := channel.owner_chat()) is not None:
                return channel, chat
        return None

    def _dispatcher_ended(self, task: asyncio.Task[None]) -> None:
        if not task.cancelled() and (exc := task.exception()) is not None:
            logger.opt(exception=exc).critical("gateway: the agent loop died; stopping")
            self._exit_code = 1  # a supervisor (Docker, systemd) restarts the gateway
            self._stop.set()

    def request_stop(self) -> None:
        loop = asyncio.get_running_loop()
        if not self._stop.is_set():
            logger.info("gateway: stopping (a second signal stops at once)")
            self._stop.set()
            if self.owns_process:  # never cancelled: it fires unless the process has ended
                bound = self.app.settings.gateway.grace_s + AFTER_GRACE_S
                why = f"still stopping {bound:g} s after the signal"
                loop.call_later(bound, lambda: leave(self._exit_code, why))
        elif not self._forced:
            logger.warning("gateway: stopping at once")
            self._forced, self._exit_code = True, 130
            self._cancelling = asyncio.gather(
                self.app.loop.close(grace_s=0), self.app.stop_features(grace_s=0)
            )
            if self.owns_process:  # in case even that hangs
                loop.call_later(FORCED_EXIT_S, leave, 130, "a second signal")
        else:
            leave(130, "a third signal")

    async def _supervise(self, name: str, channel: GatewayChannel) -> None:
        """Start a channel, retrying with backoff until it runs; then deliver its outbox."""
        if channel.capabilities.turns:  # from its first message on (a replay at its start)
            self.app.bus.turns.add(name)
        delay = RETRY_FIRST_S
        while True:
            self.health.set_channel(name, "starting")
            try:
                await channel.start(self.app.bus)
                break
            except ChannelDown as exc:
                line = str(exc)
            except Exception as exc:
                logger.opt(exception=exc).debug("{} failed to start", name)
                line = f"{name}: could not start: {type(exc).__name__}: {exc}"
            self.health.set_channel(name, "down", line)
            logger.error("{} (retrying in {:.0f} s)", line, delay)
            await asyncio.sleep(delay)
            delay = min(delay * 2, RETRY_MAX_S)
        self.health.set_channel(name, "up")
        logger.info("{}: running", name)
        self.app.bus.retry_wake.set()  # a retry that fell due while it was down: now
        await pump_outbound(channel, self.app.bus)

    async def _tell_owner(self, notice: Text) -> None:
        """The owner outlet (agent/feature.py: TellOwner): the notice goes to the owner's
        private chat in the first channel that reaches them now, in a form it can show."""
        if (owner := self._owner()) is None:
            raise OwnerAway("no channel reaches the owner now")
        channel, chat = owner
        # Sent by the channel itself, which returns once it is delivered (DeliveryLater when
        # it cannot be now): a notice merely queued may be lost, and then nobody is told.
        for shown in forms(OutboundMessage(channel.name, chat, notice), channel.capabilities):
            await channel.send(shown)

    async def _tell_owner_of_parked(self) -> None:
        """Each message parked after its last failed attempt is told once to the owner."""
        inbox = self.app.bus.inbox
        if inbox is None:
            return  # nothing is parked without the inbox

        async def tell() -> None:
            for parked in await asyncio.to_thread(inbox.untold):
                await self._tell_owner(Text(parked_notice(parked)))
                await asyncio.to_thread(inbox.owner_told, parked.seq)

        await keep_telling(PARKED_CHECK_S, "a parked message", tell)

    async def _shutdown(self, dispatcher: asyncio.Task[None], grace_s: float) -> None:
        """Take nothing new, let running turns finish within the grace period and deliver their
        replies; whatever is left (waiting messages, undelivered replies) stays in the inbox
        and is answered at the next start."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + grace_s

        def left() -> float:
            return 0.0 if self._forced else max(0.0, deadline - loop.time())

        self.app.bus.closing.set()
        for name, channel in self.channels.items():
            self.health.set_channel(name, "stopping")
            await self._bounded(channel.stop_receiving(), f"{name} intake")
        self.app.loop.stop_taking()
        dispatcher.cancel()
        await asyncio.gather(dispatcher, return_exceptions=True)
        await self.app.stop_features(grace_s=left())  # a running Dream may finish, too
        await self.app.loop.close(grace_s=left())
        await _until(lambda: self._forced or not self._outboxes_busy(), max(1.0, left()))
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for name, channel in self.channels.items():
            await self._bounded(channel.stop(), name)
        await self._bounded(self.app.aclose(), "the model client")

    def _outboxes_busy(self) -> bool:
        return any(self.app.bus.outbound_depth().get(name) for name in self.channels)

    async def _bounded(self, step: Awaitable[None], what: str) -> None:
        limit_s = 1.0 if self._forced else STOP_CHANNEL_S
        try:
            await asyncio.wait_for(step, limit_s)
        except TimeoutError:
            logger.warning("gateway: {} did not stop within {:.0f} s", what, limit_s)
        except Exception:
            logger.exception("gateway: stopping {} failed", what)


def serve(gateway: Gateway, listening: Callable[[int], None] | None = None) -> int:
    """Run the gateway as its process's whole life (`nanomem gateway`): the exit code. The
    stop is bounded: work stuck in a worker thread (asyncio.to_thread cannot be cancelled)
    would keep the process alive for ever, since asyncio.run and the interpreter wait for
    every worker; the process leaves without it instead (`leave`)."""
    gateway.owns_process = True

    async def bounded() -> int:
        workers = ThreadPoolExecutor(thread_name_prefix=WORKERS)
        asyncio.get_running_loop().set_default_executor(workers)
        code = await gateway.run(listening)
        workers.shutdown(wait=False, cancel_futures=True)  # idle workers end at once
        for pool in POOLS:  # documents, MCP schemas, search: the same
            pool.shutdown()
        await _until(lambda: not _busy_workers(), THREADS_S)
        if stuck := _busy_workers():
            leave(code, f"{len(stuck)} worker thread(s) still busy after the stop")
        return code

    return asyncio.run(bounded())


def _busy_workers() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith(WORKERS) and t.is_alive()]


def finish(code: int) -> NoReturn:
    """End `nanomem gateway`'s process once the gateway and its claim are done: the
    interpreter's own exit (module teardown) runs with no signal handler, and a second signal
    during it would kill the process instead of ending it with 130."""
    logger.remove()  # closes the sinks: the log file is flushed
    with contextlib.suppress(Exception):
        sys.stdout.flush()
        sys.stderr.flush()
    os._exit(code)


def _stop_at_once(_signal: int, _frame: object) -> None:
    """A signal after the gateway stopped, while its process still ends (workers, the lock)."""
    with contextlib.suppress(RuntimeError):  # loguru refuses: the interrupted code was logging
        leave(130, "a signal while the process ends")
    os._exit(130)


def leave(code: int, why: str) -> NoReturn:
    """End the process now, with every process it started (shell commands, MCP servers) and
    its log written out; what was not answered stays in the inbox for the next start."""
    logger.warning("gateway: leaving now ({}); unanswered messages stay in the inbox", why)
    from nanomem.tools import kill_children

    with contextlib.suppress(Exception):
        kill_children()
    logger.remove()  # closes the sinks: the log file is flushed
    os._exit(code)


def _cannot_listen(host: str, port: int, exc: OSError) -> str:
    where = f"{host}:{port}"
    if exc.errno != errno.EADDRINUSE:
        change = "change gateway.host or gateway.port"
        return f"gateway: cannot listen on {where} ({exc.strerror}); {change}"
    # Not a gateway of this home: that one holds the home's lock, and this one would have
    # been refused with its pid. Moving this one to another port is safe, then.
    return (
        f"gateway: cannot listen on {where} ({exc.strerror}): another program, or a gateway of "
        f"another home, holds it (`ss -ltnp 'sport = :{port}'` shows which); stop that, or "
        "give this home another gateway.port"
    )


def _make_room_for(connections: int) -> None:
    """Enough file descriptors for the connection cap and the rest (files, the inbox, the
    model's and Telegram's connections): running out stops /health and every channel."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    needed = connections + FD_RESERVE
    if soft == resource.RLIM_INFINITY or soft >= needed:
        return
    if hard == resource.RLIM_INFINITY or hard >= needed:
        resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))
        return
    raise ConfigError(
        f"gateway.max_connections ({connections}) and the {FD_RESERVE} file descriptors the "
        f"gateway needs besides exceed this process's limit ({hard}, ulimit -n): lower "
        "gateway.max_connections or raise the limit"
    )


async def _until(done: Callable[[], bool], within_s: float) -> None:
    """Check `done` for up to `within_s`: the bus's queues offer nothing to await instead."""
    for _ in range(int(within_s / 0.05)):
        if done():
            return
        await asyncio.sleep(0.05)

"""The channel port: how a chat surface (terminal, Telegram) plugs into the core."""

from __future__ import annotations

import asyncio
import importlib
from collections import deque
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Protocol

from nanomem.agent.bus import MessageBus, OutboundMessage
from nanomem.audience import room_folder
from nanomem.durable import write_below

Job = Callable[[], Awaitable[None]]
# Channels are found by name, so the core never imports the `channels` package.
CHANNELS = {
    "terminal": "channels.terminal.channel:TerminalChannel",
    "telegram": "channels.telegram.channel:TelegramChannel",
    "api": "channels.api.channel:ApiChannel",
}


def _logger() -> Any:
    # This module is on `nanomem chat`'s path to its prompt, and only failures log here:
    # loguru (~25 ms to import) loads behind the prompt instead.
    from loguru import logger

    return logger


def media_folder(workspace: Path, session: str) -> Path:
    """Where a channel saves the files a chat sends: a group's own folder (the only one its
    turns may open, and no other chat's files are there), else the workspace's `media/`."""
    return (room_folder(workspace, session) or workspace) / "media"


def save_media(workspace: Path, session: str, name: str, data: bytes) -> str:
    """Save a file a chat sent into its media folder; its path relative to the workspace, as
    the turn is given it. Blocking. No link below the workspace is followed (OSError when one
    is in the way): a sandboxed command may have made `media` a link, and a name planted under
    the final one (a hard link to USER.md) is replaced, never written through."""
    root = workspace.resolve()
    relative = media_folder(root, session).relative_to(root) / name
    write_below(root, relative, data)
    return str(relative)


def load_channel(name: str) -> type[Any]:
    module_name, _, attr = CHANNELS[name].partition(":")
    return getattr(importlib.import_module(module_name), attr)


class Channel(Protocol):
    name: str

    async def start(self, bus: MessageBus) -> None:
        """Begin receiving messages and publishing them on the bus."""

    async def stop(self) -> None: ...

    async def send(self, msg: OutboundMessage) -> None:
        """Return once the message is delivered (or refused for good); raise DeliveryLater when
        it cannot be delivered now. Called concurrently: keep each chat's order yourself, in
        the order the calls were made (before the first await)."""

    # Optional, for channels with an allow-list that push messages nobody asked for (scheduled
    # turns): `admits(chat, sender) -> bool`, whether that sender there would be answered now.


class ChannelDown(Exception):
    """A channel cannot run right now (bad token, network down); the message is one line."""


class DeliveryLater(Exception):
    """A reply could not be delivered now (network down); it stays in the inbox and is sent
    again at the next start."""


class ChatQueues:
    """Jobs run one at a time per chat and concurrently across chats; idle chats cost nothing."""

    def __init__(self, label: str) -> None:
        self.label = label
        self._jobs: dict[str, deque[Job]] = {}
        self._workers: dict[str, asyncio.Task[None]] = {}

    def submit(self, chat: str, job: Job) -> None:
        jobs = self._jobs.setdefault(chat, deque())
        jobs.append(job)
        if chat not in self._workers:
            self._workers[chat] = asyncio.create_task(self._work(chat), name=f"{self.label}:{chat}")

    async def _work(self, chat: str) -> None:
        jobs = self._jobs[chat]
        try:
            while jobs:
                try:
                    await jobs.popleft()()
                except asyncio.CancelledError:
                    raise
                except Exception:
                    _logger().exception("{}: a job for chat {} failed", self.label, chat)
        finally:
            del self._jobs[chat], self._workers[chat]

    async def drain(self, within_s: float) -> bool:
        """Wait up to `within_s` seconds for every queued job; True when all of them ran."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + within_s
        while self._workers and (left := deadline - loop.time()) > 0:
            await asyncio.wait(set(self._workers.values()), timeout=left)
        return not self._workers

    async def cancel(self) -> None:
        workers = list(self._workers.values())
        for worker in workers:
            worker.cancel()
        await asyncio.gather(*workers, return_exceptions=True)


async def pump_outbound(channel: Channel, bus: MessageBus) -> None:
    """Deliver one channel's outbox forever, each send in its own task so that a chat that
    waits (a flood limit) never holds up another; a delivered reply leaves the inbox."""
    box = bus.outbox(channel.name)
    sending: set[asyncio.Task[None]] = set()
    try:
        while True:
            msg = await box.get()
            bus.sending(channel.name, +1)
            task = asyncio.create_task(_deliver(channel, bus, msg))
            sending.add(task)
            task.add_done_callback(sending.discard)
    finally:
        for task in sending:
            task.cancel()
        await asyncio.gather(*sending, return_exceptions=True)


async def _deliver(channel: Channel, bus: MessageBus, msg: OutboundMessage) -> None:
    try:
        await channel.send(msg)
        await bus.delivered(msg)
    except asyncio.CancelledError:
        raise
    except DeliveryLater as exc:
        _logger().warning(
            "{}: a reply to chat {} is kept for the next start: {}", channel.name, msg.chat_id, exc
        )
    except Exception:
        _logger().exception("{}: could not deliver a message to chat {}", channel.name, msg.chat_id)
    finally:
        bus.sending(channel.name, -1)

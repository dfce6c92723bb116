"""Slack's deliveries kept once: each stored in the inbox, in one step with the keys of the
newest ones (`slack.seen`), before it is acknowledged; a copy Slack sends again (a retry of an
envelope whose ack it missed, or the `message` and `app_mention` of one mention) is known by
those keys, even after a restart, and dropped. What was stored goes to the core from one task,
in the order it came, so the acknowledgement never waits for the core."""

from __future__ import annotations

import asyncio
import json
from collections import deque
from typing import Any, Literal

from loguru import logger

from nanomem.agent import InboundMessage, MessageBus
from nanomem.audience import Sender

SEEN = "slack.seen"  # the inbox's record of the newest deliveries' keys
SEEN_KEPT = 1000  # Slack retries within minutes: the newest thousand cover it
KEY_LIMIT = 100


class Intake:
    def __init__(self, bus: MessageBus, channel: str) -> None:
        self.bus, self.channel = bus, channel
        self._seen: deque[str] = deque(maxlen=SEEN_KEPT)
        self._known: set[str] = set()
        self._storing = asyncio.Lock()  # one write at a time: each carries the whole record
        self._queue: deque[InboundMessage] = deque()
        self._ready = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def load(self) -> None:
        stored = await self.bus.position(SEEN)
        try:
            keys = json.loads(stored) if stored else []
        except ValueError:
            keys = []
        for key in keys if isinstance(keys, list) else []:
            self._remember(str(key))

    def _remember(self, key: str) -> None:
        if len(self._seen) == self._seen.maxlen:
            self._known.discard(self._seen[0])
        self._seen.append(key)
        self._known.add(key)

    async def store(
        self, chat: str, keys: tuple[str, ...], payload: dict[str, Any], sender: Sender
    ) -> int | Literal[False] | None:
        """Its inbox number (None without an inbox); False for a copy already stored. Retried
        until stored: a full disk is waited out (Slack sends it again if this takes too long,
        and the copy is then known)."""
        keys = tuple(k[:KEY_LIMIT] for k in keys)
        async with self._storing:
            if any(key in self._known for key in keys):
                logger.debug("slack: {} came again; answered once", keys[0])
                return False
            record = json.dumps([*list(self._seen)[-(SEEN_KEPT - len(keys)) :], *keys])
            while True:
                try:
                    [seq] = await self.bus.receive(
                        self.channel, [(chat, payload, sender)], (SEEN, record)
                    )
                    break
                except Exception:
                    logger.exception("slack: could not store a message; retrying")
                    await asyncio.sleep(1.0)
            for key in keys:
                self._remember(key)
            return seq

    def hand_in(self, msg: InboundMessage) -> None:
        self._queue.append(msg)
        self._ready.set()

    def run(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._publish(), name="slack-intake")

    async def _publish(self) -> None:
        while True:
            await self._ready.wait()
            self._ready.clear()
            while self._queue:
                msg = self._queue.popleft()
                try:
                    await self.bus.publish_inbound(msg)
                except Exception:  # it stays in the inbox: answered at the next start
                    logger.exception("slack: could not hand in a message for {}", msg.chat_id)

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

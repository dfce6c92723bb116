"""Telegram by webhook: Telegram posts each update to the gateway's own HTTP server (through a
reverse proxy with TLS), and an update is answered 200 only once it is in the inbox.

The webhook stays set when the gateway stops: Telegram then holds the updates and posts them
again until one is answered (for about a day), and a program polling getUpdates with the same
token meanwhile is refused (409) instead of taking them. The gateway removes it when it next
starts in polling mode (deleteWebhook, pending updates kept)."""

from __future__ import annotations

import asyncio
import hmac
import json
import re
import time
from collections import deque
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from aiohttp import web
from loguru import logger

from channels.telegram.incoming import UNREADABLE_KEPT
from channels.telegram.transport import ALLOWED_UPDATES
from nanomem.agent import MessageBus
from nanomem.channel_settings import WEBHOOK_SECRET
from nanomem.config import ConfigError, TelegramSettings
from nanomem.durable import atomic_write_text
from nanomem.text import untrusted_json
from nanomem.text.masking import register_secrets, shown_url

WEBHOOK = "telegram.webhook"  # the inbox's record of the updates stored lately (their ids)
SECRET_HEADER = "X-Telegram-Bot-Api-Secret-Token"
MAX_BODY = 1024 * 1024  # an update is a few KiB; a text message at most about 100
BODY_S = 15.0  # the whole body, however it trickles in
PARSE_IN_THREAD_BYTES = 64 * 1024
SEEN_KEPT = 1000  # Telegram re-posts an update until it is answered: only the last few recur
CHECK_EVERY_S = 60.0  # getWebhookInfo, for /health and the log
# The update's id, found without parsing it (Telegram writes it first): an update nested too
# deeply is still stored, and parked, as polling does.
_FIRST_ID = re.compile(rb'\A\s*\{\s*"update_id"\s*:\s*(\d{1,18})\b')
Store = Callable[[list[Any], tuple[str, str]], Awaitable[None]]


def webhook_path(settings: TelegramSettings) -> str:
    """The path the gateway serves: webhook_url's; ConfigError with a sentence for the person
    when the settings cannot work."""
    if (problem := settings.webhook_problem()) is not None:
        raise ConfigError(problem)
    return urlsplit((settings.webhook_url or "").strip()).path


def webhook_secret(settings: TelegramSettings, kept: Path | None) -> str:
    """telegram.webhook_secret, or the one made at a first start and kept in `kept` (so a
    restart answers Telegram's retries, which carry the secret of the run before). Written
    by the gateway alone, which holds the home's `gateway` lock (gateway/claim.py). Blocking."""
    if settings.webhook_secret is not None:  # checked with the rest (webhook_problem)
        register_secrets([given := settings.webhook_secret.get_secret_value()])
        return given
    if kept is None:
        raise ConfigError("telegram.webhook_secret is not set, and there is no home to keep one")
    import secrets  # hmac and base64 under it: only webhook mode pays for it

    try:
        found = kept.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        found = ""
    if not WEBHOOK_SECRET.fullmatch(found):
        found = secrets.token_urlsafe(32)
        atomic_write_text(kept, found + "\n", mode=0o600)
    register_secrets([found])
    return found


def made_webhook(settings: TelegramSettings, files: tuple[Path, Path] | None) -> Webhook:
    """The webhook of these settings (ConfigError when they cannot work); `files`: where its
    secret is kept when none is set, and where Telegram's word on it is written. Blocking."""
    webhook_path(settings)  # a wrong address is told before a secret is made for it
    kept, state = files if files is not None else (None, None)
    return Webhook(settings, webhook_secret(settings, kept), state)


class Seen:
    """The ids of the updates stored lately, kept in the inbox with each one (one durable step):
    an update Telegram posts again, because our answer never reached it, is not stored twice."""

    def __init__(self, value: str | None) -> None:
        try:
            ids = [i for i in json.loads(value or "[]") if type(i) is int]
        except (ValueError, TypeError):
            ids = []
        self._ids: deque[int] = deque(ids[-SEEN_KEPT:], maxlen=SEEN_KEPT)
        self._set = set(self._ids)

    def __contains__(self, update_id: int) -> bool:
        return update_id in self._set

    def position_with(self, update_id: int) -> tuple[str, str]:
        """The record to store with this update."""
        ids = [*self._ids, update_id][-SEEN_KEPT:]
        return WEBHOOK, json.dumps(ids, separators=(",", ":"))

    def add(self, update_id: int) -> None:
        if len(self._ids) == self._ids.maxlen:
            self._set.discard(self._ids[0])
        self._ids.append(update_id)
        self._set.add(update_id)


def parsed(body: bytes) -> dict[str, Any] | None:
    """The update a body holds; one that cannot be read but names its id, as a stub that
    read_update refuses (stored and parked, as polling does); None for anything else."""
    try:
        item = untrusted_json.loads(body)
    except ValueError:  # nested too deeply, not JSON, not UTF-8
        if (found := _FIRST_ID.match(body)) is None:
            return None
        text = body[:UNREADABLE_KEPT].decode("utf-8", "replace")
        return {"update_id": int(found.group(1)), "unreadable": text}
    if not isinstance(item, dict) or type(item.get("update_id")) is not int:
        return None
    return item


class Webhook:
    """The route Telegram posts to, and the webhook's state at Telegram (setWebhook,
    getWebhookInfo)."""

    def __init__(self, settings: TelegramSettings, secret: str, state: Path | None) -> None:
        self.url = (settings.webhook_url or "").strip()
        self.path = webhook_path(settings)
        self._secret, self._state = secret, state
        self._store: Store | None = None
        self._seen = Seen(None)
        self._storing = asyncio.Lock()  # the record of stored ids is read, then written
        self._refused: set[str] = set()
        self.problem: str | None = None
        self._last_stored = 0.0  # when we opened, then when an update was last stored

    def routes(self, web_app: web.Application) -> None:
        web_app.router.add_post(self.path, self.handle)  # any other method: 405

    def listens(self, server: str) -> str:
        return f"webhook: Telegram posts to {shown_url(self.url)}, served at {server}{self.path}"

    async def set(self, bot: Any) -> None:
        """setWebhook: Telegram posts here from now on, what it holds first."""
        await bot.set_webhook(
            self.url,
            secret_token=self._secret,
            allowed_updates=list(ALLOWED_UPDATES),
            drop_pending_updates=False,
        )
        logger.info("telegram: webhook set to {}", shown_url(self.url))

    async def open(self, store: Store, bus: MessageBus | None) -> None:
        """Take what Telegram posts: `store` keeps each update in the inbox with the ids
        stored lately (the inbox's record of them, read here)."""
        position = await bus.position(WEBHOOK) if bus is not None else None
        self._seen, self._store = Seen(position), store
        self._last_stored = time.time()  # errors from before (we were down) are old news

    async def close(self) -> None:
        """Take no more posts (Telegram keeps them, and posts them to the next run); those
        being stored finish first."""
        self._store = None
        async with self._storing:
            pass

    async def handle(self, request: web.Request) -> web.Response:
        told = request.headers.get(SECRET_HEADER)
        if told is None or not _same(told, self._secret):
            return self._refuse(request, missing=told is None)
        if self._store is None:  # starting or stopping: Telegram posts it again
            return web.Response(status=503, headers={"Retry-After": "1"})
        if request.headers.get("Content-Encoding", "identity").lower() != "identity":
            return web.Response(status=415, text="send the update uncompressed")
        try:
            body = await _body(request)
        except TimeoutError:
            return web.Response(status=408, text=f"the body took longer than {BODY_S:g} s")
        if body is None:
            return web.Response(status=413, text=f"an update is at most {MAX_BODY} bytes")
        if len(body) > PARSE_IN_THREAD_BYTES:
            item = await asyncio.to_thread(parsed, body)
        else:
            item = parsed(body)
        if item is None:
            return web.Response(status=400, text="not a Telegram update")
        if not await self._take(item):  # stopped while it waited: posted again later
            return web.Response(status=503, headers={"Retry-After": "1"})
        return web.Response(status=200)  # an empty body: no method call in the answer

    async def _take(self, item: dict[str, Any]) -> bool:
        """Stored (a full disk is waited out: Telegram posts it again meanwhile, and finds
        it stored), or stored before; False when the channel stopped taking updates."""
        update_id = item["update_id"]
        async with self._storing:
            if (store := self._store) is None:
                return False
            if update_id in self._seen:  # stored before: our 200 never reached Telegram
                logger.info("telegram: update {} came again; it was stored already", update_id)
                return True
            await store([item], self._seen.position_with(update_id))
            self._seen.add(update_id)
            self._last_stored = time.time()
            return True

    def _refuse(self, request: web.Request, *, missing: bool) -> web.Response:
        """401 without the header, 403 with a wrong one; the source is named once (never
        what it sent)."""
        source = request.remote or "?"
        if source not in self._refused:
            if len(self._refused) >= 10_000:  # a flood of sources must not grow memory
                self._refused.clear()
            self._refused.add(source)
            forwarded = request.headers.get("X-Forwarded-For", "")[:64]
            via = f" (forwarded for {forwarded!r})" if forwarded else ""
            logger.warning(
                "telegram: refused a post to the webhook from {}{} {}; only Telegram knows "
                "the secret token",
                source,
                via,
                "without the secret token" if missing else "with a wrong secret token",
            )
        return web.Response(status=401 if missing else 403)

    async def check(self, bot: Any) -> None:
        """getWebhookInfo: set again when it is not ours (someone deleted or replaced it);
        Telegram's last delivery error is the problem while it is newer than our start and
        our last stored update, and updates wait."""
        info = await bot.get_webhook_info()
        if self._state is not None:
            await asyncio.to_thread(write_state, self._state, info)
        if info.url != self.url:
            logger.warning(
                "telegram: the webhook is {} at Telegram, not telegram.webhook_url; setting it "
                "again",
                shown_url(info.url) if info.url else "not set",
            )
            await self.set(bot)
            return
        problem = delivery_problem(info, self._last_stored)
        if problem != self.problem:
            if problem:
                logger.error(problem)
            elif self.problem:
                logger.info("telegram: Telegram delivers to the webhook again")
        self.problem = problem

    async def watch(self, bot: Callable[[], Any], every_s: float = CHECK_EVERY_S) -> None:
        """`check` at once, then now and then, for as long as the channel runs."""
        while True:
            if (current := bot()) is not None and self._store is not None:
                try:
                    await asyncio.wait_for(self.check(current), 10.0)
                except Exception as exc:  # the Bot API down: told where messages are sent
                    logger.debug("telegram: getWebhookInfo failed: {}", exc)
            await asyncio.sleep(every_s)


def write_state(path: Path, info: Any) -> None:
    """Telegram's word on the webhook, for `nanomem status` (never the secret: Telegram does
    not tell it). Blocking."""
    when = info.last_error_date
    state = {
        "v": 1,
        "checked_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "url": info.url,
        "pending_update_count": info.pending_update_count,
        "last_error_date": when.isoformat(timespec="seconds") if when is not None else None,
        "last_error_message": info.last_error_message,
    }
    atomic_write_text(path, json.dumps(state) + "\n")


def delivery_problem(info: Any, last_stored: float) -> str | None:
    """What Telegram says fails when it posts to us, while that is still so (an error newer
    than `last_stored`, with updates waiting); None otherwise."""
    error, when = info.last_error_message, info.last_error_date
    if not error or when is None or not info.pending_update_count:
        return None
    stamp = when.timestamp() if hasattr(when, "timestamp") else float(when)
    if stamp <= int(last_stored):  # Telegram tells whole seconds
        return None
    waiting = info.pending_update_count
    return f"telegram: Telegram cannot deliver to the webhook ({waiting} waiting): {error}"


async def unhook(bot: Any) -> None:
    """In polling mode: a webhook left by an earlier run (or another program) removed, its
    updates kept for getUpdates (which Telegram refuses while a webhook is set)."""
    info = await bot.get_webhook_info()
    if info.url:
        await bot.delete_webhook(drop_pending_updates=False)
        logger.info(
            "telegram: removed the webhook {} (telegram.mode is polling); its {} waiting "
            "updates come by getUpdates",
            shown_url(info.url),
            info.pending_update_count,
        )


def _same(told: str, secret: str) -> bool:
    """In constant time, whatever bytes the header holds."""
    return hmac.compare_digest(told.encode("utf-8", "surrogateescape"), secret.encode())


async def _body(request: web.Request) -> bytes | None:
    """The body, or None when it is longer than MAX_BODY (never read further); a body that
    trickles in for longer than BODY_S ends the request."""
    if request.content_length is not None and request.content_length > MAX_BODY:
        return None
    body = bytearray()
    async with asyncio.timeout(BODY_S):
        while piece := await request.content.readany():
            body += piece
            if len(body) > MAX_BODY:
                return None
    return bytes(body)

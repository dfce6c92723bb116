"""How the Discord channel reaches Discord: discord.py's gateway connection (heartbeats,
resuming, reconnecting) and its HTTP client (rate-limit buckets), with the raw events handed
to the channel as JSON. The only importer of discord.py."""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import Callable
from typing import Any

import aiohttp
import discord
from discord.http import Route

from nanomem.agent import Button, ChannelDown
from nanomem.text import untrusted_json

Take = Callable[[str, dict[str, Any]], None]
EVENTS = frozenset({"READY", "MESSAGE_CREATE", "INTERACTION_CREATE"})
STEP_S = 10.0  # the longest a start step may take
# A rate limit longer than this is not waited out inside a send: the reply is tried again
# later (DeliveryLater). discord.py's own floor for this setting.
LONGEST_WAIT_S = 30.0
TOKEN_REJECTED = "discord: the bot token was rejected (check discord.token)"
NO_INTENT = (
    "discord: the bot may not read messages: turn on the MESSAGE CONTENT intent "
    "(Developer Portal → your app → Bot → Privileged Gateway Intents)"
)


class SendError(Exception):
    """A REST call failed. `retry_after`: a rate limit's wait; `transient`: worth trying
    again (network, 5xx); otherwise refused for good (no access, unknown channel)."""

    def __init__(
        self,
        message: str,
        *,
        retry_after: float | None = None,
        transient: bool = False,
        status: int = 0,
    ) -> None:
        super().__init__(message)
        self.retry_after, self.transient, self.status = retry_after, transient, status


class _NoInteractionTokens(logging.Filter):
    """discord.py's warnings name the URL of a call it retries (a rate limit, a 5xx), and an
    interaction's URL carries its token, which answers it for 15 minutes: masked."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple):
            record.args = tuple(
                _TOKEN_IN_URL.sub(r"\1***", a) if isinstance(a, str) else a for a in record.args
            )
        return True


_TOKEN_IN_URL = re.compile(r"(/(?:webhooks|interactions)/\d+/)[^/?\s]+")
_MASKING = _NoInteractionTokens()


def point_at(api_base: str) -> None:
    """discord.py has no base-URL setting: its routes are built on the class attribute
    `Route.BASE` (webhooks and interactions too), set here before the client starts; the
    gateway's address then comes from `GET /gateway/bot` (AutoShardedClient asks for it)."""
    Route.BASE = api_base.rstrip("/")


class Gateway(discord.AutoShardedClient):
    """The connection: every READY, MESSAGE_CREATE and INTERACTION_CREATE goes to `take` as
    the raw event, in the order it came (each handler's first step runs in creation order,
    and `take` does not wait)."""

    def __init__(self, take: Take) -> None:
        # We never join voice: its missing libraries are not worth two warnings at each start.
        discord.VoiceClient.warn_nacl = discord.VoiceClient.warn_dave = False
        logging.getLogger("discord.http").addFilter(_MASKING)  # once: the same filter object
        intents = discord.Intents.none()
        intents.guilds = intents.guild_messages = intents.dm_messages = True
        intents.message_content = True
        super().__init__(
            intents=intents,
            enable_debug_events=True,  # the raw events: what the inbox stores
            allowed_mentions=discord.AllowedMentions.none(),
            max_messages=None,  # we keep what we need ourselves
            chunk_guilds_at_startup=False,
            member_cache_flags=discord.MemberCacheFlags.none(),
            max_ratelimit_timeout=LONGEST_WAIT_S,
        )
        self._take = take
        self.problem: str | None = None

    async def on_socket_raw_receive(self, raw: str) -> None:
        if not any(f'"{event}"' in raw for event in EVENTS):
            return  # most events (guild and presence updates) are not ours to read
        try:
            frame = untrusted_json.loads(raw)
        except ValueError:
            return
        if (
            isinstance(frame, dict)
            and frame.get("t") in EVENTS
            and isinstance(frame.get("d"), dict)
        ):
            self._take(frame["t"], frame["d"])

    async def sign_in(self, token: str) -> str:
        """Log in (GET /users/@me, the application); the bot's user id."""
        try:
            await asyncio.wait_for(self.login(token), STEP_S)
        except discord.LoginFailure:
            raise ChannelDown(TOKEN_REJECTED) from None
        except (discord.HTTPException, aiohttp.ClientError, OSError, TimeoutError) as exc:
            raise ChannelDown(f"discord: cannot reach Discord: {_said(exc)}") from None
        assert self.user is not None
        return str(self.user.id)

    async def run_connection(self) -> None:
        """Connected until stopped (discord.py resumes and reconnects by itself); what ended
        it for good becomes `problem`."""
        try:
            await self.connect(reconnect=True)
        except discord.PrivilegedIntentsRequired:
            self.problem = NO_INTENT
        except discord.LoginFailure:
            self.problem = TOKEN_REJECTED
        except Exception as exc:
            self.problem = f"discord: the gateway connection ended: {_said(exc)}"
        if self.problem:
            from loguru import logger

            logger.error(self.problem)

    @property
    def app_id(self) -> str:
        return str(self.application_id or "")

    # REST: each call raises SendError on failure.

    async def call(self, method: str, path: str, payload: Any = None, **params: Any) -> Any:
        kwargs = {"json": payload} if payload is not None else {}
        return await self._request(Route(method, path, **params), **kwargs)

    async def send(
        self, channel: str, payload: dict[str, Any], file: tuple[str, bytes] | None = None
    ) -> dict[str, Any]:
        """POST a message (with one file, as multipart); the message Discord made."""
        route = Route("POST", "/channels/{channel_id}/messages", channel_id=channel)
        if file is None:
            return await self._request(route, json=payload)
        name, data = file
        payload = payload | {"attachments": [{"id": 0, "filename": name}]}
        form = [
            {"name": "payload_json", "value": json.dumps(payload)},
            {
                "name": "files[0]",
                "value": data,
                "filename": name,
                "content_type": "application/octet-stream",
            },
        ]
        return await self._request(route, form=form)

    async def _request(self, route: Route, **kwargs: Any) -> Any:
        try:
            return await self.http.request(route, **kwargs)
        except discord.RateLimited as exc:
            raise SendError(
                f"rate limited for {exc.retry_after:.0f} s", retry_after=exc.retry_after
            ) from None
        except discord.HTTPException as exc:
            transient = exc.status >= 500 or exc.status == 429
            raise SendError(_said(exc), transient=transient, status=exc.status) from None
        except (aiohttp.ClientError, OSError, TimeoutError, RuntimeError) as exc:
            # RuntimeError: the client was closed (its connection is being made anew)
            raise SendError(_said(exc), transient=True) from None

    async def download(self, url: str, limit: int) -> bytes:
        """A file a person sent, read up to `limit` bytes (SendError beyond)."""
        timeout = aiohttp.ClientTimeout(total=120)
        try:
            async with aiohttp.ClientSession(timeout=timeout) as session, session.get(url) as got:
                if got.status != 200:
                    raise SendError(f"HTTP {got.status}", transient=got.status >= 500)
                data = await got.content.read(limit + 1)
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            raise SendError(_said(exc), transient=True) from None
        if len(data) > limit:
            raise SendError(f"larger than {limit} bytes")
        return data


def components(buttons: tuple[Button, ...]) -> list[dict[str, Any]]:
    """Buttons as Discord's action rows (five to a row, five rows): each sends its command
    as its custom_id."""
    shown = [
        {"type": 2, "style": 2 if n else 1, "label": b.label[:80], "custom_id": b.command[:100]}
        for n, b in enumerate(buttons[:25])
    ]
    return [{"type": 1, "components": shown[i : i + 5]} for i in range(0, len(shown), 5)]


def _said(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:300]

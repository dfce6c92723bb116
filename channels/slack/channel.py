"""The Slack channel: slack-bolt's asyncio app, over Socket Mode (no public address) or the
Events API on the gateway's own HTTP server (with channels/slack/web.py, the only other
importer of slack-sdk).

Bolt runs with `process_before_response`: a listener here stores what came in the inbox
(with the keys that tell a re-sent copy from it) and returns, and only then does bolt
acknowledge the envelope (or answer the HTTP request). The inbox write takes milliseconds, so
the acknowledgement still comes well within Slack's 3 seconds; the core gets the message
afterwards, from one intake task, in the order it came."""

from __future__ import annotations

import asyncio
import functools
import logging
import re
import time
from collections.abc import Collection
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from loguru import logger
from slack_bolt.adapter.socket_mode.aiohttp import AsyncSocketModeHandler
from slack_bolt.adapter.socket_mode.async_internals import run_async_bolt_app, send_async_response
from slack_bolt.async_app import AsyncApp
from slack_bolt.response import BoltResponse
from slack_sdk.socket_mode.request import SocketModeRequest

from channels.slack import events
from channels.slack.delivery import Delivery
from channels.slack.events import COMMAND, REFUSED_PRESS, Incoming
from channels.slack.intake import Intake
from channels.slack.web import (
    SendError,
    call,
    download,
    drop_connections,
    keep_connections,
    web_client,
)
from nanomem.agent import (
    BaseChannel,
    Capabilities,
    ChannelDown,
    InboundMessage,
    MessageBus,
    OutboundMessage,
    Pending,
    Text,
    parse_command,
    prepared,
    save_media,
)
from nanomem.audience import Sender
from nanomem.config import ConfigError, SlackSettings
from nanomem.log import register_secrets
from nanomem.text.masking import shown_url
from nanomem.text.mrkdwn import mrkdwn_length
from nanomem.text.utf8 import clean_text

if TYPE_CHECKING:
    from aiohttp import web

    from nanomem.app import App

EVENTS_PATH = "/slack/events"  # where the Events API posts, in http mode
NO_TOKEN = "slack.bot_token is not set: create the app (docs/slack.md), then set slack.bot_token"
NO_APP_TOKEN = "slack.app_token (xapp-…) is not set: Socket Mode needs it (docs/slack.md)"
NO_SECRET = "slack.signing_secret is not set: the Events API over HTTP needs it (docs/slack.md)"
TOO_BIG = "That file is {size:.1f} MB; I accept up to {limit} MB (slack.max_file_mb)."
NO_DOWNLOAD = "I could not download that file; please send it again."
OWNER_PRESS = "Only the owner can make this choice."
STEP_S = 10.0
WATCH_S = 1.0  # how often the Socket Mode connection is looked at


class SlackChannel(BaseChannel):
    name = "slack"

    def __init__(
        self,
        settings: SlackSettings,
        *,
        workspace: Path,
        commands: Collection[str] = (),
        owner_only: Collection[str] = (),
        stream_every_s: float = 1.2,
    ) -> None:
        token = settings.bot_token.get_secret_value() if settings.bot_token else ""
        app_token = settings.app_token.get_secret_value() if settings.app_token else ""
        secret = settings.signing_secret.get_secret_value() if settings.signing_secret else ""
        if not token:
            raise ConfigError(NO_TOKEN)
        if settings.mode == "socket" and not app_token:
            raise ConfigError(NO_APP_TOKEN)
        if settings.mode == "http" and not secret:
            raise ConfigError(NO_SECRET)
        register_secrets([s for s in (token, app_token, secret) if s])
        self.settings, self.workspace, self._commands = settings, workspace, set(commands)
        self._owner_only = set(owner_only)  # a press of one by anyone else is refused at once
        self._token, self._app_token = token, app_token
        self.client = web_client(token, settings.api_base)
        self._shared: dict[str, bool] = {}  # conversation → shared, as Slack said
        self.delivery = Delivery(
            self.client, workspace, streams_in=self._streams_in, stream_every_s=stream_every_s
        )
        streams = settings.stream or settings.stream_groups
        self.capabilities = Capabilities(
            streams=streams,
            edits=True,
            buttons=True,
            files=True,
            markup="markdown",  # rendered into mrkdwn here (nanomem/text/mrkdwn.py)
            max_chars=3900,  # Slack advises under 4,000 characters a message
            measure=mrkdwn_length,
            pushes=True,
            reaches_owner=settings.owner is not None,
            turns=True,  # which reply grows for which message (agent/chat_turns.py)
        )
        quiet = logging.getLogger("nanomem.slack")  # bolt's own log: warnings only
        for name in ("nanomem.slack", "slack_bolt", "slack_sdk"):
            logging.getLogger(name).setLevel(logging.WARNING)
        self.app = AsyncApp(
            client=self.client,
            signing_secret=secret or "unused-in-socket-mode",
            process_before_response=True,  # the inbox write, then the ack
            logger=quiet,
        )
        self.app.event("message")(self._on_event)
        self.app.event("app_mention")(self._on_event)
        self.app.command(COMMAND)(self._on_command)
        self.app.action(re.compile(r"nanomem-\d+"))(self._on_press)
        self._bus: MessageBus | None = None
        self._intake: Intake | None = None
        self._socket: AsyncSocketModeHandler | None = None
        self.bot_user = ""
        self._refused: set[str] = set()
        self._owner_dm: str | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._down_since: float | None = None  # the Socket Mode connection lost (monotonic)
        self._watch: asyncio.Task[None] | None = None

    @classmethod
    def from_app(cls, app: App) -> SlackChannel:
        commands = app.loop.commands.all()
        names, owner_only = {c.name for c in commands}, {c.name for c in commands if c.owner_only}
        return cls(
            app.settings.slack, workspace=app.workspace, commands=names, owner_only=owner_only
        )

    def listens(self, server: str) -> str:
        if self.settings.mode == "http":
            return f"Slack's Events API at {server}{EVENTS_PATH} (signed requests only)"
        return f"Slack by Socket Mode through {shown_url(self.settings.api_base)}"

    def routes(self, web_app: web.Application) -> None:
        if self.settings.mode == "http":
            web_app.router.add_post(EVENTS_PATH, self._http)

    # Lifecycle.

    async def start(self, bus: MessageBus) -> None:
        self._bus = bus
        if not self.settings.allow_from and self.settings.owner is None:
            logger.warning(
                "slack.allow_from is empty and slack.owner is not set: every message is refused,"
                " and the log names each refused member id to add"
            )
        keep_connections(self.client)
        try:
            me = await call(self.client, "auth.test")
        except SendError as exc:
            await drop_connections(self.client)
            raise ChannelDown(f"slack: the bot token was not accepted ({exc})") from None
        self.bot_user = self.delivery.bot_user = str(me.get("user_id", ""))
        self._intake = Intake(bus, self.name)
        await self._intake.load()
        await self.delivery.load(bus)
        await self._replay()
        self._intake.run()
        if self.settings.mode == "socket":
            # slack-sdk logs each failed reconnection with a traceback: /health and one line
            # here say it instead (_watch_socket).
            socket_log = logging.getLogger("nanomem.slack.socket")
            socket_log.setLevel(logging.CRITICAL)
            self._socket = _Acking(self.app, self._app_token, logger=socket_log)
            try:
                await asyncio.wait_for(self._socket.connect_async(), STEP_S * 3)
            except Exception as exc:
                await self._close_socket()
                await drop_connections(self.client)
                raise ChannelDown(f"slack: Socket Mode could not connect: {exc}") from None
            self._watch = asyncio.create_task(self._watch_socket(), name="slack-watch")
        logger.info("slack: connected as {} ({} mode)", self.bot_user, self.settings.mode)

    async def stop_receiving(self) -> None:
        watch, self._watch = self._watch, None
        if watch is not None:
            watch.cancel()
            await asyncio.gather(watch, return_exceptions=True)
        await self._close_socket()
        if self._intake is not None:
            await self._intake.stop()

    async def stop(self) -> None:
        await self.stop_receiving()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await drop_connections(self.client)

    async def _close_socket(self) -> None:
        socket, self._socket = self._socket, None
        if socket is not None:
            try:
                await asyncio.wait_for(socket.close_async(), STEP_S)
            except Exception as exc:
                logger.debug("slack: closing Socket Mode failed: {}", exc)

    async def _watch_socket(self) -> None:
        """slack-sdk reconnects by itself; this only notes how long it has been without a
        connection, for /health (`problem`), and says so once in the log."""
        told = False
        while (socket := self._socket) is not None:
            if await socket.client.is_connected():
                if told:
                    logger.info("slack: Socket Mode connected again")
                self._down_since, told = None, False
            elif self._down_since is None:
                self._down_since = time.monotonic()
            elif not told and (problem := self.problem()) is not None:
                logger.warning("{}", problem)
                told = True
            await asyncio.sleep(WATCH_S)

    def problem(self) -> str | None:
        down = self._down_since
        if down is None or time.monotonic() - down < self.settings.down_after_s:
            return None
        return (
            f"slack: no Socket Mode connection for {time.monotonic() - down:.0f} s (reconnecting)"
        )

    def owner_chat(self) -> str | None:
        """The owner's DM with the app: its id once they wrote there, else their member id
        (chat.postMessage to a member id posts to that DM)."""
        owner = self.settings.owner
        return None if owner is None else self._owner_dm or owner

    def admits(self, chat: str, sender: str) -> bool:
        return self._allowed(sender)

    def _allowed(self, user: str) -> bool:
        allow = self.settings.allow_from
        return user == self.settings.owner or "*" in allow or user in allow

    def _streams_in(self, chat: str) -> bool:
        shared = self._shared.get(events.target(chat)[0], True)
        return self.settings.stream_groups if shared else self.settings.stream

    # Inbound: bolt's listeners store, then return (bolt acks).

    async def _http(self, request: web.Request) -> web.StreamResponse:
        from aiohttp import web
        from slack_bolt.adapter.aiohttp import to_aiohttp_response, to_bolt_request

        try:
            asked = await to_bolt_request(request)
        except (RecursionError, ValueError):  # bolt reads the body before the signature
            return web.Response(status=400, text="not a request from Slack")
        answer = await self.app.async_dispatch(asked)
        return await to_aiohttp_response(answer)

    async def _on_event(self, body: dict[str, Any]) -> None:
        found = events.read_event(body, self.bot_user)
        if found is None or not self._admitted(found, None):
            return
        if not events.names_type(body):
            found = replace(found, shared=await self._is_shared(found.channel))
        self._shared.setdefault(found.channel, found.shared)
        if found.shared and not events.is_mention(body):
            wanted = self.settings.group_policy == "open"
            if not wanted and not events.addressed(found.text, self.bot_user):
                return
        await self._store(found)

    async def _on_command(self, body: dict[str, Any], ack: Any) -> None:
        found = events.read_command(body)
        if found is not None and self._admitted(found, None):
            found = replace(found, shared=await self._is_shared(found.channel))
            await self._store(found)
        await ack()

    async def _on_press(self, body: dict[str, Any], ack: Any) -> None:
        found = events.read_press(body)
        if found is not None and not events.fair_press(found):
            logger.warning("slack: refused a forged button press by {}", found.user)
            found = None
        if found is not None and self._admitted(found, body):
            if not self._may_press(found):
                self._spawn(self._whisper(found.channel, found.user, OWNER_PRESS))
                await ack()
                return
            found = replace(found, shared=await self._is_shared(found.channel))
            await self._store(found)
        await ack()

    def _may_press(self, found: Incoming) -> bool:
        """An owner's choice (an approval, a memory decision) is the owner's to press: anyone
        else is told so privately, at once, and nothing reaches the chat."""
        parsed = parse_command(found.text)
        owner_only = parsed is not None and parsed[0] in self._owner_only
        return not owner_only or found.user == self.settings.owner

    def _admitted(self, found: Incoming, press: dict[str, Any] | None) -> bool:
        """Strangers are refused silently and named once in the log; a stranger's press gets
        a refusal only they see (Slack shows the press as failed otherwise)."""
        if self._allowed(found.user):
            return True
        if press is not None:
            self._spawn(self._whisper(found.channel, found.user, REFUSED_PRESS))
        if found.user not in self._refused:
            if len(self._refused) >= 10_000:  # a flood of strangers must not grow memory
                self._refused.clear()
            self._refused.add(found.user)
            logger.warning("refused Slack member {}; add it to slack.allow_from", found.user)
        return False

    async def _is_shared(self, channel: str) -> bool:
        """Whether a conversation has more people than the owner and the app: what Slack said
        of its type (an event's channel_type), else asked of it (conversations.info), never
        read from its name (anyone may name a channel "directmessage", as Slack names a DM in
        a command); shared when it cannot be told, so a personal memory never reaches a room
        by mistake."""
        if (known := self._shared.get(channel)) is not None:
            return known
        try:
            info = await call(self.client, "conversations.info", channel=channel)
        except SendError as exc:
            logger.debug("slack: conversations.info {} failed: {}", channel, exc)
            return True
        shared = self._shared[channel] = events.shared_from_info(info.get("channel") or {})
        return shared

    async def _store(self, found: Incoming) -> None:
        assert self._intake is not None
        sender = self._sender(found)
        found = replace(found, sender=sender)
        if not found.shared and sender.is_owner and found.kind == "event":
            self._owner_dm = found.channel
        stored = events.stored_form(found)
        seq = await self._intake.store(found.chat, found.keys, stored, sender)
        if seq is not False:
            self._intake.hand_in(self._message(replace(found, seq=seq)))

    def _sender(self, found: Incoming) -> Sender:
        return Sender(
            found.user,
            found.name or found.user,
            is_owner=found.user == self.settings.owner,
            can_answer=True,
            shared_room=found.shared,
        )

    async def _replay(self) -> None:
        assert self._bus is not None and self._intake is not None
        left = await self._bus.unfinished(self.name)
        if left:
            logger.info("slack: {} message(s) from before the restart answered now", len(left))
        for pending in left:
            await self._hand_in(pending, retry=False)

    async def readmit(self, pending: Pending) -> bool:
        if self._intake is None:
            return False
        await self._hand_in(pending, retry=True)
        self._intake.run()
        return True

    async def _hand_in(self, pending: Pending, *, retry: bool) -> None:
        assert self._bus is not None and self._intake is not None
        found = events.from_stored(pending.payload)
        if found is None or not self._allowed(found.user):
            await self._bus.forget(pending.seq)
            return
        sender = pending.vouched(self._sender(found))
        found = replace(found, sender=sender, shared=sender.shared_room, seq=pending.seq)
        self._shared.setdefault(found.channel, found.shared)
        msg = self._message(replace(found, replayed=True, retry=retry))
        self._intake.hand_in(msg)

    def _message(self, found: Incoming) -> InboundMessage:
        text = clean_text(found.text)
        if found.shared:
            text = events.without_mention(text, self.bot_user)
        pressed = found.kind == "press"
        inbound = InboundMessage(self.name, found.chat, text, found.sender, (), pressed)
        inbound = replace(inbound, prepare=functools.partial(self._prepare, found))
        if found.seq is not None:
            inbound = replace(
                inbound, id=InboundMessage.inbox_id(found.seq), seq=found.seq,
                replayed=found.replayed,
            )  # fmt: skip
        return inbound

    async def _prepare(self, found: Incoming, msg: InboundMessage) -> InboundMessage | None:
        """In the chat's order, just before the turn: a press's buttons cleared, files
        fetched. None when the channel answered it itself or it failed (kept for a retry)."""
        assert self._bus is not None
        return await prepared(self._bus, msg, self._inbound(found, msg))

    async def _inbound(self, found: Incoming, msg: InboundMessage) -> InboundMessage | str | None:
        assert self._bus is not None
        if found.kind == "press" and not found.shared and found.pressed_ts:
            shown = "\n\n".join(filter(None, [found.pressed_text, f"✓ {found.text}"]))
            await self.delivery.clear_buttons(found.chat, found.pressed_ts, shown)
        limit = self.settings.max_file_mb * 2**20
        for file in found.files:
            if (size := file.get("size")) and isinstance(size, int) and size > limit:
                return TOO_BIG.format(size=size / 2**20, limit=self.settings.max_file_mb)
        media, labels = [], []
        for file in found.files:
            try:
                media.append(await self._download(file, limit, found.chat, msg.sender.shared_room))
            except (OSError, ValueError) as exc:
                logger.warning("slack: downloading a file from {} failed: {}", found.chat, exc)
                return NO_DOWNLOAD
            labels.append(events.file_label(file))
        text = "\n".join(filter(None, [*labels, msg.content]))
        if not text:
            await self._bus.forget(found.seq)
            return None
        return replace(msg, content=text, media=tuple(media))

    async def _download(self, file: dict[str, Any], limit: int, chat: str, room: bool) -> str:
        url = file.get("url_private_download") or file.get("url_private")
        if not isinstance(url, str) or not self._slack_url(url):
            raise OSError("the file has no Slack address")
        data = await download(self._token, url, limit)
        name = file.get("name") if isinstance(file.get("name"), str) else ""
        suffix = Path(str(name)).suffix.lower()
        suffix = suffix if re.fullmatch(r"\.[a-z0-9]{1,8}", suffix) else ""
        file_id = re.sub(r"[^A-Za-z0-9]", "", str(file.get("id", "")))[:40] or "file"
        saved = f"slack-{file_id}{suffix}"
        return await asyncio.to_thread(
            save_media, self.workspace, f"{self.name}:{chat}", saved, data, room
        )

    def _slack_url(self, url: str) -> bool:
        """The bot token goes only to Slack's own file host (or the API's, for a test server)."""
        host = urlsplit(url).hostname or ""
        return host == "files.slack.com" or host == urlsplit(self.settings.api_base).hostname

    # Outbound: one chat at a time, in order, from the core.

    async def send(self, msg: OutboundMessage) -> None:
        part = msg.part
        if isinstance(part, Text) and part.command:  # /help and the like: as a person types it
            spelled = events.in_slack_spelling(part.text, self._commands)
            msg = replace(msg, part=replace(part, text=spelled))
        await self.delivery.send(msg)

    async def _whisper(self, channel: str, user: str, text: str) -> None:
        try:
            await call(self.client, "chat.postEphemeral", channel=channel, user=user, text=text)
        except SendError as exc:
            logger.debug("slack: could not refuse a press in {}: {}", channel, exc)

    def _spawn(self, work: Any) -> None:
        task = asyncio.create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)


class _Acking(AsyncSocketModeHandler):
    """Bolt's Socket Mode handler, acknowledging every envelope once bolt is done with it:
    bolt leaves one it has no listener for (or cannot read) unacknowledged, and Slack would
    send it again and again. What we keep is stored before this (a store is retried until it
    is done); only a process that dies first leaves an envelope for Slack to send again."""

    async def handle(self, client: Any, req: SocketModeRequest) -> None:
        started = time.time()
        try:
            answer = await run_async_bolt_app(self.app, req)
        except Exception:
            logger.exception("slack: an envelope of type {} failed", req.type)
            answer = BoltResponse(status=500)
        if answer.status != 200:
            answer = BoltResponse(status=200, body="")
        await send_async_response(client, req, answer, started)

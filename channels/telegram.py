"""The Telegram channel: python-telegram-bot long polling in our own loop (its only importer)."""

from __future__ import annotations

import asyncio
import re
import warnings
from collections.abc import Awaitable
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from loguru import logger
from telegram import BotCommand, Message, ReplyParameters, Update, User
from telegram.constants import ChatAction, ChatType, ParseMode
from telegram.error import (
    BadRequest,
    Conflict,
    InvalidToken,
    NetworkError,
    RetryAfter,
    TelegramError,
)
from telegram.ext import Application, ApplicationBuilder, ContextTypes, TypeHandler
from telegram.request import HTTPXRequest

from channels.telegram_chat import (
    TOKEN_REJECTED,
    Delivery,
    PollWatch,
    SendError,
    command_menu,
    is_allowed,
    mentions,
    strip_mention,
    target,
)
from nanomem.bus import InboundMessage, MessageBus, OutboundMessage
from nanomem.channel import ChannelDown, ChatQueues
from nanomem.commands import Command, parse_command
from nanomem.config import ConfigError, TelegramSettings
from nanomem.log import register_secrets

if TYPE_CHECKING:
    from nanomem.app import App

T = TypeVar("T")
PTBApp = Application[Any, Any, Any, Any, Any, Any]
NOT_FOUND = "telegram: the Bot API answered 404 (check telegram.token and telegram.base_url)"
NO_TOKEN = "telegram.token is not set: create a bot with @BotFather, then set telegram.token"
GREETING = "Hi {name}! Write to me and I will answer. /help lists the commands."
TOO_BIG = "That file is {size:.1f} MB; I accept up to {limit} MB (telegram.max_file_mb)."
NO_DOWNLOAD = "I could not download that file; please send it again."
UNSUPPORTED = "I can read text, photos, documents, voice notes and audio, not this kind of message."
STEP_S = 10.0  # the longest any one start or stop step may take
_SUFFIX = re.compile(r"\.[a-z0-9]{1,8}")
_COMMAND = re.compile(r"/([A-Za-z0-9_-]+)(?:@(\w+))?")


class _PollRequest(HTTPXRequest):
    """The getUpdates connection: tells the watch when each poll ends, and with which status."""

    def __init__(self, watch: PollWatch, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.watch = watch

    async def do_request(self, *args: Any, **kwargs: Any) -> tuple[int, bytes]:
        status = None
        try:
            status, body = await super().do_request(*args, **kwargs)
        finally:
            self.watch.finished(status)
        return status, body


def _down(exc: BaseException) -> ChannelDown | None:
    """The one line to report when the Bot API cannot be used; None for other errors."""
    if isinstance(exc, InvalidToken):
        return ChannelDown(NOT_FOUND if "not found" in str(exc).lower() else TOKEN_REJECTED)
    if isinstance(exc, TelegramError | TimeoutError | OSError):
        return ChannelDown(f"telegram: cannot reach the Bot API: {exc}")
    return None


def chat_key(message: Message) -> str:
    """`<chat_id>`, or `<chat_id>:<thread_id>` in a forum topic."""
    if message.is_topic_message and message.message_thread_id:
        return f"{message.chat_id}:{message.message_thread_id}"
    return str(message.chat_id)


def is_addressed(message: Message, bot: User, our_commands: set[str]) -> bool:
    """In a group: a reply to the bot, an @mention of it, or one of our commands."""
    reply = message.reply_to_message
    if reply is not None and reply.from_user is not None and reply.from_user.id == bot.id:
        return True
    text, username = message.text or message.caption or "", (bot.username or "").lower()
    if mentions(text, username):
        return True
    if (command := _COMMAND.match(text)) is None:
        return False
    name, addressee = command.group(1).lower(), (command.group(2) or "").lower()
    return addressee == username or (not addressee and name.replace("_", "-") in our_commands)


def _attachment(message: Message) -> tuple[str, Any, str, str] | None:
    """(what it is, the Telegram file object, file suffix, original name) of a message's file."""
    if message.photo:
        return "photo", message.photo[-1], ".jpg", ""
    for kind, media, default in (
        ("document", message.document, ""),
        ("voice note", message.voice, ".oga"),
        ("audio", message.audio, ".mp3"),
        ("video", message.video, ".mp4"),
        ("video note", message.video_note, ".mp4"),
    ):
        if media is not None:
            name = getattr(media, "file_name", None) or ""
            suffix = Path(name).suffix.lower()
            return kind, media, suffix if _SUFFIX.fullmatch(suffix) else default, name
    return None


async def _api(call: Awaitable[T]) -> T:
    """Run one Bot API call, turning PTB's errors into SendError."""
    try:
        return await call
    except RetryAfter as exc:
        with warnings.catch_warnings():  # PTB warns that retry_after becomes a timedelta
            warnings.simplefilter("ignore")
            after = exc.retry_after
        seconds = after.total_seconds() if isinstance(after, timedelta) else float(after)
        raise SendError(str(exc), retry_after=seconds) from exc
    except BadRequest as exc:
        bad_html = "can't parse entities" in exc.message.lower()
        raise SendError(exc.message, bad_html=bad_html) from exc
    except NetworkError as exc:  # timeouts, connection errors and 5xx
        raise SendError(str(exc), transient=True) from exc
    except TelegramError as exc:
        raise SendError(str(exc)) from exc


class TelegramChannel:
    name = "telegram"

    def __init__(
        self,
        settings: TelegramSettings,
        *,
        workspace: Path,
        commands: list[Command],
        poll_timeout_s: float = 30.0,
        typing_every_s: float = 4.0,
        status_every_s: float = 3.0,
        watch_every_s: float = 1.0,
    ) -> None:
        token = settings.token.get_secret_value() if settings.token else ""
        if not token:
            raise ConfigError(NO_TOKEN)
        register_secrets([token])  # PTB errors and file URLs carry the token
        self.settings, self.workspace, self._token = settings, workspace, token
        self._commands = commands
        self._our_commands = {c.name for c in commands} | {"start"}
        self.poll_timeout_s, self.watch_every_s = poll_timeout_s, watch_every_s
        # A poll lasts its own timeout plus the read timeout; allow some slack on top.
        self._poll = PollWatch(stall_after_s=poll_timeout_s + 35.0)
        self._poll_request = _PollRequest(self._poll, proxy=settings.proxy, connection_pool_size=1)
        self._app: PTBApp | None = None
        self._bus: MessageBus | None = None
        self._watchdog: asyncio.Task[None] | None = None
        self._intake = ChatQueues("telegram-in")
        self.delivery = Delivery(self, typing_every_s=typing_every_s, status_every_s=status_every_s)
        self._refused: set[int] = set()

    @classmethod
    def from_app(cls, app: App) -> TelegramChannel:
        return cls(app.settings.telegram, workspace=app.workspace, commands=app.loop.commands.all())

    # Lifecycle.

    async def start(self, bus: MessageBus) -> None:
        self._bus = bus
        if not self.settings.allow_from:
            logger.warning(
                "telegram.allow_from is empty: every message is refused, and the log names "
                "each refused user id to add"
            )
        await self._launch()
        watch = self._poll.run(self._relaunch, self.watch_every_s)
        self._watchdog = asyncio.create_task(watch, name="telegram-watchdog")

    async def _launch(self) -> None:
        """A fresh PTB Application, polling; ChannelDown when the Bot API cannot be used."""
        app = self._build()
        try:
            await asyncio.wait_for(app.initialize(), STEP_S)
            await self._register_commands(app)
            await app.start()
            assert app.updater is not None
            self._poll.reset()
            polling = app.updater.start_polling(
                timeout=timedelta(seconds=self.poll_timeout_s),
                allowed_updates=["message"],
                error_callback=self._on_poll_error,
            )
            await asyncio.wait_for(polling, STEP_S)
        except BaseException as exc:
            await self._teardown(app)
            if (down := _down(exc)) is not None:
                raise down from None
            raise
        self._app, self._poll.problem = app, None
        logger.info("telegram: polling as @{}", app.bot.username)

    async def _relaunch(self) -> None:
        # A whole new Application: after its polling task died, PTB's Updater cannot be
        # stopped and started again cleanly (its stop event stays set).
        if (old := self._app) is not None:
            self._app = None
            await self._teardown(old)
        await self._launch()

    def _build(self) -> PTBApp:
        builder = (
            ApplicationBuilder()
            .token(self._token)
            .base_url(self.settings.base_url)
            .base_file_url(self.settings.base_file_url)
            .get_updates_request(self._poll_request)
            .connection_pool_size(64)
            .pool_timeout(10.0)
            .job_queue(None)
        )
        if self.settings.proxy:
            builder = builder.proxy(self.settings.proxy)
        app = builder.build()
        app.add_handler(TypeHandler(Update, self._on_update))
        app.add_error_handler(self._on_error)
        return app

    async def _register_commands(self, app: PTBApp) -> None:
        menu = [BotCommand(name, about) for name, about in command_menu(self._commands)]
        try:
            await asyncio.wait_for(app.bot.set_my_commands(menu), STEP_S)
        except (TelegramError, TimeoutError) as exc:
            logger.warning("telegram: could not register the command menu: {}", exc)

    async def stop_receiving(self) -> None:
        if self._watchdog is not None:
            self._watchdog.cancel()
        if (app := self._app) is None:
            return
        if app.updater is not None and app.updater.running:
            await _quietly(app.updater.stop(), "stop polling")
        for _ in range(int(STEP_S / 0.02)):  # updates PTB fetched are still handed over
            if app.update_queue.empty():
                break
            await asyncio.sleep(0.02)
        await self._intake.drain(STEP_S)

    async def stop(self) -> None:
        await self.stop_receiving()
        await self._intake.cancel()
        await self.delivery.close(STEP_S)
        if (app := self._app) is not None:
            self._app = None
            await self._teardown(app)

    async def _teardown(self, app: PTBApp) -> None:
        if app.updater is not None and app.updater.running:
            await _quietly(app.updater.stop(), "stop polling")
        if app.running:
            await _quietly(app.stop(), "stop")
        await _quietly(app.shutdown(), "shut down")

    def problem(self) -> str | None:
        return self._poll.problem

    def _on_poll_error(self, exc: TelegramError) -> None:
        text = str(exc)
        if isinstance(exc, Conflict):
            text = "another program is polling with this bot token (only one may)"
        if text != self._poll.error:
            logger.warning("telegram: polling failed: {}", text)
        self._poll.error = text

    async def _on_error(self, update: object, context: ContextTypes.DEFAULT_TYPE) -> None:
        logger.opt(exception=context.error).error("telegram: handling an update failed")

    # Inbound: filter at once, then one intake worker per chat (media downloads keep order).

    async def _on_update(self, update: Update, _: ContextTypes.DEFAULT_TYPE) -> None:
        message, user = update.message, update.effective_user
        if message is None or user is None or user.is_bot:
            return
        if not is_allowed(self.settings.allow_from, user.id, message.chat_id):
            if user.id not in self._refused:  # refused silently: no reply, typing or reaction
                if len(self._refused) >= 10_000:  # a flood of strangers must not grow memory
                    self._refused.clear()
                self._refused.add(user.id)
                name = f"@{user.username}" if user.username else user.full_name
                logger.warning(
                    "refused Telegram user {} ({}); add it to telegram.allow_from", user.id, name
                )
            return
        group = message.chat.type in (ChatType.GROUP, ChatType.SUPERGROUP)
        mention_only = group and self.settings.group_policy == "mention"
        if mention_only and not is_addressed(message, message.get_bot().bot, self._our_commands):
            return
        key = chat_key(message)
        self._intake.submit(key, lambda: self._accept(message, user, key, group))

    async def _accept(self, message: Message, user: User, key: str, group: bool) -> None:
        text = message.text or message.caption or ""
        text = strip_mention(text, message.get_bot().username) if group else text
        parsed = parse_command(text)
        command = parsed[0] if parsed else None
        if command == "start":
            self.delivery.notify(key, GREETING.format(name=user.first_name))
            return
        media: tuple[str, ...] = ()
        if (found := _attachment(message)) is not None:
            kind, item, suffix, file_name = found
            if (size := item.file_size or 0) > self.settings.max_file_mb * 2**20:
                limit = self.settings.max_file_mb
                self.delivery.notify(key, TOO_BIG.format(size=size / 2**20, limit=limit))
                return
            try:
                media = (await self._download(item, suffix),)
            except (TelegramError, OSError) as exc:
                logger.warning("telegram: downloading a {} from {} failed: {}", kind, key, exc)
                self.delivery.notify(key, NO_DOWNLOAD)
                return
            label = f"[{kind}: {file_name}]" if file_name else f"[{kind}]"
            text = "\n".join(filter(None, [label, text]))
        elif not text:
            if not group:  # stickers and the like; in a group nobody asked us
                self.delivery.notify(key, UNSUPPORTED)
            return
        metadata: dict[str, Any] = {"message_id": message.message_id}
        if group:
            handle = f" (@{user.username})" if user.username else ""
            metadata["sender_name"] = f"{user.full_name}{handle}"
        inbound = InboundMessage(self.name, key, text, str(user.id), media, metadata)
        self.delivery.accepted(key, inbound.id, message.message_id, command)
        assert self._bus is not None
        await self._bus.publish_inbound(inbound)

    async def _download(self, item: Any, suffix: str) -> str:
        relative = f"media/{datetime.now():%Y-%m-%d}-{item.file_unique_id}{suffix}"
        path = self.workspace / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        await (await item.get_file()).download_to_drive(path)
        return relative

    # Outbound: queued per chat in Delivery, which reaches the Bot API through these calls.

    async def send(self, msg: OutboundMessage) -> None:
        self.delivery.send(msg)

    def _bot(self) -> Any:
        if self._app is None:
            raise SendError("the Telegram channel is not running", transient=True)
        return self._app.bot

    async def send_text(
        self, key: str, text: str, *, html: bool, reply_to: int | None = None, quiet: bool = False
    ) -> int:
        chat_id, thread = target(key)
        options: dict[str, Any] = {"message_thread_id": thread, "disable_notification": quiet}
        if html:
            options["parse_mode"] = ParseMode.HTML
        if reply_to:
            options["reply_parameters"] = ReplyParameters(
                reply_to, allow_sending_without_reply=True
            )
        return int((await _api(self._bot().send_message(chat_id, text, **options))).message_id)

    async def edit_text(self, key: str, message_id: int, text: str) -> None:
        await _api(self._bot().edit_message_text(text, target(key)[0], message_id))

    async def typing(self, key: str) -> None:
        chat_id, thread = target(key)
        await _api(self._bot().send_chat_action(chat_id, ChatAction.TYPING, thread))


async def _quietly(step: Awaitable[Any], what: str) -> None:
    try:
        await asyncio.wait_for(step, STEP_S)
    except (TelegramError, TimeoutError, RuntimeError) as exc:
        logger.debug("telegram: {} failed: {}", what, exc)

"""How the Telegram channel's Bot API calls travel (aiohttp, and httpx through a proxy), and
what their errors mean to the channel."""

from __future__ import annotations

import asyncio
import json
import re
import warnings
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any, TypeVar, cast

import aiohttp
from loguru import logger
from telegram import (
    Bot,
    BotCommand,
    InlineKeyboardButton,
    InlineKeyboardMarkup,
    InputFile,
    ReplyParameters,
    Update,
)
from telegram._utils.defaultvalue import DefaultValue
from telegram._utils.types import JSONDict, ODVInput
from telegram.constants import ParseMode
from telegram.error import (
    BadRequest,
    Conflict,
    InvalidToken,
    NetworkError,
    RetryAfter,
    TelegramError,
    TimedOut,
)
from telegram.request import BaseRequest, HTTPXRequest, RequestData

from channels.telegram.delivery import TOKEN_REJECTED, PollWatch, SendError, target
from channels.telegram.incoming import UNREADABLE_KEPT
from nanomem.agent import Button, ChannelDown
from nanomem.config import TelegramSettings
from nanomem.text import untrusted_json
from nanomem.text.masking import redact, register_secrets
from nanomem.text.plural import plural


def parse_bounded(payload: bytes) -> JSONDict:
    """PTB's parse_json_payload, but JSON nested too deeply is a TelegramError like any other
    unreadable answer (not a RecursionError that ends the polling), and the body is not
    logged."""
    try:
        parsed = untrusted_json.loads(payload.decode("utf-8", "replace"))
    except ValueError:
        raise TelegramError("Invalid server response") from None
    if not isinstance(parsed, dict):
        raise TelegramError("Invalid server response")
    return parsed


class AiohttpRequest(BaseRequest):
    """Bot API calls over aiohttp. httpx's connection pool does work per queued request for
    every connection, which a hundred chats replying at once turn into seconds of CPU."""

    parse_json_payload = staticmethod(parse_bounded)

    def __init__(self, connections: int, read_timeout_s: float = 5.0) -> None:
        self._connections, self._read_timeout_s = connections, read_timeout_s
        self._session: aiohttp.ClientSession | None = None

    @property
    def read_timeout(self) -> float | None:
        return self._read_timeout_s

    async def initialize(self) -> None:
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(limit=self._connections)
            self._session = aiohttp.ClientSession(connector=connector)

    async def shutdown(self) -> None:
        session, self._session = self._session, None
        if session is not None:
            await session.close()

    async def do_request(
        self,
        url: str,
        method: str,
        request_data: RequestData | None = None,
        read_timeout: ODVInput[float] = BaseRequest.DEFAULT_NONE,
        write_timeout: ODVInput[float] = BaseRequest.DEFAULT_NONE,
        connect_timeout: ODVInput[float] = BaseRequest.DEFAULT_NONE,
        pool_timeout: ODVInput[float] = BaseRequest.DEFAULT_NONE,
    ) -> tuple[int, bytes]:
        if self._session is None:
            await self.initialize()
        assert self._session is not None
        read = self._read_timeout_s if isinstance(read_timeout, DefaultValue) else read_timeout
        connect = 5.0 if isinstance(connect_timeout, DefaultValue) else connect_timeout
        timeout = aiohttp.ClientTimeout(sock_connect=connect, sock_read=read)
        try:
            async with self._session.request(
                method, url, data=_body(request_data), timeout=timeout
            ) as response:
                return response.status, await response.read()
        except TimeoutError as exc:
            raise TimedOut from exc
        except aiohttp.ClientError as exc:
            raise NetworkError(f"aiohttp.{type(exc).__name__}: {exc}") from exc


def _body(data: RequestData | None) -> aiohttp.FormData | dict[str, str] | None:
    """The parameters form-encoded, as the Bot API takes them; files as multipart."""
    if data is None:
        return None
    if not data.contains_files:
        return data.json_parameters
    form = aiohttp.FormData()
    for name, value in data.json_parameters.items():
        form.add_field(name, value)
    for name, (file_name, content, mime) in data.multipart_data.items():
        form.add_field(name, content, filename=file_name, content_type=mime)
    return form


class Form:
    """A call's parameters as the Bot API takes them (strings; numbers, flags and objects as
    JSON), for a call made through PTB's request layer rather than a Bot method: no PTB object
    is built from an answer only its id is wanted of (a sent Message: ~0.13 ms). It offers what
    PTB's request classes read of a RequestData (which is final), no files."""

    contains_files = False
    multipart_data = None

    def __init__(self, **params: object) -> None:
        self.json_parameters = {
            name: value if isinstance(value, str) else json.dumps(value)
            for name, value in params.items()
            if value is not None
        }
        self.parameters = self.json_parameters

    def as_request_data(self) -> RequestData:
        return cast("RequestData", self)


class _Watched:
    """For the getUpdates connection (mixed into a request class): tells the watch when each
    poll ends, and with which status, and keeps the start of an answer it could not read."""

    watch: PollWatch
    status: int | None = None  # of the last answer
    unreadable = b""  # of the last answer, when it was a success that could not be read

    def parse_json_payload(self, payload: bytes) -> JSONDict:
        try:
            return parse_bounded(payload)
        except TelegramError:
            # An error page (a proxy's 502 in HTML) is a failed poll, retried with backoff:
            # only a success whose updates cannot be read is looked into one by one.
            if self.status is not None and 200 <= self.status <= 299:
                self.unreadable = payload[:UNREADABLE_KEPT] or b" "
            raise

    async def do_request(self, *args: Any, **kwargs: Any) -> tuple[int, bytes]:
        self.status, self.unreadable = None, b""
        try:
            self.status, body = await super().do_request(*args, **kwargs)  # type: ignore[misc]
        finally:
            self.watch.finished(self.status)
        return self.status, body


ALLOWED_UPDATES = ("message", "callback_query")
# The first update of a getUpdates answer, found without parsing it: Telegram writes its
# update_id first. Asked for one update at a time, that is the one that cannot be read.
_FIRST_ID = re.compile(
    rb'\A\s*\{\s*"ok"\s*:\s*true\s*,\s*"result"\s*:\s*\[\s*\{\s*"update_id"\s*:\s*(\d{1,18})\b'
)


class UnreadableBatch(TelegramError):
    """A getUpdates answer that came but could not be read: ask for one update at a time."""


async def fetch_updates(
    request: BaseRequest, url: str, offset: int | None, poll_s: float, *, one: bool = False
) -> list[Any]:
    """getUpdates as Telegram sent them, none made into PTB objects yet: Bot.get_updates reads
    the whole batch at once, so one update it cannot read would fail it again and again. An
    answer that cannot be read (an update nested too deeply, say) raises UnreadableBatch;
    asked for `one` update, that update comes back as a stub read_update refuses."""
    limit = 1 if one else None
    form = Form(offset=offset, timeout=int(poll_s), limit=limit, allowed_updates=ALLOWED_UPDATES)
    read_timeout = (request.read_timeout or 0) + poll_s  # a long poll waits that long
    try:
        result = await request.post(url, form.as_request_data(), read_timeout=read_timeout)
    except TelegramError:
        payload = request.unreadable if isinstance(request, _Watched) else b""
        if not payload:
            raise
        if not one:
            raise UnreadableBatch("Invalid server response") from None
        if (found := _FIRST_ID.match(payload)) is None:  # not even its first id: a failed poll
            raise TelegramError("an answer to getUpdates that could not be read") from None
        text = payload.decode("utf-8", "replace")
        return [{"update_id": int(found.group(1)), "unreadable": text}]
    if not isinstance(result, list):
        raise TelegramError("Invalid server response")
    return result


async def poll(
    bot: Bot,
    request: BaseRequest,
    poll_s: float,
    watch: PollWatch,
    offset: Callable[[], int | None],
    store: Callable[[list[Any]], Awaitable[None]],
) -> None:
    """Long-poll getUpdates for ever, each batch `store`d (which confirms it by moving the
    offset on); a batch that cannot be stored is fetched again."""
    delay, one, url = 1.0, False, f"{bot.base_url}/getUpdates"
    while True:
        try:
            items = await fetch_updates(request, url, offset(), poll_s, one=one)
        except UnreadableBatch:  # one by one, the update that cannot be read is found
            logger.info("telegram: a batch of updates could not be read; one by one now")
            one = True
            continue
        except TelegramError as exc:
            text = str(exc)
            if isinstance(exc, Conflict) and "webhook" in text.lower():  # set since we started
                logger.warning(
                    "telegram: a webhook was set for this bot token (by another program?); "
                    "removing it, as telegram.mode is polling (its updates are kept)"
                )
                await quietly(bot.delete_webhook(drop_pending_updates=False), "delete a webhook")
                continue
            if isinstance(exc, Conflict):
                text = "another program is polling with this bot token (only one may)"
            if text != watch.error:
                logger.warning("telegram: polling failed: {}", text)
            watch.error = text
            await asyncio.sleep(delay)
            delay = min(delay * 2, 30.0)
            continue
        delay, one = 1.0, False
        if items:
            try:
                await store(items)
            except Exception:  # never lost: not confirmed, so fetched again
                logger.exception("telegram: could not take {}", plural(len(items), "update"))
                await asyncio.sleep(1.0)


def read_update(item: Any, bot: Bot) -> Update:
    """An update PTB can read (raises whatever it raises: a date past year 9999, a field of the
    wrong kind; never deep recursion, as parse_bounded bounds the nesting)."""
    if not isinstance(item, dict) or not isinstance(item.get("update_id"), int):
        raise TypeError("not an update")
    if "unreadable" in item:
        raise ValueError("its JSON could not be read")
    update = Update.de_json(item, bot)
    if update is None:
        raise TypeError("not an update")
    return update


class PollRequest(_Watched, AiohttpRequest):
    def __init__(self, watch: PollWatch) -> None:
        super().__init__(connections=1)
        self.watch = watch


class HttpxRequest(HTTPXRequest):
    """Bot API calls through a proxy (httpx speaks SOCKS)."""

    parse_json_payload = staticmethod(parse_bounded)


class HttpxPollRequest(_Watched, HttpxRequest):
    """The same, through a proxy."""

    def __init__(self, watch: PollWatch, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.watch = watch


def requests_for(proxy: str | None, watch: PollWatch | None = None) -> BaseRequest:
    """aiohttp for the Bot API; httpx (which speaks SOCKS) when a proxy is set. With `watch`,
    the connection that long-polls getUpdates."""
    if proxy:
        if watch is not None:
            return HttpxPollRequest(watch, proxy=proxy, connection_pool_size=1)
        return HttpxRequest(connection_pool_size=64, pool_timeout=10.0, proxy=proxy)
    return PollRequest(watch) if watch is not None else AiohttpRequest(connections=128)


NOT_FOUND = "telegram: the Bot API answered 404 (check telegram.token and telegram.base_url)"
T = TypeVar("T")


def channel_down(exc: BaseException) -> ChannelDown | None:
    """The one line to report when the Bot API cannot be used; None for other errors."""
    if isinstance(exc, InvalidToken):
        return ChannelDown(NOT_FOUND if "not found" in str(exc).lower() else TOKEN_REJECTED)
    if isinstance(exc, BadRequest):  # reached, and refused: setWebhook's address, say
        return ChannelDown(f"telegram: the Bot API refused a call at start: {exc.message}")
    if isinstance(exc, TelegramError | TimeoutError | OSError):
        return ChannelDown(f"telegram: cannot reach the Bot API: {exc}")
    return None


async def call_api(call: Awaitable[T]) -> T:
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
        unknown = "method not found" in exc.message.lower()
        raise SendError(exc.message, bad_html=bad_html, unsupported=unknown) from exc
    except NetworkError as exc:  # timeouts, connection errors and 5xx
        raise SendError(str(exc), transient=True) from exc
    except TelegramError as exc:
        raise SendError(str(exc)) from exc


async def send_message(
    request: BaseRequest,
    url: str,
    key: str,
    text: str,
    reply_to: int | None,
    quiet: bool,
    html: bool,
    buttons: tuple[Button, ...],
) -> int:
    """sendMessage through PTB's request layer (its errors, its parsing), the id of the sent
    message: not a Message object built from the answer, nor Bot.send_message's handling of
    some twenty parameters."""
    chat_id, thread = target(key)
    options: dict[str, Any] = {"message_thread_id": thread, "disable_notification": quiet}
    if buttons:  # one row; callback_data is what a press sends back (≤ 64 bytes)
        row = [InlineKeyboardButton(b.label, callback_data=b.command[:64]) for b in buttons]
        options["reply_markup"] = InlineKeyboardMarkup([row]).to_dict()
    if html:
        options["parse_mode"] = ParseMode.HTML.value
    if reply_to:
        reply = ReplyParameters(reply_to, allow_sending_without_reply=True)
        options["reply_parameters"] = reply.to_dict()
    form = Form(chat_id=chat_id, text=text, **options).as_request_data()
    sent = await call_api(request.post(url, form))
    message_id = sent.get("message_id") if isinstance(sent, dict) else None
    if not isinstance(message_id, int):
        raise SendError("the Bot API answered sendMessage without a message id")
    return message_id


FILE_TIMEOUT_S = 120.0  # an upload of up to 50 MB, and its answer


async def upload(
    bot: Bot, key: str, kind: str, name: str, data: bytes, caption: str, html: bool
) -> int:
    """sendPhoto, sendVoice, sendAudio or sendDocument (multipart), the sent message's id."""
    chat_id, thread = target(key)
    file = InputFile(data, filename=name)
    options: dict[str, Any] = {
        "caption": caption or None,
        "parse_mode": ParseMode.HTML if html and caption else None,
        "message_thread_id": thread,
        "write_timeout": FILE_TIMEOUT_S,
        "read_timeout": FILE_TIMEOUT_S,
    }
    if kind == "photo":
        sent = await call_api(bot.send_photo(chat_id, file, **options))
    elif kind == "voice":
        sent = await call_api(bot.send_voice(chat_id, file, **options))
    elif kind == "audio":
        sent = await call_api(bot.send_audio(chat_id, file, **options))
    else:
        sent = await call_api(bot.send_document(chat_id, file, **options))
    return sent.message_id


GETME_TIMEOUT_S = 10.0  # the whole call: connecting, asking and reading the answer


async def bot_username(token: str, settings: TelegramSettings) -> str:
    """The bot's username; ValueError with a sentence for the person, never with the token."""
    register_secrets([token])
    bot = Bot(
        token,
        base_url=settings.base_url,
        base_file_url=settings.base_file_url,
        request=requests_for(settings.proxy),
    )
    try:
        async with asyncio.timeout(GETME_TIMEOUT_S), bot:  # initialize() asks getMe
            username = bot.username
    except InvalidToken as exc:
        code = "404" if "not found" in str(exc).lower() else "401"
        raise ValueError(
            f"Telegram refused this token ({code}): copy it again from @BotFather "
            "(/mybots, then API Token)."
        ) from None
    except (TelegramError, TimeoutError, OSError) as exc:
        detail = redact(str(exc)) or type(exc).__name__
        raise ValueError(
            f"Could not reach the Bot API at {settings.base_url} ({detail}); check the "
            "network, or telegram.base_url and telegram.proxy."
        ) from None
    return redact(username)


async def quietly(step: Awaitable[Any], what: str, within_s: float = 10.0) -> None:
    """A call whose failure changes nothing (an old press answered, a bot shut down)."""
    try:
        await asyncio.wait_for(step, within_s)
    except (TelegramError, TimeoutError, RuntimeError) as exc:
        logger.debug("telegram: {} failed: {}", what, exc)


async def register_commands(bot: Bot, menu: list[tuple[str, str]], within_s: float) -> None:
    """The command menu Telegram shows (setMyCommands); a failure is only a warning."""
    commands = [BotCommand(name, about) for name, about in menu]
    try:
        await asyncio.wait_for(bot.set_my_commands(commands), within_s)
    except (TelegramError, TimeoutError) as exc:
        logger.warning("telegram: could not register the command menu: {}", exc)

"""Loopback fake of the Telegram Bot API for end-to-end tests.

The server runs its own asyncio loop in a daemon thread, so sync tests (driving a
``nanomem gateway`` subprocess) and async tests (driving python-telegram-bot in-process)
can both use it. Every public method is thread-safe.
"""

from __future__ import annotations

import asyncio
import contextlib
import html
import itertools
import json
import re
import threading
import time
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any, Self, TypedDict, Unpack
from urllib.parse import urlsplit

from aiohttp import web

JSONDict = dict[str, Any]

# Parameters PTB sends JSON-encoded inside form fields.
_JSON_KEYS = frozenset(
    "reply_markup commands entities caption_entities allowed_updates reaction scope"  # noqa: SIM905
    " link_preview_options reply_parameters media".split()
)
_NUMBER_KEYS = frozenset(
    "chat_id message_id message_thread_id offset limit timeout reply_to_message_id draft_id".split()  # noqa: SIM905
)
_HTML_TAGS = frozenset(
    "b strong i em u ins s strike del code pre a blockquote tg-spoiler span".split()  # noqa: SIM905
)
_OK_METHODS = frozenset("logout close setmessagereaction".split())  # noqa: SIM905
_TAG_RE = re.compile(r"<(/?)([a-zA-Z][a-zA-Z0-9-]*)(\s[^<>]*)?>")
_ENTITY_RE = re.compile(r"&(?:[a-zA-Z]+|#[0-9]+|#x[0-9a-fA-F]+);")
_COMMAND_RE = re.compile(r"[a-z0-9_]{1,32}")
_TEXT_LIMIT, _CAPTION_LIMIT = 4096, 1024
_DEFAULT_GROUP_USER_ID = 4242
_RAW = "__raw__"  # an update queued as text by send_raw, sent as it is
_FOLDERS = {"photo": "photos", "voice": "voice", "audio": "music", "video_note": "video_notes"}
# What a sendPhoto upload must start with for Telegram to make a photo of it.
_IMAGE_MAGIC = (b"\xff\xd8\xff", b"\x89PNG\r\n\x1a\n", b"RIFF")
_WEBHOOK_SECRET = re.compile(r"[A-Za-z0-9_-]{1,256}")
_WEBHOOK_ACTIVE = (
    "Conflict: can't use getUpdates method while webhook is active; use deleteWebhook to delete "
    "the webhook first"
)
_NOT_MODIFIED = (
    "Bad Request: message is not modified: specified new message content and reply markup "
    "are exactly the same as a current content and reply markup of the message"
)


class Sender(TypedDict, total=False):
    """Who sends an inbound message, and where (all optional)."""

    user_id: int | None  # private chats default to chat_id, groups to 4242
    username: str
    first_name: str
    chat_type: str  # "private" | "group" | "supergroup"; group chat ids are negative
    message_thread_id: int | None
    reply_to_bot: bool


def forwarded(name: str) -> JSONDict:
    """A message's `forward_origin` when it was forwarded from `name` (Bot API
    MessageOriginHiddenUser: a sender who hides their account), or no field."""
    if not name:
        return {}
    origin = {"type": "hidden_user", "sender_user_name": name, "date": int(time.time())}
    return {"forward_origin": origin}


class ApiError(Exception):
    """A Bot API failure, answered as ``{"ok": false, ...}`` with HTTP status = error_code."""

    def __init__(
        self,
        code: int,
        description: str,
        retry_after: int | None = None,
        body: str | None = None,
        body_status: int = 200,
    ) -> None:
        super().__init__(description)
        self.code, self.description, self.retry_after = code, description, retry_after
        self.body, self.body_status = body, body_status

    def response(self) -> web.Response:
        """Render the error the way Telegram does (or the raw body a fault gave)."""
        if self.body is not None:
            return web.Response(
                text=self.body, status=self.body_status, content_type="application/json"
            )
        body: JSONDict = {"ok": False, "error_code": self.code, "description": self.description}
        if self.retry_after is not None:
            body["parameters"] = {"retry_after": self.retry_after}
        return web.json_response(body, status=self.code)


@dataclass
class _Fault:
    error_code: int
    description: str
    retry_after: int | None
    times: int
    chat_id: int | None
    body: str | None = None
    body_status: int = 200


def _bad(description: str) -> ApiError:
    return ApiError(400, f"Bad Request: {description}")


def _utf16_len(text: str) -> int:
    # Telegram measures text in UTF-16 code units (an emoji outside the BMP counts twice).
    return len(text.encode("utf-16-le")) // 2


def _without_reply(message: JSONDict) -> JSONDict:
    return {k: v for k, v in message.items() if k != "reply_to_message"}


def html_error(text: str) -> str | None:
    """Return Telegram's parse error for ``text`` sent with parse_mode=HTML, None if valid."""
    stack: list[str] = []
    end = 0
    for special in re.finditer(r"[<&]", text):
        if (i := special.start()) < end:  # inside a tag already consumed
            continue
        at = f"at byte offset {len(text[:i].encode())}"
        if text[i] == "&":
            if not _ENTITY_RE.match(text, i):
                return f"Can't find end of the entity starting {at}"
            continue
        if (match := _TAG_RE.match(text, i)) is None:
            return f"Unsupported start tag {at}"
        tag, end = match.group(2).lower(), match.end()
        if not match.group(1):
            if tag not in _HTML_TAGS:
                return f'Unsupported start tag "{tag}" {at}'
            stack.append(tag)
        elif not stack or stack.pop() != tag:
            return f"Unexpected end tag {at}"
    return f'Can\'t find end tag corresponding to start tag "{stack[-1]}"' if stack else None


def _coerce(key: str, value: Any) -> Any:
    """Turn a form-encoded string back into the JSON value PTB serialised."""
    if not isinstance(value, str):
        return value
    if key in _JSON_KEYS:
        with contextlib.suppress(ValueError):
            return json.loads(value)
    if key in _NUMBER_KEYS and re.fullmatch(r"-?[0-9]+(\.[0-9]*)?", value):
        return float(value) if "." in value else int(value)
    if key not in ("text", "caption") and value in ("true", "false"):
        return value == "true"
    return value


async def _read_params(request: web.Request) -> JSONDict:
    """Merge query string and body (form, multipart or JSON) into one parameter dict."""
    raw: dict[str, Any] = dict(request.query)
    if request.content_type == "application/json":
        body = await request.text()
        raw.update(json.loads(body) if body.strip() else {})
    elif request.can_read_body:
        for key, value in (await request.post()).items():
            raw[key] = value
            if isinstance(value, web.FileField):
                raw[key] = {"file_name": value.filename, "mime_type": value.content_type,
                            "data": value.file.read()}  # fmt: skip
    return {key: _coerce(key, value) for key, value in raw.items()}


class FakeTelegram:
    """In-process Telegram Bot API server bound to 127.0.0.1 on a random port."""

    def __init__(
        self, token: str = "123456:TEST-TOKEN", *, bot_username: str = "nanomem_test_bot"
    ) -> None:
        self.token, self.bot_username = token, bot_username
        self.bot_id = int(token.split(":", 1)[0])
        self.port, self.base_url, self.base_file_url = 0, "", ""
        self.calls: list[tuple[str, JSONDict]] = []
        self.call_times: list[float] = []  # time.monotonic() when each of `calls` arrived
        self.commands: list[JSONDict] | None = None
        self.getupdates_count = 0
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._updates: list[JSONDict] = []
        self._update_ids, self._file_ids = itertools.count(1), itertools.count(1)
        self._newest_update_id = 0
        self._message_ids: dict[int, itertools.count[int]] = {}
        self._messages: dict[tuple[int, int], JSONDict] = {}  # every message, by (chat, id)
        self._sent: list[JSONDict] = []
        self._drafts: list[JSONDict] = []  # every sendMessageDraft, with its time
        self._edits: list[JSONDict] = []  # every successful editMessageText, with its time
        self._drafts_known = True
        self._draft_lifetime_s = 30.0  # "a temporary 30-second preview", from its first call
        self._actions: list[JSONDict] = []
        self._press_answers: list[JSONDict] = []  # answerCallbackQuery calls
        self._markup_edits: list[JSONDict] = []  # editMessageReplyMarkup calls
        self._press_ids = itertools.count(1)
        self._chats: dict[int, JSONDict] = {}
        self._files: dict[str, JSONDict] = {}  # file_id -> getFile result
        self._file_data: dict[str, bytes] = {}  # file_path -> bytes
        self._faults: dict[str, list[_Fault]] = {}
        self._html_rejects: list[int | None] = []
        self._token_valid, self._paused, self._stopping = True, False, False
        self._ack_offset, self._dropped = 0, set[int]()  # acknowledgement bookkeeping (chaos)
        # setWebhook's url and secret_token while a webhook is set; its posts go to the target
        # (a reverse proxy's upstream: the gateway's own address), retried until answered 200.
        self._webhook: JSONDict | None = None
        self._webhook_target = ""
        self._webhook_error: tuple[int, str] | None = None  # (unix time, message) of the last
        self._lost_answers = 0
        self._posts: list[JSONDict] = []  # every post: update_id, status (None: no answer)
        self._delivered: set[int] = set()  # answered 200
        self.webhook_retry_s = (0.1, 1.0)  # Telegram's first delay after a failure, and its cap
        self._delivering: asyncio.Task[None] | None = None
        self._waiters: set[asyncio.Event] = set()  # only touched on the server loop
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None

    def start(self) -> Self:
        """Start the server thread and wait until the port is bound."""
        if self._thread is not None:
            return self
        loop = self._loop = asyncio.new_event_loop()
        self._stopping = False
        self._thread = threading.Thread(target=loop.run_forever, name="fake-telegram", daemon=True)
        self._thread.start()
        self.port = asyncio.run_coroutine_threadsafe(self._serve(), loop).result(timeout=10)
        self.base_url = f"http://127.0.0.1:{self.port}/bot"
        self.base_file_url = f"http://127.0.0.1:{self.port}/file/bot"
        return self

    def stop(self) -> None:
        """Answer pending long-polls with [] and shut the server down."""
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        with self._lock:
            self._stopping = True
        try:
            asyncio.run_coroutine_threadsafe(self._shutdown(), loop).result(timeout=10)
        finally:
            loop.call_soon_threadsafe(loop.stop)
            thread.join(timeout=10)
            loop.close()
            self._loop = self._thread = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()

    async def _serve(self) -> int:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/file/bot{token}/{path:.+}", self._handle_file)
        app.router.add_route("*", "/bot{token}/{method}", self._handle_method)
        # Short shutdown_timeout: a stale long-poll abandoned by its client must not delay stop().
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        self._delivering = asyncio.get_running_loop().create_task(self._deliver())
        return int(self._runner.addresses[0][1])

    async def _shutdown(self) -> None:
        self._wake()
        if self._delivering is not None:
            self._delivering.cancel()
            await asyncio.gather(self._delivering, return_exceptions=True)
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    def _wake(self) -> None:
        for event in self._waiters:
            event.set()

    def _wake_threadsafe(self) -> None:
        if (loop := self._loop) is not None:
            with contextlib.suppress(RuntimeError):  # loop already closed by stop()
                loop.call_soon_threadsafe(self._wake)

    async def _handle_method(self, request: web.Request) -> web.Response:
        method = request.match_info["method"].lower()
        params = await _read_params(request)
        try:
            with self._lock:
                self.calls.append((method, params))
                self.call_times.append(time.monotonic())
                if not self._token_valid or request.match_info["token"] != self.token:
                    raise ApiError(401, "Unauthorized")
                self.getupdates_count += method == "getupdates"
                self._take_fault(method, params)
                if method == "getupdates" and self._webhook is not None:
                    raise ApiError(409, _WEBHOOK_ACTIVE)
                if method in _OK_METHODS:
                    return web.json_response({"ok": True, "result": True})
                if method != "getupdates":
                    handler = getattr(self, f"_api_{method}", None)
                    if handler is None:
                        raise ApiError(404, "Not Found: method not found")
                    # Serialised under the lock: stored messages may be edited concurrently.
                    return web.json_response({"ok": True, "result": handler(params)})
            updates = await self._get_updates(params)
            # An update queued raw is sent as its text (json.dumps would not write a 900-deep one).
            result = ", ".join(u.get(_RAW) or json.dumps(u) for u in updates)
            body = f'{{"ok": true, "result": [{result}]}}'
            return web.Response(text=body, content_type="application/json")
        except ApiError as exc:
            return exc.response()

    async def _handle_file(self, request: web.Request) -> web.Response:
        with self._lock:
            if not self._token_valid or request.match_info["token"] != self.token:
                return ApiError(401, "Unauthorized").response()
            data = self._file_data.get(request.match_info["path"])
        if data is None:
            return ApiError(404, "Not Found").response()
        return web.Response(body=data, content_type="application/octet-stream")

    async def _get_updates(self, params: JSONDict) -> list[JSONDict]:
        offset, limit = params.get("offset"), int(params.get("limit") or 100)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(float(params.get("timeout") or 0), 0.0)
        while True:
            with self._lock:
                self._note_offset(offset)
                if isinstance(offset, int) and offset > 0:  # confirms everything before it
                    self._updates = [u for u in self._updates if u["update_id"] >= offset]
                if self._stopping:
                    return []
                if self._webhook is not None:  # set while this poll waited
                    raise ApiError(409, _WEBHOOK_ACTIVE)
                if self._updates and not self._paused:
                    return self._updates[:limit]
            remaining = deadline - loop.time()
            if remaining <= 0:
                return []
            # Registered right after the check, with no await in between: no lost wake-up.
            event = asyncio.Event()
            self._waiters.add(event)
            try:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(event.wait(), remaining)
            finally:
                self._waiters.discard(event)

    def _take_fault(self, method: str, params: JSONDict) -> None:
        queue = self._faults.get(method, [])
        for fault in queue:
            if fault.chat_id is None or fault.chat_id == params.get("chat_id"):
                fault.times -= 1
                if fault.times <= 0:
                    queue.remove(fault)
                raise ApiError(
                    fault.error_code,
                    fault.description,
                    fault.retry_after,
                    fault.body,
                    fault.body_status,
                )

    # Bot API methods, named _api_<lowercase method>; called with the lock held.

    def _bot_user(self) -> JSONDict:
        return {"id": self.bot_id, "is_bot": True, "first_name": "Nanomem Test",
                "username": self.bot_username}  # fmt: skip

    def _api_getme(self, _: JSONDict) -> JSONDict:
        return self._bot_user() | {"can_join_groups": True, "can_read_all_group_messages": False,
                                   "supports_inline_queries": False}  # fmt: skip

    def _api_deletewebhook(self, params: JSONDict) -> bool:
        if params.get("drop_pending_updates") is True:
            self._note_dropped(self._updates)
            self._updates.clear()
        self._webhook = None
        return True

    def _api_setwebhook(self, params: JSONDict) -> bool:
        url = str(params.get("url") or "")
        if not url:
            return self._api_deletewebhook(params)
        if not url.startswith("https://"):
            raise _bad("bad webhook: An HTTPS URL must be provided for webhook")
        secret = params.get("secret_token")
        if secret is not None and not _WEBHOOK_SECRET.fullmatch(str(secret)):
            raise _bad("secret token contains unallowed characters")
        if params.get("drop_pending_updates") is True:
            self._note_dropped(self._updates)
            self._updates.clear()
        self._webhook = {"url": url, "secret_token": secret,
                         "allowed_updates": params.get("allowed_updates")}  # fmt: skip
        self._wake()  # on the server loop: handlers run there
        return True

    def _api_getwebhookinfo(self, _: JSONDict) -> JSONDict:
        info: JSONDict = {"url": "", "has_custom_certificate": False,
                          "pending_update_count": len(self._updates)}  # fmt: skip
        if self._webhook is not None:
            info |= {"url": self._webhook["url"], "max_connections": 40}
            if self._webhook["allowed_updates"] is not None:
                info["allowed_updates"] = self._webhook["allowed_updates"]
        if self._webhook_error is not None:
            date, message = self._webhook_error
            info |= {"last_error_date": date, "last_error_message": message}
        return info

    # The webhook: Telegram posts each update, one at a time and in order (the real one keeps a
    # chat's order and posts different chats' at once), until one is answered 200.

    def forward_webhook_to(self, target: str) -> None:
        """Where the webhook's posts go: `target` (http://127.0.0.1:<port>, the gateway), with
        the path and query of the webhook's URL, as a reverse proxy would pass them on."""
        with self._lock:
            self._webhook_target = target.rstrip("/")
        self._wake_threadsafe()

    def lose_answers(self, times: int = 1) -> None:
        """The next `times` answers to posts never arrive (the connection breaks, or the
        gateway dies, right after it answered): the update is posted again."""
        with self._lock:
            self._lost_answers += times

    def webhook(self) -> JSONDict | None:
        """setWebhook's url, secret_token and allowed_updates while a webhook is set."""
        with self._lock:
            return dict(self._webhook) if self._webhook is not None else None

    def posts(self) -> list[JSONDict]:
        """Every post to the webhook as ``{"update_id", "status", "lost"}``, oldest first
        (status None: no answer came; lost: one came, and `lose_answers` dropped it)."""
        with self._lock:
            return [dict(p) for p in self._posts]

    async def _deliver(self) -> None:
        import aiohttp

        delay = self.webhook_retry_s[0]
        async with aiohttp.ClientSession() as session:
            while not self._stopping:
                with self._lock:
                    hook, target = self._webhook, self._webhook_target
                    ready = hook is not None and target and not self._paused
                    update = self._updates[0] if ready and self._updates else None
                if hook is None or update is None:
                    await self._changes(1.0)
                    continue
                status, error, wait = await self._post(session, hook, target, update)
                with self._lock:
                    lost = status == 200 and self._lost_answers > 0
                    self._lost_answers -= lost
                    self._posts.append({"update_id": update["update_id"], "status": status,
                                        "lost": lost})  # fmt: skip
                    if status == 200 and not lost:
                        self._delivered.add(update["update_id"])
                        self._updates = [u for u in self._updates if u is not update]
                        delay = self.webhook_retry_s[0]
                    else:
                        self._webhook_error = (int(time.time()), error)
                    self._changed.notify_all()
                if status != 200 or lost:
                    await asyncio.sleep(wait if wait is not None else delay)
                    delay = min(delay * 2, self.webhook_retry_s[1])

    async def _post(
        self, session: Any, hook: JSONDict, target: str, update: JSONDict
    ) -> tuple[int | None, str, float | None]:
        """(status, Telegram's error message for it, the Retry-After it asked for)."""
        import aiohttp

        parts = urlsplit(hook["url"])
        url = f"{target}{parts.path or '/'}" + (f"?{parts.query}" if parts.query else "")
        headers = {"Content-Type": "application/json", "Host": parts.netloc}
        if hook.get("secret_token"):
            headers["X-Telegram-Bot-Api-Secret-Token"] = hook["secret_token"]
        body = update.get(_RAW) or json.dumps(update)
        try:
            timeout = aiohttp.ClientTimeout(total=10)
            async with session.post(url, data=body, headers=headers, timeout=timeout) as answer:
                await answer.read()
                error = f"Wrong response from the webhook: {answer.status} {answer.reason}"
                after = answer.headers.get("Retry-After", "")
                return answer.status, error, min(float(after), 5.0) if after.isdigit() else None
        except TimeoutError:
            return None, "Read timeout expired", None
        except aiohttp.ClientError as exc:
            return None, f"Connection failed: {type(exc).__name__}", None

    async def _changes(self, within_s: float) -> None:
        """Until something changed (a new update, a webhook set), or `within_s` passed."""
        event = asyncio.Event()
        self._waiters.add(event)
        try:
            # Not wait_for: on 3.11 it can swallow the cancellation stop() sends.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(within_s):
                    await event.wait()
        finally:
            self._waiters.discard(event)

    def _chat_id(self, params: JSONDict) -> int:
        if not isinstance(chat_id := params.get("chat_id"), int):
            raise _bad("chat not found")
        return chat_id

    def _new_message(self, chat_id: int, sender: JSONDict, **fields: Any) -> JSONDict:
        chat = self._chats.get(chat_id) or {
            "id": chat_id,
            "type": "private" if chat_id > 0 else "supergroup",
        }
        message_id = next(self._message_ids.setdefault(chat_id, itertools.count(1)))
        message = {"message_id": message_id, "date": int(time.time()), "chat": chat,
                   "from": sender, **fields}  # fmt: skip
        self._messages[(chat_id, message_id)] = message
        return message

    def _record_sent(self, chat_id: int, fields: JSONDict) -> JSONDict:
        message = self._new_message(chat_id, self._bot_user(), **fields)
        self._sent.append(message)
        self._changed.notify_all()
        return message

    def _check_text(self, params: JSONDict, *, is_send: bool) -> JSONDict:
        """Validate text/parse_mode; return the message fields Telegram would store."""
        text = params.get("text")
        if not isinstance(text, str) or not text.strip():
            raise _bad("message text is empty")
        fields: JSONDict = {"text": text}
        if str(params.get("parse_mode", "")).lower() == "html":
            chat_id = params.get("chat_id")
            if is_send and (chat_id in self._html_rejects or None in self._html_rejects):
                self._html_rejects.remove(chat_id if chat_id in self._html_rejects else None)
                raise _bad("can't parse entities: Unsupported start tag at byte offset 0")
            if (error := html_error(text)) is not None:
                raise _bad(f"can't parse entities: {error}")
            # Telegram stores the visible text; the raw markup is kept for assertions.
            fields = {"text": html.unescape(_TAG_RE.sub("", text)), "html": text}
        if _utf16_len(fields["text"]) > _TEXT_LIMIT:
            raise _bad("message is too long")
        if "reply_markup" in params:
            fields["reply_markup"] = params["reply_markup"]
        return fields

    def _reply_fields(self, chat_id: int, params: JSONDict) -> JSONDict:
        fields: JSONDict = {}
        if isinstance(thread_id := params.get("message_thread_id"), int):
            fields |= {"message_thread_id": thread_id, "is_topic_message": True}
        reply = params.get("reply_parameters") or {"message_id": params.get("reply_to_message_id")}
        if isinstance(reply, dict) and (reply_id := reply.get("message_id")):
            target = self._messages.get((chat_id, int(reply_id)))
            if target is None:
                raise _bad("message to be replied not found")
            fields["reply_to_message"] = _without_reply(target)
        return fields

    def _api_sendmessage(self, params: JSONDict) -> JSONDict:
        chat_id = self._chat_id(params)
        fields = self._check_text(params, is_send=True) | self._reply_fields(chat_id, params)
        return self._record_sent(chat_id, fields)

    def _api_editmessagetext(self, params: JSONDict) -> JSONDict | bool:
        if params.get("inline_message_id"):
            return True
        chat_id = self._chat_id(params)
        message = self._messages.get((chat_id, int(params.get("message_id") or 0)))
        if message is None or message["from"]["id"] != self.bot_id or message.get("deleted"):
            raise _bad("message to edit not found")
        fields = self._check_text(params, is_send=False)
        keys = ("text", "html", "reply_markup")
        if all(fields.get(k) == message.get(k) for k in keys):
            raise ApiError(400, _NOT_MODIFIED)
        for key in keys:
            message.pop(key, None)
        message |= fields | {"edit_date": int(time.time())}
        edit = {"chat_id": chat_id, "message_id": message["message_id"], "text": fields["text"]}
        self._edits.append(edit | {"html": fields.get("html"), "at": time.monotonic()})
        self._changed.notify_all()
        return message

    def _api_answercallbackquery(self, params: JSONDict) -> bool:
        self._press_answers.append(
            {"callback_query_id": str(params.get("callback_query_id")), "text": params.get("text")}
        )
        self._changed.notify_all()
        return True

    def _api_editmessagereplymarkup(self, params: JSONDict) -> JSONDict:
        chat_id = self._chat_id(params)
        message = self._messages.get((chat_id, int(params.get("message_id") or 0)))
        if message is None or message["from"]["id"] != self.bot_id or message.get("deleted"):
            raise _bad("message to edit not found")
        markup = params.get("reply_markup")
        if markup == message.get("reply_markup") or (not markup and "reply_markup" not in message):
            raise ApiError(400, _NOT_MODIFIED)
        message.pop("reply_markup", None)
        if markup:
            message["reply_markup"] = markup
        edit = {"chat_id": chat_id, "message_id": message["message_id"], "reply_markup": markup}
        self._markup_edits.append(edit)
        self._changed.notify_all()
        return message

    def _api_deletemessage(self, params: JSONDict) -> bool:
        chat_id = self._chat_id(params)
        message = self._messages.get((chat_id, int(params.get("message_id") or 0)))
        if message is None or message.get("deleted"):
            raise _bad("message to delete not found")
        message["deleted"] = True
        self._changed.notify_all()
        return True

    def _api_sendmessagedraft(self, params: JSONDict) -> bool:
        if not self._drafts_known:  # a Bot API server older than 9.3
            raise ApiError(404, "Not Found: method not found")
        chat_id = self._chat_id(params)
        if chat_id <= 0:
            raise _bad("TEXTDRAFT_PEER_INVALID")  # drafts exist in private chats only
        if not isinstance(draft_id := params.get("draft_id"), int) or draft_id == 0:
            raise _bad("draft_id must be non-zero")
        fields = self._check_text(params, is_send=False)
        draft = {"chat_id": chat_id, "draft_id": draft_id, "text": fields["text"]}
        draft |= {"html": fields.get("html"), "at": time.monotonic()}
        if "message_thread_id" in params:
            draft["message_thread_id"] = params["message_thread_id"]
        self._drafts.append(draft)
        self._changed.notify_all()
        return True

    def _api_sendchataction(self, params: JSONDict) -> bool:
        action = {"chat_id": self._chat_id(params), "action": params.get("action")}
        if "message_thread_id" in params:
            action["message_thread_id"] = params["message_thread_id"]
        self._actions.append(action)
        return True

    def _api_setmycommands(self, params: JSONDict) -> bool:
        if not isinstance(commands := params.get("commands"), list):
            raise _bad("parameter commands is required")
        for cmd in commands:
            if not _COMMAND_RE.fullmatch(str(cmd.get("command", ""))):
                raise _bad("BOT_COMMAND_INVALID")
            if not 1 <= len(str(cmd.get("description", ""))) <= 256:
                raise _bad("BOT_COMMAND_DESCRIPTION_INVALID")
        self.commands = commands
        return True

    def _api_getmycommands(self, _: JSONDict) -> list[JSONDict]:
        return self.commands or []

    def _api_deletemycommands(self, _: JSONDict) -> bool:
        self.commands = []
        return True

    def _api_getfile(self, params: JSONDict) -> JSONDict:
        if (info := self._files.get(str(params.get("file_id")))) is None:
            raise _bad("invalid file_id")
        return info

    def _media(self, kind: str, data: bytes, name: str | None, mime: str | None) -> Any:
        """Store uploaded bytes; return the photo/document/voice object referencing them."""
        n = next(self._file_ids)
        default = {"photo": ".jpg", "voice": ".oga", "video_note": ".mp4"}.get(kind)
        suffix = default or PurePosixPath(name or "").suffix
        path = f"{_FOLDERS.get(kind, 'documents')}/file_{n}{suffix}"
        file_id = f"{kind}-{n}"
        info = {"file_id": file_id, "file_unique_id": f"uniq{n}", "file_size": len(data)}
        self._files[file_id] = info | {"file_path": path}
        self._file_data[path] = data
        if kind == "photo":
            return [info | {"width": 90, "height": 90}]
        if kind == "video_note":  # Bot API VideoNote: a square video, no mime_type
            return info | {"length": 240}
        # Telegram reads a voice note's and a song's length from the file; these are made up.
        timed = {"duration": 1} if kind in ("voice", "audio") else {}
        named = {"file_name": name} if kind in ("document", "audio") and name else {}
        return info | {"mime_type": mime} | timed | named

    def _send_media(self, kind: str, params: JSONDict) -> JSONDict:
        chat_id = self._chat_id(params)
        upload = params.get(kind)
        if isinstance(upload, dict):  # multipart upload
            if kind == "photo" and not upload["data"].startswith(_IMAGE_MAGIC):
                raise _bad("IMAGE_PROCESS_FAILED")
            media = self._media(kind, upload["data"], upload["file_name"], upload["mime_type"])
        elif isinstance(upload, str) and upload in self._files:  # re-send by file_id
            info = {k: v for k, v in self._files[upload].items() if k != "file_path"}
            media = [info | {"width": 90, "height": 90}] if kind == "photo" else info
        else:
            raise _bad(f"there is no {kind} in the request")
        fields: JSONDict = {kind: media}
        if caption := str(params.get("caption") or ""):
            if str(params.get("parse_mode", "")).lower() == "html":
                if (error := html_error(caption)) is not None:
                    raise _bad(f"can't parse entities: {error}")
                # Telegram stores the visible caption; the raw markup is kept for assertions.
                fields["caption_html"] = caption
                caption = html.unescape(_TAG_RE.sub("", caption))
            if _utf16_len(caption) > _CAPTION_LIMIT:  # counted after entity parsing
                raise _bad("message caption is too long")
            fields["caption"] = caption
        return self._record_sent(chat_id, fields | self._reply_fields(chat_id, params))

    def _api_sendphoto(self, params: JSONDict) -> JSONDict:
        return self._send_media("photo", params)

    def _api_senddocument(self, params: JSONDict) -> JSONDict:
        return self._send_media("document", params)

    def _api_sendvoice(self, params: JSONDict) -> JSONDict:
        return self._send_media("voice", params)

    def _api_sendaudio(self, params: JSONDict) -> JSONDict:
        return self._send_media("audio", params)

    def file_data(self, media: Any) -> bytes:
        """The bytes behind a sent message's photo (its largest size), document, voice or
        audio object."""
        info = media[-1] if isinstance(media, list) else media
        with self._lock:
            return self._file_data[self._files[info["file_id"]]["file_path"]]

    # Inbound: what a user sends to the bot.

    def _inbound(self, chat_id: int, fields: JSONDict, sender: Sender) -> JSONDict:
        chat_type = sender.get("chat_type", "private")
        username, first_name = sender.get("username", "alice"), sender.get("first_name", "Alice")
        user_id = sender.get("user_id")
        if chat_type == "private":
            chat = {"id": chat_id, "type": "private", "first_name": first_name,
                    "username": username}  # fmt: skip
            user_id = chat_id if user_id is None else user_id
        elif chat_id >= 0:
            raise ValueError(f"{chat_type} chat ids must be negative, got {chat_id}")
        else:
            chat = {"id": chat_id, "type": chat_type, "title": "Test Group"}
            user_id = _DEFAULT_GROUP_USER_ID if user_id is None else user_id
        user = {"id": user_id, "is_bot": False, "first_name": first_name, "username": username,
                "language_code": "en"}  # fmt: skip
        if (thread_id := sender.get("message_thread_id")) is not None:
            chat["is_forum"] = chat_type == "supergroup"
            fields |= {"message_thread_id": thread_id, "is_topic_message": True}
        with self._lock:
            self._chats[chat_id] = chat
            if sender.get("reply_to_bot"):
                ours = [m for m in self._sent if m["chat"]["id"] == chat_id]
                target = ours[-1] if ours else self._new_message(chat_id, self._bot_user(),
                                                                 text="earlier")  # fmt: skip
                fields["reply_to_message"] = _without_reply(target)
            update = {"update_id": next(self._update_ids),
                      "message": self._new_message(chat_id, user, **fields)}  # fmt: skip
            self._newest_update_id = update["update_id"]
            self._updates.append(update)
        self._wake_threadsafe()
        return update

    def send_raw(self, fields: JSONDict | str) -> int:
        """Queue an update as given, whatever it holds (one python-telegram-bot cannot read):
        `fields` beside its update_id, as a dict or as the JSON text of an object's members
        (`'"message": {...}'`, for one nested deeper than json.dumps writes); its update_id."""
        members = fields if isinstance(fields, str) else json.dumps(fields)[1:-1]
        with self._lock:
            update_id = next(self._update_ids)
            raw = f'{{"update_id": {update_id}, {members}}}'
            self._updates.append({"update_id": update_id, _RAW: raw})
            self._newest_update_id = update_id
        self._wake_threadsafe()
        return update_id

    def send_text(self, chat_id: int, text: str, **sender: Unpack[Sender]) -> JSONDict:
        """Queue a user's text message; "/cmd[@bot] args" gets a bot_command entity."""
        fields: JSONDict = {"text": text}
        if text.startswith("/") and len(text) > 1:
            length = _utf16_len(text.split(maxsplit=1)[0])
            fields["entities"] = [{"type": "bot_command", "offset": 0, "length": length}]
        return self._inbound(chat_id, fields, sender)

    @staticmethod
    def button_data(message: JSONDict, label: str) -> str:
        """The callback_data of the inline button labelled `label` under a bot's message."""
        rows = (message.get("reply_markup") or {}).get("inline_keyboard") or []
        return next(b["callback_data"] for row in rows for b in row if b["text"] == label)

    def press(self, message: JSONDict, data: str, *, user_id: int | None = None) -> str:
        """Queue a press of the inline button whose callback_data is `data` under one of the
        bot's messages (as returned by :meth:`sent_messages`), by `user_id` (default: the
        private chat's own user); the callback query's id."""
        chat_id = message["chat"]["id"]
        with self._lock:
            stored = self._messages[(chat_id, message["message_id"])]
            rows = (stored.get("reply_markup") or {}).get("inline_keyboard") or []
            if data not in [b.get("callback_data") for row in rows for b in row]:
                raise ValueError(f"no button with callback_data {data!r} under that message")
            user_id = chat_id if user_id is None else user_id
            user = {"id": user_id, "is_bot": False, "first_name": "Alice", "username": "alice"}
            query_id = self._queue_press(user, stored, data)
        self._wake_threadsafe()
        return query_id

    def _queue_press(self, user: JSONDict, message: JSONDict, data: str) -> str:
        """Queue the callback query `user` sends pressing `data` under `message` (holding the
        lock); its id."""
        query_id = f"press-{next(self._press_ids)}"
        query = {"id": query_id, "from": user, "message": message, "data": data,
                 "chat_instance": f"ci{message['chat']['id']}"}  # fmt: skip
        update = {"update_id": next(self._update_ids), "callback_query": query}
        self._newest_update_id = update["update_id"]
        self._updates.append(update)
        return query_id

    def forge_press(
        self, chat_id: int, data: str, *, user_id: int, chat_type: str = "private"
    ) -> str:
        """Queue a callback query a modified client could send: `data` of its choosing, on a
        bot message it claims is in `chat_id` (the owner's private chat, say), pressed by
        `user_id`; the callback query's id. Nothing checks that such a button exists."""
        with self._lock:
            chat: JSONDict = {"id": chat_id, "type": chat_type}
            chat |= {"first_name": "Owner"} if chat_type == "private" else {"title": "Test Group"}
            self._chats.setdefault(chat_id, chat)
            claimed = self._new_message(chat_id, self._bot_user(), text="Run this command?")
            user = {"id": user_id, "is_bot": False, "first_name": "Mallory", "username": "mallory"}
            query_id = self._queue_press(user, claimed, data)
        self._wake_threadsafe()
        return query_id

    def press_answers(self) -> list[JSONDict]:
        """answerCallbackQuery calls as ``{"callback_query_id", "text"}``, oldest first."""
        with self._lock:
            return [dict(a) for a in self._press_answers]

    def markup_edits(self, chat_id: int | None = None) -> list[JSONDict]:
        """editMessageReplyMarkup calls as ``{"chat_id", "message_id", "reply_markup"}``."""
        with self._lock:
            return [dict(e) for e in self._markup_edits if chat_id in (None, e["chat_id"])]

    def wait_for(self, check: Any, timeout: float = 10.0) -> Any:
        """Block until ``check()`` (called with the lock released) is truthy; its value."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if result := check():
                return result
            with self._changed:
                self._changed.wait(0.05)
        raise AssertionError(f"timed out after {timeout}s waiting for {check}")

    def _send_file(
        self, chat_id: int, kind: str, media: Any, caption: str, sender: Sender
    ) -> JSONDict:
        fields = {kind: media} | ({"caption": caption} if caption else {})
        return self._inbound(chat_id, fields, sender)

    def send_photo(
        self, chat_id: int, data: bytes, *, caption: str = "", **sender: Unpack[Sender]
    ) -> JSONDict:
        """Queue a user's photo; getFile + the file URL serve the bytes back."""
        with self._lock:
            media = self._media("photo", data, None, "image/jpeg")
        return self._send_file(chat_id, "photo", media, caption, sender)

    def send_document(
        self,
        chat_id: int,
        data: bytes,
        *,
        file_name: str,
        mime_type: str = "application/octet-stream",
        caption: str = "",
        **sender: Unpack[Sender],
    ) -> JSONDict:
        """Queue a user's document; getFile + the file URL serve the bytes back."""
        with self._lock:
            media = self._media("document", data, file_name, mime_type)
        return self._send_file(chat_id, "document", media, caption, sender)

    def send_album(
        self,
        chat_id: int,
        parts: list[bytes | tuple[str, bytes]],
        *,
        caption: str = "",
        media_group_id: str | None = None,
        **sender: Unpack[Sender],
    ) -> list[JSONDict]:
        """Queue an album as Telegram sends one: an update per part, each message with the same
        `media_group_id` and the caption on the first only. A part is a photo's bytes or a
        document's (file name, bytes). Pass the id of an album begun earlier to send more of
        it (its parts may come in different getUpdates answers)."""
        group = media_group_id or f"1357{next(self._file_ids)}"
        updates = []
        for number, part in enumerate(parts):
            with self._lock:
                if isinstance(part, bytes):
                    kind, media = "photo", self._media("photo", part, None, "image/jpeg")
                else:
                    kind, media = (
                        "document",
                        self._media("document", part[1], part[0], "text/plain"),
                    )
            fields: JSONDict = {kind: media, "media_group_id": group}
            if caption and number == 0:
                fields["caption"] = caption
            updates.append(self._inbound(chat_id, fields, sender))
        return updates

    def send_voice(
        self,
        chat_id: int,
        data: bytes,
        *,
        duration: int = 1,
        forwarded_from: str = "",
        **sender: Unpack[Sender],
    ) -> JSONDict:
        """Queue a user's voice note (`forwarded_from`: someone else's, forwarded); getFile +
        the file URL serve the bytes back."""
        return self._recording("voice", chat_id, data, duration, forwarded_from, sender)

    def send_audio(
        self,
        chat_id: int,
        data: bytes,
        *,
        file_name: str = "",
        mime_type: str = "audio/mpeg",
        duration: int = 1,
        caption: str = "",
        **sender: Unpack[Sender],
    ) -> JSONDict:
        """Queue a user's audio file (Bot API Audio: duration, file_name, mime_type)."""
        with self._lock:
            media = self._media("audio", data, file_name, mime_type) | {"duration": duration}
        return self._send_file(chat_id, "audio", media, caption, sender)

    def send_video_note(
        self,
        chat_id: int,
        data: bytes,
        *,
        duration: int = 1,
        forwarded_from: str = "",
        **sender: Unpack[Sender],
    ) -> JSONDict:
        """Queue a user's round video note (Bot API VideoNote: length, duration), or someone
        else's they forwarded."""
        return self._recording("video_note", chat_id, data, duration, forwarded_from, sender)

    def _recording(
        self,
        kind: str,
        chat_id: int,
        data: bytes,
        duration: int,
        forwarded_from: str,
        sender: Sender,
    ) -> JSONDict:
        mime = "audio/ogg" if kind == "voice" else None  # a VideoNote has no mime_type
        with self._lock:
            media = self._media(kind, data, None, mime) | {"duration": duration}
        return self._inbound(chat_id, {kind: media} | forwarded(forwarded_from), sender)

    # Outbound: what the bot did.

    def sent_messages(self, chat_id: int | None = None) -> list[JSONDict]:
        """Messages the bot sent (text, photo, document) and did not delete, in order, with
        edits applied."""
        with self._lock:
            return [dict(m) for m in self._sent if self._shown(m, chat_id)]

    @staticmethod
    def _shown(message: JSONDict, chat_id: int | None) -> bool:
        return chat_id in (None, message["chat"]["id"]) and not message.get("deleted")

    def drafts(self, chat_id: int | None = None) -> list[JSONDict]:
        """sendMessageDraft calls as ``{"chat_id", "draft_id", "text", "html", "at"}`` (``at``:
        time.monotonic() when it arrived), oldest first."""
        with self._lock:
            return [dict(d) for d in self._drafts if chat_id in (None, d["chat_id"])]

    def edits(self, chat_id: int | None = None) -> list[JSONDict]:
        """Successful editMessageText calls as ``{"chat_id", "message_id", "text", "html",
        "at"}``, oldest first."""
        with self._lock:
            return [dict(e) for e in self._edits if chat_id in (None, e["chat_id"])]

    def deleted_messages(self, chat_id: int | None = None) -> list[JSONDict]:
        with self._lock:
            return [
                dict(m)
                for m in self._sent
                if chat_id in (None, m["chat"]["id"]) and m.get("deleted")
            ]

    def set_draft_lifetime(self, seconds: float) -> None:
        """How long a draft shows, counted from the first sendMessageDraft with its id."""
        with self._lock:
            self._draft_lifetime_s = seconds

    def visible_draft(self, chat_id: int) -> JSONDict | None:
        """The draft the chat shows now: the newest one whose id is younger than the draft
        lifetime (None when every draft has expired, or none was sent)."""
        now = time.monotonic()
        with self._lock:
            first: dict[int, float] = {}
            for draft in self._drafts:
                if draft["chat_id"] == chat_id:
                    first.setdefault(draft["draft_id"], draft["at"])
            live = [
                d
                for d in self._drafts
                if d["chat_id"] == chat_id and now - first[d["draft_id"]] < self._draft_lifetime_s
            ]
            return dict(live[-1]) if live else None

    def set_drafts_known(self, known: bool) -> None:
        """When False, sendMessageDraft answers 404 "method not found", as before Bot API 9.3."""
        with self._lock:
            self._drafts_known = known

    def wait_for_messages(self, chat_id: int, count: int, timeout: float = 30.0) -> list[JSONDict]:
        """Block until the bot sent ``count`` messages to ``chat_id``; AssertionError if not.

        Never call it from the thread whose event loop runs the bot: use the async variant.
        """
        with self._changed:
            self._changed.wait_for(
                lambda: sum(self._shown(m, chat_id) for m in self._sent) >= count, timeout
            )
        if len(got := self.sent_messages(chat_id)) < count:
            texts = [m.get("text", m.get("caption")) for m in got]
            recent = [method for method, _ in self.calls if method != "getupdates"][-20:]
            raise AssertionError(
                f"expected {count} bot messages in chat {chat_id} within {timeout}s, "
                f"got {len(got)}: {texts!r}; recent calls: {recent}"
            )
        return got

    def wait_for_total(self, chat_ids: set[int], count: int, timeout: float = 30.0) -> int:
        """Block until the bot sent ``count`` messages in all of ``chat_ids`` together (or the
        timeout passed); how many it sent. Woken by each send: a caller polling
        :meth:`sent_messages` would copy every message each time, stealing the CPU of the
        bot it measures."""

        def sent() -> int:
            return sum(
                1 for m in self._sent if m["chat"]["id"] in chat_ids and not m.get("deleted")
            )

        with self._changed:
            self._changed.wait_for(lambda: sent() >= count, timeout)
            return sent()

    async def wait_for_messages_async(
        self, chat_id: int, count: int, timeout: float = 30.0
    ) -> list[JSONDict]:
        """:meth:`wait_for_messages` without blocking the caller's event loop."""
        return await asyncio.to_thread(self.wait_for_messages, chat_id, count, timeout)

    def last_update_id(self) -> int:
        """The id of the newest update made so far."""
        with self._lock:
            return self._newest_update_id

    def chat_actions(self, chat_id: int | None = None) -> list[JSONDict]:
        """sendChatAction calls as ``{"chat_id", "action"[, "message_thread_id"]}``."""
        with self._lock:
            return [dict(a) for a in self._actions if chat_id in (None, a["chat_id"])]

    # Acknowledgement bookkeeping: which updates the bot confirmed (the chaos suite's "acked").

    def _note_offset(self, offset: Any) -> None:
        """A getUpdates offset confirms every update before it; called with the lock held."""
        if isinstance(offset, int) and offset > self._ack_offset:
            self._ack_offset = offset

    def _note_dropped(self, updates: list[JSONDict]) -> None:
        """deleteWebhook(drop_pending_updates) consumes updates as surely as an offset does."""
        self._dropped.update(u["update_id"] for u in updates)

    def acknowledged(self, update_id: int) -> bool:
        """Whether Telegram would consider the update delivered (it will not send it again)."""
        with self._lock:
            return self._confirmed(update_id)

    def pending_updates(self) -> list[int]:
        """Ids of updates queued and not yet confirmed, oldest first."""
        with self._lock:
            return [u["update_id"] for u in self._updates if not self._confirmed(u["update_id"])]

    def _confirmed(self, update_id: int) -> bool:
        confirmed = update_id < self._ack_offset or update_id in self._dropped
        return confirmed or update_id in self._delivered

    # Fault injection.

    def fail_next(
        self,
        method: str,
        *,
        error_code: int = 429,
        description: str = "Too Many Requests: retry after 1",
        retry_after: int | None = 1,
        times: int = 1,
        chat_id: int | None = None,
        body: str | None = None,
        body_status: int = 200,
    ) -> None:
        """Make the next ``times`` calls of ``method`` (optionally for one chat) fail.

        ``retry_after`` is only sent with 429s, since PTB turns any retry_after into RetryAfter.
        ``body``, when given, is answered verbatim with HTTP ``body_status`` instead (a hostile
        server, or a proxy's error page).
        """
        retry_after = retry_after if error_code == 429 else None
        with self._lock:
            self._faults.setdefault(method.lower(), []).append(
                _Fault(error_code, description, retry_after, times, chat_id, body, body_status)
            )

    def reject_html_next(self, chat_id: int | None = None) -> None:
        """Make the next HTML sendMessage (to ``chat_id``, or to any chat) fail to parse."""
        with self._lock:
            self._html_rejects.append(chat_id)

    def set_token_valid(self, valid: bool) -> None:
        """When False, every method answers 401 Unauthorized."""
        with self._lock:
            self._token_valid = valid

    def pause_updates(self, paused: bool) -> None:
        """Simulate a stalled connection: getUpdates waits out its timeout while paused."""
        with self._lock:
            self._paused = paused
        self._wake_threadsafe()

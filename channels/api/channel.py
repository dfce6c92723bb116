"""The agent API: an OpenAI-compatible chat-completions endpoint on the gateway's HTTP server.

Each request is one turn of the session `api:<session_id>`; the reply is routed back to the
waiting request by the inbound message's id. An HTTP client waits on its connection, so the API
does not use the durable inbox: after a crash nobody would be there to receive a replayed
answer (the user's message is still saved in the session before the model is asked).
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import uuid
from collections import OrderedDict
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aiohttp import web
from loguru import logger

from channels.api.wire import (
    DONE,
    ERROR_STATUS,
    MODEL_ID,
    UPSTREAM,
    BadRequest,
    ChatRequest,
    chunk,
    completion,
    completion_id,
    error_body,
    event,
    parse_request,
    usage,
    usage_chunk,
)
from nanomem.agent import (
    STOPPED,
    BaseChannel,
    Capabilities,
    InboundMessage,
    MessageBus,
    OutboundMessage,
    parse_command,
    save_media,
)
from nanomem.audience import Sender, is_shared_room
from nanomem.config import ApiSettings, ConfigError, is_loopback
from nanomem.log import register_secrets

if TYPE_CHECKING:
    from collections.abc import Callable

    from nanomem.app import App

ABANDONED_KEPT = 1000  # turns whose client left, remembered to stop them if they start late
STOPPING = "stopping"  # our own error category: the gateway is shutting down
PARSE_IN_THREAD_BYTES = 256 * 1024
# The slowest a request body may come on average (after gateway.read_timeout_s of grace): a
# 20 MB body gets about 5 minutes, one of a few KB a few seconds more than the timeout.
MIN_BODY_RATE = 64 * 1024
PUBLIC_WITHOUT_KEYS = (
    "gateway.host is {host}, not a loopback address, and api.keys is empty: anyone who can "
    "reach it could use the agent; set api.keys (or NANOMEM_API__KEYS) or a loopback gateway.host"
)
SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}


@dataclass
class _Waiting:
    """A request waiting for its turn's messages."""

    chat: str
    is_stop: bool
    queue: asyncio.Queue[OutboundMessage] = field(default_factory=asyncio.Queue)
    gone: bool = False  # the client hung up


def _error(
    status: int, message: str, kind: str, code: str | None = None, param: Any = None
) -> web.Response:
    return web.json_response(error_body(message, kind, code, param), status=status)


def _model_error(msg: OutboundMessage) -> web.Response:
    category = str(msg.metadata.get("category", ""))
    if category == STOPPING:
        return _error(503, msg.content, "api_error", "gateway_stopping")
    status, kind, code = ERROR_STATUS.get(category, UPSTREAM)
    return _error(status, msg.content, kind, code)


def _rest(final: str, step_text: str, sent_any: bool) -> str:
    """What of the final reply the stream has not shown yet."""
    if step_text and final.startswith(step_text):
        return final[len(step_text) :]
    return ("\n\n" if sent_any and final else "") + final


class ApiChannel(BaseChannel):
    name = "api"
    # A reply goes to the request waiting for it: nothing can be pushed (no scheduled turns);
    # a streaming request shows it growing.
    capabilities = Capabilities(streams=True, same_connection=True)

    def __init__(
        self,
        settings: ApiSettings,
        *,
        workspace: Path,
        chat_model: str,
        max_message_chars: int,
        count_tokens: Callable[[str], int] = lambda text: len(text) // 4,
        read_timeout_s: float = 15.0,
    ) -> None:
        self.settings, self.workspace, self.chat_model = settings, workspace, chat_model
        self.max_message_chars, self.count_tokens = max_message_chars, count_tokens
        keys = [key.get_secret_value() for key in settings.keys]
        register_secrets(keys)
        self._keys = [hashlib.sha256(key.encode()).digest() for key in keys]
        self._limit = settings.max_body_mb * 1024 * 1024
        self._read_timeout_s = read_timeout_s
        self._bus: MessageBus | None = None
        self._taking = False
        self._waiting: dict[str, _Waiting] = {}  # by inbound message id, in publish order
        self._abandoned: OrderedDict[str, str] = OrderedDict()  # message id → chat
        self._background: set[asyncio.Task[None]] = set()
        self._created = int(datetime.now().timestamp())

    @classmethod
    def from_app(cls, app: App) -> ApiChannel:
        host = app.settings.gateway.host
        if not app.settings.api.keys and not is_loopback(host):
            raise ConfigError(PUBLIC_WITHOUT_KEYS.format(host=host or "(all addresses)"))
        return cls(
            app.settings.api,
            workspace=app.workspace,
            chat_model=app.settings.llm.model,
            max_message_chars=app.settings.agent.max_message_chars,
            count_tokens=app.budget.tokenizer.count,
            read_timeout_s=app.settings.gateway.read_timeout_s,
        )

    def routes(self, web_app: web.Application) -> None:
        web_app.router.add_post("/v1/chat/completions", self._chat)
        web_app.router.add_get("/v1/models", self._models)

    # Lifecycle.

    async def start(self, bus: MessageBus) -> None:
        self._bus, self._taking = bus, True
        if not self._keys:
            logger.warning("api: api.keys is empty: /v1 answers anyone who can reach it")

    async def stop_receiving(self) -> None:
        self._taking = False

    async def stop(self) -> None:
        for waiting in list(self._waiting.values()):  # turns the shutdown cut short
            note = "The gateway is stopping; please try again shortly."
            waiting.queue.put_nowait(
                OutboundMessage(
                    self.name, waiting.chat, note, "error", None, {"category": STOPPING}
                )
            )
        tasks = list(self._background)
        await asyncio.gather(*tasks, return_exceptions=True)

    async def send(self, msg: OutboundMessage) -> None:
        """Hand the message to the request waiting for it (no await: order is kept)."""
        reply_to = msg.reply_to or ""
        waiting = self._waiting.get(reply_to)
        if waiting is None:
            chat = self._abandoned.get(reply_to)
            if chat is not None and msg.kind in ("stream", "progress"):
                # Its client left before the turn began, so that /stop found nothing to stop.
                del self._abandoned[reply_to]
                self._stop_turn(chat)
            elif chat is not None and msg.kind in ("reply", "error"):
                del self._abandoned[reply_to]
            return
        waiting.queue.put_nowait(msg)
        if waiting.is_stop and msg.kind == "reply" and msg.content == STOPPED:
            # A stopped turn answers nothing: end the request of the chat's running turn here.
            for other in self._waiting.values():
                if other.chat == waiting.chat and not other.is_stop:
                    other.queue.put_nowait(
                        OutboundMessage(self.name, other.chat, "", metadata={"stopped": True})
                    )
                    break

    def _stop_turn(self, chat: str) -> None:
        """Stop the chat's turn as `/stop` does (its reply goes nowhere)."""
        if self._bus is None:
            return
        stop = InboundMessage(self.name, chat, "/stop", self._sender(chat))
        task = asyncio.get_running_loop().create_task(self._bus.publish_inbound(stop))
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    # HTTP.

    def _refused(self, request: web.Request) -> web.Response | None:
        if self._keys:
            scheme, _, token = request.headers.get("Authorization", "").partition(" ")
            if scheme.lower() != "bearer" or not self._known(token.strip()):
                message = (
                    "Incorrect or missing API key: send Authorization: Bearer <a key in api.keys>"
                )
                return _error(401, message, "invalid_request_error", "invalid_api_key")
        if self._bus is None or not self._taking:
            return _error(503, "The agent is not taking messages now.", "api_error", "unavailable")
        return None

    def _known(self, token: str) -> bool:
        """Whether the token is one of api.keys, in a time that tells nothing about either:
        digests of equal length, and every key compared (no early exit)."""
        given = hashlib.sha256(token.encode("utf-8", "surrogateescape")).digest()
        found = False
        for key in self._keys:
            found |= hmac.compare_digest(given, key)
        return found

    async def _models(self, request: web.Request) -> web.Response:
        if (refused := self._refused(request)) is not None:
            return refused
        model = {
            "id": MODEL_ID,
            "object": "model",
            "created": self._created,
            "owned_by": "nanomem",
            "description": f"the nanomem agent (memory and tools) on {self.chat_model}",
        }
        return web.json_response({"object": "list", "data": [model]})

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        if (refused := self._refused(request)) is not None:
            return refused
        try:
            body = await self._read_body(request)
            # A big body takes a while to check and parse: not on the loop /health answers from.
            big = len(body) > PARSE_IN_THREAD_BYTES
            parsed = await asyncio.to_thread(parse_request, body) if big else parse_request(body)
            if len(parsed.text) > self.max_message_chars:
                raise BadRequest(
                    f"the message is too long ({len(parsed.text)} characters; "
                    f"limit {self.max_message_chars}, agent.max_message_chars)"
                )
            media = (
                await asyncio.to_thread(
                    self._save_images, f"{self.name}:{parsed.session_id}", parsed.images
                )
                if parsed.images
                else ()
            )
        except BadRequest as exc:
            refusal = _error(exc.status, str(exc), "invalid_request_error", None, exc.param)
            if exc.status == 408:
                refusal.force_close()  # the rest of that body is not waited for
            return refusal
        assert self._bus is not None
        sender = self._sender(parsed.session_id)
        msg = InboundMessage(self.name, parsed.session_id, parsed.text, sender, media)
        command = parse_command(parsed.text)
        waiting = _Waiting(parsed.session_id, command is not None and command[0] == "stop")
        self._waiting[msg.id] = waiting
        answered = False
        try:
            await self._bus.publish_inbound(msg)
            if parsed.stream:
                response = await self._stream(request, waiting, parsed)
            else:
                response = await self._whole(waiting, parsed)
            answered = not waiting.gone
            return response
        finally:
            del self._waiting[msg.id]
            if not answered and not waiting.is_stop:  # the client hung up: stop its turn
                self._abandoned[msg.id] = waiting.chat
                while len(self._abandoned) > ABANDONED_KEPT:
                    self._abandoned.popitem(last=False)
                self._stop_turn(waiting.chat)

    @staticmethod
    def _sender(session_id: str) -> Sender:
        """The owner's: its clients hold the owner's api.keys; nobody waits on a request to
        answer a question, though."""
        return Sender(session_id, is_owner=True, shared_room=is_shared_room(f"api:{session_id}"))

    async def _read_body(self, request: web.Request) -> bytes:
        too_big = BadRequest(
            f"the request body is larger than {self.settings.max_body_mb} MB (api.max_body_mb)",
            status=413,
        )
        if request.content_length is not None and request.content_length > self._limit:
            raise too_big
        body = bytearray()
        # A body that stops arriving would hold its connection for ever, and so would one
        # trickled in a byte at a time just under the timeout: each read waits at most
        # gateway.read_timeout_s, and the whole body gets that plus MIN_BODY_RATE's time.
        size = request.content_length if request.content_length is not None else self._limit
        loop = asyncio.get_running_loop()
        whole = loop.time() + self._read_timeout_s + size / MIN_BODY_RATE
        while True:
            try:
                async with asyncio.timeout_at(min(whole, loop.time() + self._read_timeout_s)):
                    piece = await request.content.readany()
            except TimeoutError:
                raise BadRequest(
                    f"the request body stopped arriving for {self._read_timeout_s:g} s, or "
                    f"came slower than {MIN_BODY_RATE // 1024} KiB/s (gateway.read_timeout_s)",
                    status=408,
                ) from None
            if not piece:
                return bytes(body)
            body += piece
            if len(body) > self._limit:
                raise too_big

    def _save_images(self, session: str, images: list[tuple[str, bytes]]) -> tuple[str, ...]:
        """In the chat's media folder, as Telegram's files are; the paths go to the turn."""
        saved = []
        for suffix, data in images:
            name = f"{datetime.now():%Y-%m-%d}-api-{uuid.uuid4().hex[:12]}{suffix}"
            try:
                saved.append(save_media(self.workspace, session, name, data))
            except OSError as exc:
                logger.warning("api: could not save an image under media/: {}", exc)
                raise BadRequest(
                    "the image could not be saved under the workspace's media/ folder "
                    "(is it a link?); nothing was sent to the agent",
                    status=500,  # not the client's doing: the workspace's
                ) from None
        return tuple(saved)

    async def _whole(self, waiting: _Waiting, parsed: ChatRequest) -> web.Response:
        step, step_text = None, ""
        while True:
            msg = await waiting.queue.get()
            if msg.kind == "stream":
                if msg.metadata.get("step") != step:
                    step, step_text = msg.metadata.get("step"), ""
                step_text += msg.content
            elif msg.kind == "error" and msg.metadata.get("category"):
                return _model_error(msg)
            elif msg.kind in ("reply", "error"):
                text = step_text if msg.metadata.get("stopped") else msg.content
                used = usage(self.count_tokens(parsed.text), self.count_tokens(text))
                body = completion(completion_id(), text, used, msg.buttons)
                return web.json_response(body)

    async def _stream(
        self, request: web.Request, waiting: _Waiting, parsed: ChatRequest
    ) -> web.StreamResponse:
        """SSE in OpenAI's chunk format. Headers go out with the first piece, so a model error
        before any text still gets its own HTTP status."""
        cid = completion_id()
        response: web.StreamResponse | None = None
        step: Any = None
        step_text, shown = "", ""

        async def write(data: bytes) -> None:
            nonlocal response
            if response is None:
                response = web.StreamResponse(headers=SSE_HEADERS)
                await response.prepare(request)
                await response.write(chunk(cid, {"role": "assistant", "content": ""}))
            await response.write(data)

        try:
            while True:
                msg = await waiting.queue.get()
                if msg.kind == "stream":
                    piece = msg.content
                    if msg.metadata.get("step") != step:
                        step, step_text = msg.metadata.get("step"), ""
                        piece = ("\n\n" if shown else "") + piece  # a later step's text
                    step_text += msg.content
                    shown += piece
                    await write(chunk(cid, {"content": piece}))
                elif msg.kind == "progress":
                    if self.settings.show_progress:
                        line = ("\n\n" if shown else "") + f"`{msg.content}`"
                        shown += line
                        step, step_text = None, ""
                        await write(chunk(cid, {"content": line}))
                elif msg.kind == "error" and msg.metadata.get("category") and response is None:
                    return _model_error(msg)
                else:
                    final = "" if msg.metadata.get("stopped") else msg.content
                    if msg.kind == "error" and msg.metadata.get("category"):
                        body = error_body(msg.content, "api_error", str(msg.metadata["category"]))
                        await write(event(body))
                        await write(DONE)
                        return response or web.Response()
                    if rest := _rest(final, step_text, bool(shown)):
                        await write(chunk(cid, {"content": rest}))
                    await write(chunk(cid, {}, "stop"))
                    if parsed.include_usage:
                        text = shown + rest
                        used = usage(self.count_tokens(parsed.text), self.count_tokens(text))
                        await write(usage_chunk(cid, used))
                    await write(DONE)
                    assert response is not None
                    await response.write_eof()
                    return response
        except ConnectionError:  # the client hung up between two pieces
            waiting.gone = True
            return response or web.Response()

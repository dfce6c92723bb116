"""The agent API: an OpenAI-compatible chat-completions endpoint on the gateway's HTTP server.

Each request is one turn of the session `api:<session_id>`, or the next step of a turn that
waits for the client's own tools (the request brings their results): the channel calls the
core directly (`AgentLoop.answer`) and writes the reply, and the pieces before it, to the
waiting request (channels/api/replies.py). No bus, no inbox: an HTTP client waits on its connection,
and after a crash nobody would be there to receive a replayed answer (the user's message is
still saved in the session before the model is asked). A client that hangs up cancels its
handler, and so its turn.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import hmac
import os
import uuid
from collections.abc import Awaitable, Callable
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from aiohttp import web
from loguru import logger

from channels.api.files import SentFiles
from channels.api.http_errors import openai_errors, refusal
from channels.api.replies import Answer, Pieces, streamed, whole
from channels.api.request import parse_request
from channels.api.responses import respond
from channels.api.wire import (
    MODEL_ID,
    BadRequest,
    ChatRequest,
    Names,
    Upload,
    error_body,
    fits,
    image_suffix,
)
from nanomem.agent import (
    BaseChannel,
    Capabilities,
    ClientTurn,
    InboundMessage,
    OutboundMessage,
    save_media,
)
from nanomem.app import FetchFailed, fetch_guarded
from nanomem.audience import Sender
from nanomem.config import ENV_DELIMITER, ENV_PREFIX, ApiSettings, ConfigError
from nanomem.log import register_secrets
from nanomem.text.inflate import READ, BrokenEncoding, Inflate, UnknownEncoding
from nanomem.text.plural import plural

if TYPE_CHECKING:
    from nanomem.app import App

# GET an image URL a client sent: (media type, bytes), at most that many bytes; FetchFailed
# (nanomem.app) when it cannot or may not be fetched. The gateway's: nanomem.app.fetch_guarded.
Fetch = Callable[[str, int], Awaitable[tuple[str, bytes]]]
PARSE_IN_THREAD_BYTES = 256 * 1024
Parsed = TypeVar("Parsed")
NAMES = Names("messages", "tool results", "system and developer messages", "messages")
# The slowest a request body may come on average (after gateway.read_timeout_s of grace): a
# 20 MB body gets about 5 minutes, one of a few KB a few seconds more than the timeout.
MIN_BODY_RATE = 64 * 1024
# Not even on loopback: every program of this machine's users reaches it there, a shell
# command the agent runs for a group included. `nanomem gateway` makes a key where none is.
WITHOUT_KEYS = "api.keys is empty: the agent API always needs a key (api.keys, NANOMEM_API__KEYS)"


def _json_or_nothing(request: web.Request) -> None:
    """A body said to be JSON, or said to be nothing in particular (read as JSON). Another
    type is a 415 as OpenAI's error JSON: `curl -d` sends a form's type unless told."""
    if "Content-Type" not in request.headers:
        return
    kind = request.content_type
    if kind == "application/json" or (kind.startswith("application/") and kind.endswith("+json")):
        return
    raise BadRequest(
        f"the request body is {kind[:80]}; send JSON, with Content-Type: application/json",
        status=415,
    )


def _error(
    status: int, message: str, kind: str, code: str | None = None, param: Any = None
) -> web.Response:
    return web.json_response(error_body(message, kind, code, param), status=status)


class ApiChannel(BaseChannel):
    name = "api"
    # A reply goes to the request waiting for it: nothing can be pushed (no scheduled turns);
    # a streaming request shows it growing. A file becomes a link in it (/v1/files/<id>).
    capabilities = Capabilities(streams=True, buttons=True, files=True, same_connection=True)

    def __init__(
        self,
        settings: ApiSettings,
        *,
        answer: Answer,
        workspace: Path,
        chat_model: str,
        max_message_chars: int,
        count_tokens: Callable[[str], int] = lambda text: len(text) // 4,
        read_timeout_s: float = 15.0,
        fetch: Fetch | None = None,
        sent_files: Path | None = None,
    ) -> None:
        self.settings, self.workspace, self.chat_model = settings, workspace, chat_model
        self.max_message_chars, self.count_tokens = max_message_chars, count_tokens
        keys = [key.get_secret_value() for key in settings.keys]
        register_secrets(keys)
        self._keys = [hashlib.sha256(key.encode()).digest() for key in keys]
        self._limit = settings.max_body_mb * 1024 * 1024
        self._read_timeout_s = read_timeout_s
        self._answer = answer
        self._fetch = fetch
        self._taking = False
        self._created = int(datetime.now().timestamp())
        self.files = SentFiles(sent_files or workspace.parent / "sent-files", workspace)

    @classmethod
    def from_app(cls, app: App) -> ApiChannel:
        if not app.settings.api.keys:
            raise ConfigError(WITHOUT_KEYS)
        return cls(
            app.settings.api,
            answer=app.loop.answer,
            workspace=app.workspace,
            chat_model=app.settings.llm.model,
            max_message_chars=app.settings.agent.max_message_chars,
            count_tokens=app.budget.tokenizer.count,
            read_timeout_s=app.settings.gateway.read_timeout_s,
            fetch=functools.partial(fetch_guarded, app.settings.tools.web),
            sent_files=app.home.sent_files,
        )

    def routes(self, web_app: web.Application) -> None:
        web_app.middlewares.append(openai_errors)
        web_app.router.add_post("/v1/chat/completions", self._chat)
        web_app.router.add_post("/v1/responses", functools.partial(respond, self))
        web_app.router.add_get("/v1/models", self._models)
        web_app.router.add_get("/v1/models/{model_id}", self._model)
        web_app.router.add_get("/v1/files/{file_id}", self._file)

    def listens(self, server: str) -> str:
        # Where the keys were read from: a variable wins over the file (config.py).
        variable = f"{ENV_PREFIX}API{ENV_DELIMITER}KEYS"
        given = any(name.upper() == variable for name in os.environ)
        source = variable if given else "the config file"
        return f"OpenAI-compatible API, base URL {server}/v1 (a key from {source})"

    # Lifecycle.

    async def start(self, bus: Any) -> None:
        """Its requests call the core directly: the bus is not used."""
        self._taking = True

    async def stop_receiving(self) -> None:
        self._taking = False

    async def stop(self) -> None:
        return None  # turns still running are the loop's: it ends them, and each says so

    async def send(self, msg: OutboundMessage) -> None:
        """Nothing comes this way: replies go to the request that asked (never a push, and a
        question is never asked of an API client)."""

    # HTTP.

    def _refused(self, request: web.Request) -> web.Response | None:
        scheme, _, token = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not self._known(token.strip()):  # no keys: nobody
            message = "Incorrect or missing API key: send Authorization: Bearer <a key in api.keys>"
            return _error(401, message, "invalid_request_error", "invalid_api_key")
        if not self._taking:
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

    def _model_json(self) -> dict[str, Any]:
        return {
            "id": MODEL_ID,
            "object": "model",
            "created": self._created,
            "owned_by": "nanomem",
            "description": f"the nanomem agent (memory and tools) on {self.chat_model}",
        }

    async def _models(self, request: web.Request) -> web.Response:
        if (refused := self._refused(request)) is not None:
            return refused
        return web.json_response({"object": "list", "data": [self._model_json()]})

    async def _model(self, request: web.Request) -> web.Response:
        if (refused := self._refused(request)) is not None:
            return refused
        if (asked := request.match_info["model_id"]) != MODEL_ID:
            message = f"The model '{asked[:100]}' does not exist; this server has '{MODEL_ID}'"
            return _error(404, message, "invalid_request_error", "model_not_found", "model")
        return web.json_response(self._model_json())

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        if (refused := self._refused(request)) is not None:
            return refused
        try:
            body = await self._read_body(request)
            parse = functools.partial(parse_request, body, self.settings.max_parts, request.headers)
            parsed = await self._parse(body, parse)
            fits(parsed, self.max_message_chars, NAMES)
            media = await self._media(parsed) if parsed.uploads else ()
        except BadRequest as exc:
            return refusal(exc)
        if parsed.superseded:
            logger.info(
                "api: {} before the new message in api:{} not read (the new message ends "
                "the turn that waited for them)",
                plural(parsed.superseded, "tool result"),
                parsed.session_id,
            )
        msg = self._inbound(parsed, media)
        pieces = Pieces(self._answer, msg, functools.partial(self.files.link, request))
        try:
            if parsed.stream:
                return await streamed(request, pieces, parsed, self.settings, self.count_tokens)
            return await whole(pieces, parsed, self.count_tokens)
        finally:
            pieces.cancel()  # the client hung up (its handler is cancelled), or it is over

    async def _file(self, request: web.Request) -> web.StreamResponse:
        if (refused := self._refused(request)) is not None:
            return refused
        return await self.files.response(request.match_info["file_id"])

    @staticmethod
    async def _parse(body: bytes, parse: Callable[[], Parsed]) -> Parsed:
        """A request parsed; a big body in a thread: it takes a while to check and parse, and
        not on the loop /health answers from."""
        return await asyncio.to_thread(parse) if len(body) > PARSE_IN_THREAD_BYTES else parse()

    def _inbound(
        self, parsed: ChatRequest, media: tuple[str, ...], reply_id: str = "", follows: str = ""
    ) -> InboundMessage:
        """The core's message for a request to either route, with what the client adds to
        its turn (`reply_id` and `follows`: the Responses API's)."""
        client = ClientTurn(
            tools=parsed.tools,
            tool_choice=parsed.tool_choice,
            instructions=parsed.instructions,
            options=parsed.options,
            results=parsed.results,
            wait_s=self.settings.tool_wait_s,
            reply_id=reply_id,
            follows=follows,
        )
        return InboundMessage(
            self.name,
            parsed.session_id,
            parsed.text,
            self._sender(parsed),
            media,
            id=parsed.message_id,
            replayed=parsed.replayed,
            client=client,
        )

    @staticmethod
    def _sender(parsed: ChatRequest) -> Sender:
        """The owner's: its clients hold the owner's api.keys; nobody waits on a request to
        answer a question, though. Never a shared room (a session id never starts with -)."""
        return Sender(parsed.session_id, is_owner=True)

    async def _read_body(self, request: web.Request) -> bytes:
        """The body of a request to either route, as it was sent (inflated), or a refusal."""
        _json_or_nothing(request)
        too_big = BadRequest(
            f"the request body is larger than {self.settings.max_body_mb} MB (api.max_body_mb)",
            status=413,
        )
        if request.content_length is not None and request.content_length > self._limit:
            raise too_big
        try:
            inflate = Inflate(request.headers.get("Content-Encoding", ""))
        except UnknownEncoding as exc:
            raise BadRequest(
                f"the request body is in an encoding nanomem does not read ({exc}); "
                f"send it as it is, or in {' or '.join(READ)}",
                status=415,
                headers={"Accept-Encoding": ", ".join(READ)},  # what it could send (RFC 7694)
            ) from None
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
            try:
                if not piece:
                    inflate.finish()
                    return bytes(body)
                if inflate.coding != "identity":  # KBs that inflate to MBs: off the loop
                    piece = await asyncio.to_thread(inflate.take, piece, self._limit - len(body))
                body += piece
            except BrokenEncoding as exc:
                raise BadRequest(f"the request body is {exc}") from None
            if len(body) > self._limit:
                raise too_big

    async def _media(self, parsed: ChatRequest) -> tuple[str, ...]:
        """The message's files saved in the chat's media folder, as Telegram's are (paths for
        the turn): image URLs fetched first, so a refused one leaves nothing saved."""
        uploads, room = [], self._limit  # what all fetched images may come to together
        for upload in parsed.uploads:
            if upload.url:
                upload = await self._fetched(upload, room)
                room -= len(upload.data)
            uploads.append(upload)
        session = f"{self.name}:{parsed.session_id}"
        return await asyncio.to_thread(self._save, session, uploads)

    async def _fetched(self, upload: Upload, room: int) -> Upload:
        if self._fetch is None:
            raise BadRequest(f"{upload.where}: image URLs are not fetched here", param=upload.where)
        try:
            _, data = await self._fetch(upload.url, max(room, 0))
        except FetchFailed as exc:
            # The reason, never the URL: its query may carry someone's key.
            shared = room < self._limit  # earlier images of the request took some of it
            note = " (what api.max_body_mb left for the images fetched together)" if shared else ""
            raise BadRequest(
                f"{upload.where}: the image URL could not be fetched: {exc}{note}",
                param=upload.where,
            ) from None
        return Upload(upload.where, image_suffix(data, upload.where), data)

    def _save(self, session: str, uploads: list[Upload]) -> tuple[str, ...]:
        """All of them or none: a file saved before one that fails is removed again."""
        saved: list[str] = []
        for upload in uploads:
            name = f"{datetime.now():%Y-%m-%d}-api-{uuid.uuid4().hex[:12]}{upload.suffix}"
            try:
                saved.append(save_media(self.workspace, session, name, upload.data, False))
            except OSError as exc:
                logger.warning("api: could not save a file under media/: {}", exc)
                for path in saved:
                    (self.workspace / path).unlink(missing_ok=True)
                raise BadRequest(
                    f"{upload.where} could not be saved under the workspace's media/ folder "
                    "(is it a link?); nothing was sent to the agent",
                    status=500,  # not the client's doing: the workspace's
                ) from None
        return tuple(saved)

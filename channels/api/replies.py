"""An agent API request's answer: its turn's pieces as they come, then the reply, written as
one JSON completion or as server-sent events in OpenAI's chunk format."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from channels.api.wire import (
    DONE,
    Call,
    ChatRequest,
    call_deltas,
    chunk,
    completion,
    completion_id,
    error_body,
    event,
    failure,
    usage,
    usage_chunk,
)
from nanomem.agent import (
    STOPPING,
    STOPPING_NOTE,
    Delta,
    File,
    InboundMessage,
    OutboundMessage,
    Paused,
    Progress,
    Text,
)
from nanomem.config import ApiSettings

SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
Count = Callable[[str], int]
Answer = Callable[[InboundMessage, Callable[[OutboundMessage], Awaitable[None]]], Awaitable[Any]]


@dataclass(frozen=True)
class Link:
    """A file the turn sent, as Markdown: `[report.csv](https://host/v1/files/<id>)`."""

    markdown: str


# A file the turn sends → its link (the file kept for `GET /v1/files/<id>` meanwhile).
Linker = Callable[[File], Awaitable[str]]


@dataclass(frozen=True)
class Final:
    """The turn is over: its reply (None when a /stop cut it short)."""

    reply: OutboundMessage | None


class Pieces:
    """A request's turn, running in the core, and what it shows, in order: pieces, then Final."""

    def __init__(self, answer: Answer, msg: InboundMessage, link: Linker | None = None) -> None:
        self._queue: asyncio.Queue[OutboundMessage | Link | Final] = asyncio.Queue()
        self._link = link
        self._turn = asyncio.ensure_future(self._run(answer, msg))

    async def _run(self, answer: Answer, msg: InboundMessage) -> None:
        async def show(piece: OutboundMessage) -> None:
            if isinstance(piece.part, File):
                # Kept before the tool returns: the link serves the file as it was sent.
                if self._link is not None:
                    self._queue.put_nowait(Link(await self._link(piece.part)))
                return
            self._queue.put_nowait(piece)  # never waits, never raises: the turn goes on

        try:
            self._queue.put_nowait(Final(await answer(msg, show)))
        except asyncio.CancelledError:  # the gateway stopped it, or the client left
            stopping = Text(STOPPING_NOTE, "error", category=STOPPING)
            self._queue.put_nowait(Final(OutboundMessage.answering(msg, stopping)))
            raise

    async def next(self) -> OutboundMessage | Link | Final:
        return await self._queue.get()

    def cancel(self) -> None:
        """Stop the turn if it still runs (what was said so far is kept, as with /stop)."""
        self._turn.cancel()


def _error(status: int, message: str, kind: str, code: str | None = None) -> web.Response:
    return web.json_response(error_body(message, kind, code), status=status)


def model_error(reply: Text) -> web.Response | None:
    """The HTTP error for a turn that failed (the model's fault, the client's request, or a
    stop); None otherwise."""
    if (failed := failure(reply)) is None:
        return None
    status, kind, code = failed
    return _error(status, reply.text, kind, code)


def final_reply(final: Final) -> Text | Paused | None:
    """The turn's reply: a Text, the client's calls it waits for, or None (a /stop)."""
    reply = final.reply
    if reply is None:
        return None
    return reply.part if isinstance(reply.part, Text | Paused) else Text(reply.content)


def _finish(reply: Text | Paused | None) -> str:
    if isinstance(reply, Paused):
        return "tool_calls"
    return "length" if reply is not None and reply.truncated else "stop"


def _calls(reply: Text | Paused | None) -> tuple[Call, ...]:
    return reply.calls if isinstance(reply, Paused) else ()


def _said(calls: tuple[Call, ...]) -> str:
    """The calls as the completion's tokens count them: their names and arguments."""
    return "".join(call.name + call.arguments for call in calls)


async def gathered(pieces: Pieces) -> tuple[Text | Paused | None, str, list[str]]:
    """A reply written whole, either API's: the turn's reply (None: a /stop), the text of its
    last step so far (what a /stop leaves of it) and the links to the files it sent."""
    step, step_text = None, ""
    links: list[str] = []
    while not isinstance(item := await pieces.next(), Final):
        if isinstance(item, Link):
            links.append(item.markdown)
        elif isinstance(piece := item.part, Delta):
            if piece.step != step:
                step, step_text = piece.step, ""
            step_text += piece.piece
    return final_reply(item), step_text, links


async def whole(pieces: Pieces, parsed: ChatRequest, count: Count) -> web.Response:
    """One JSON completion: the reply, or what was written before a /stop."""
    reply, step_text, links = await gathered(pieces)
    if isinstance(reply, Text) and (failed := model_error(reply)) is not None:
        return failed
    text = "\n\n".join([step_text if reply is None else reply.text, *links]).strip()
    calls = _calls(reply)
    used = usage(count(parsed.said), count(text + _said(calls)))
    buttons = reply.buttons if isinstance(reply, Text) else ()
    answer = completion(completion_id(), text, used, buttons, calls, _finish(reply))
    return web.json_response(answer)


def _rest(final: str, step_text: str, sent_any: bool) -> str:
    """What of the final reply the stream has not shown yet."""
    if step_text and final.startswith(step_text):
        return final[len(step_text) :]
    return ("\n\n" if sent_any and final else "") + final


async def streamed(
    request: web.Request, pieces: Pieces, parsed: ChatRequest, settings: ApiSettings, count: Count
) -> web.StreamResponse:
    """SSE in OpenAI's chunk format. Headers go out with the first piece, so a model error
    before any text still gets its own HTTP status."""
    cid = completion_id()
    response: web.StreamResponse | None = None
    step: int | None = None
    step_text, shown = "", ""
    piece = functools.partial(chunk, cid, usage_later=parsed.include_usage)

    async def write(data: bytes) -> None:
        nonlocal response
        if response is None:
            response = web.StreamResponse(headers=SSE_HEADERS)
            await response.prepare(request)
            await response.write(piece({"role": "assistant", "content": ""}))
        await response.write(data)

    try:
        while not isinstance(item := await pieces.next(), Final):
            if isinstance(item, Link):  # as a piece of its own, where the turn sent it
                line = ("\n\n" if shown else "") + item.markdown
                shown += line
                step, step_text = None, ""
                await write(piece({"content": line}))
                continue
            part = item.part
            if isinstance(part, Delta):
                text = part.piece
                if part.step != step:
                    step, step_text = part.step, ""
                    text = ("\n\n" if shown else "") + text  # a later step's text
                step_text += part.piece
                shown += text
                await write(piece({"content": text}))
            elif isinstance(part, Progress) and settings.show_progress:
                line = ("\n\n" if shown else "") + f"`{part.line}`"
                shown += line
                step, step_text = None, ""
                await write(piece({"content": line}))
        reply = final_reply(item)
        if isinstance(reply, Text) and (failed := failure(reply)) is not None:
            if response is None:
                return model_error(reply) or web.Response()
            _, kind, code = failed
            await write(event(error_body(reply.text, kind, code)))
            await write(DONE)
            return response
        final = "" if reply is None else reply.text
        if rest := _rest(final, step_text, bool(shown)):
            await write(piece({"content": rest}))
        calls = _calls(reply)
        for delta in call_deltas(calls):
            await write(piece(delta))
        await write(piece({}, _finish(reply)))
        if parsed.include_usage:
            used = usage(count(parsed.said), count(shown + rest + _said(calls)))
            await write(usage_chunk(cid, used))
        await write(DONE)
        assert response is not None
        await response.write_eof()
        return response
    except ConnectionError:  # the client hung up between two pieces: its turn is stopped
        pieces.cancel()
        return response or web.Response()

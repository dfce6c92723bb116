"""A Responses API request's answer: its turn's pieces as they come, then the response object,
written whole or as the `response.*` server-sent events, in OpenAI's shapes (the openai SDK's
types/responses/ define every one)."""

from __future__ import annotations

import hashlib
import json
import secrets
import time
from collections.abc import Callable
from typing import Any

from aiohttp import web

from channels.api.replies import (
    SSE_HEADERS,
    Final,
    Link,
    Pieces,
    final_reply,
    gathered,
    model_error,
)
from channels.api.responses_wire import ResponsesRequest
from channels.api.wire import MODEL_ID, failure
from nanomem.agent import Button, Delta, Paused, Text

Count = Callable[[str], int]


class Shapes:
    """The objects of one response: its items and the response itself, as OpenAI writes them."""

    def __init__(self, rid: str, parsed: ResponsesRequest, count: Count) -> None:
        self.rid, self.parsed, self.count = rid, parsed, count
        self.created_at = int(time.time())
        self.message_id = f"msg_{secrets.token_hex(24)}"

    def response(
        self,
        status: str,
        output: list[dict[str, Any]],
        *,
        reason: str | None = None,
        error: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        done = status in ("completed", "incomplete", "failed")
        return {
            "id": self.rid,
            "object": "response",
            "created_at": self.created_at,
            "status": status,
            "completed_at": int(time.time()) if status == "completed" else None,
            "error": error,
            "incomplete_details": {"reason": reason} if status == "incomplete" else None,
            "model": MODEL_ID,
            "output": output,
            "usage": self.usage(output) if done else None,
            "background": False,
            **self.parsed.echo,
        }

    def message(
        self, text: str, status: str = "completed", buttons: tuple[Button, ...] = ()
    ) -> dict[str, Any]:
        item: dict[str, Any] = {
            "type": "message",
            "id": self.message_id,
            "status": status,
            "role": "assistant",
            "content": [] if status == "in_progress" else [self.text_part(text)],
        }
        if buttons:  # nanomem's own field (clients ignore it): what a button would send
            item["buttons"] = [{"label": b.label, "command": b.command} for b in buttons]
        return item

    @staticmethod
    def text_part(text: str) -> dict[str, Any]:
        return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}

    @staticmethod
    def call(call_id: str, name: str, arguments: str, status: str = "completed") -> dict[str, Any]:
        return {
            "type": "function_call",
            # The same item whenever the call is shown (a retry answered from the session).
            "id": f"fc_{hashlib.sha256(call_id.encode()).hexdigest()[:48]}",
            "call_id": call_id,
            "name": name,
            "arguments": "" if status == "in_progress" else arguments,
            "status": status,
        }

    def output(self, reply: Text | Paused | None, text: str) -> list[dict[str, Any]]:
        calls = reply.calls if isinstance(reply, Paused) else ()
        buttons = reply.buttons if isinstance(reply, Text) else ()
        items = [self.message(text, buttons=buttons)] if text or not calls else []
        return items + [self.call(call.id, call.name, call.arguments) for call in calls]

    def usage(self, output: list[dict[str, Any]]) -> dict[str, Any]:
        turn = self.parsed.turn
        given = self.count(turn.text) + sum(self.count(r.content) for r in turn.results)
        written = 0
        for item in output:
            if item["type"] == "message":
                written += sum(self.count(part["text"]) for part in item["content"])
            else:
                written += self.count(item["arguments"])
        return {
            "input_tokens": given,
            "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
            "output_tokens": written,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": given + written,
        }


def _ending(reply: Text | Paused | None) -> tuple[str, str | None]:
    """(status, incomplete reason) of a turn's answer."""
    if reply is None:
        return "incomplete", None  # stopped before its answer
    if isinstance(reply, Text) and reply.truncated:
        return "incomplete", "max_output_tokens"
    return "completed", None


async def whole(pieces: Pieces, shapes: Shapes) -> web.Response:
    """One response object: the reply, or what was written before a /stop."""
    reply, step_text, links = await gathered(pieces)
    if isinstance(reply, Text) and (refused := model_error(reply)) is not None:
        return refused
    said = step_text if reply is None else reply.text
    text = "\n\n".join([said, *links]).strip()
    status, reason = _ending(reply)
    return web.json_response(shapes.response(status, shapes.output(reply, text), reason=reason))


class Events:
    """The server-sent events of one streamed response, numbered in order."""

    def __init__(self, request: web.Request) -> None:
        self.request = request
        self.response: web.StreamResponse | None = None
        self.number = 0

    async def send(self, kind: str, **fields: Any) -> None:
        if self.response is None:
            self.response = web.StreamResponse(headers=SSE_HEADERS)
            await self.response.prepare(self.request)
        body = {"type": kind, "sequence_number": self.number, **fields}
        self.number += 1
        data = json.dumps(body, ensure_ascii=False)
        await self.response.write(f"event: {kind}\ndata: {data}\n\n".encode())


class Streamed:
    """A streamed response: created and in progress with its first piece (so a failure before
    any still gets its own HTTP status), the message's text as it grows, then the calls."""

    def __init__(self, request: web.Request, shapes: Shapes) -> None:
        self.events, self.shapes = Events(request), shapes
        self.shown = ""  # the message's text so far
        self.opened = False

    async def begin(self) -> None:
        if self.events.response is None:
            await self.events.send(
                "response.created", response=self.shapes.response("in_progress", [])
            )
            await self.events.send(
                "response.in_progress", response=self.shapes.response("in_progress", [])
            )

    async def open(self) -> None:
        """The message item and its text part, before its first piece."""
        await self.begin()
        if self.opened:
            return
        self.opened = True
        item = self.shapes.message("", "in_progress")
        await self.events.send("response.output_item.added", output_index=0, item=item)
        await self.events.send(
            "response.content_part.added",
            item_id=self.shapes.message_id,
            output_index=0,
            content_index=0,
            part=self.shapes.text_part(""),
        )

    async def write(self, piece: str) -> None:
        await self.open()
        self.shown += piece
        await self.events.send(
            "response.output_text.delta",
            item_id=self.shapes.message_id,
            output_index=0,
            content_index=0,
            delta=piece,
            logprobs=[],
        )

    async def finish(self, reply: Text | Paused | None) -> web.StreamResponse:
        await self.begin()
        calls = reply.calls if isinstance(reply, Paused) else ()
        output: list[dict[str, Any]] = []
        if self.opened or not calls:
            await self.open()  # an empty answer is still a message
            where = {"item_id": self.shapes.message_id, "output_index": 0, "content_index": 0}
            text = self.shown
            await self.events.send("response.output_text.done", **where, text=text, logprobs=[])
            part = self.shapes.text_part(text)
            await self.events.send("response.content_part.done", **where, part=part)
            buttons = reply.buttons if isinstance(reply, Text) else ()
            output.append(self.shapes.message(text, buttons=buttons))
            await self.events.send("response.output_item.done", output_index=0, item=output[-1])
        for call in calls:
            at = {"output_index": len(output)}
            item = self.shapes.call(call.id, call.name, call.arguments)
            started = self.shapes.call(call.id, call.name, call.arguments, "in_progress")
            await self.events.send("response.output_item.added", **at, item=started)
            where = {"item_id": item["id"], **at}
            await self.events.send(
                "response.function_call_arguments.delta", **where, delta=call.arguments
            )
            await self.events.send(
                "response.function_call_arguments.done",
                **where,
                name=call.name,
                arguments=call.arguments,
            )
            output.append(item)
            await self.events.send("response.output_item.done", **at, item=item)
        status, reason = _ending(reply)
        response = self.shapes.response(status, output, reason=reason)
        await self.events.send(f"response.{status}", response=response)
        assert self.events.response is not None
        await self.events.response.write_eof()
        return self.events.response

    async def fail(self, reply: Text, failed: tuple[int, str, str | None]) -> web.StreamResponse:
        """A failure after the stream began: an error event, then the response failed."""
        code = failed[2] or failed[1]
        await self.events.send("error", code=code, message=reply.text, param=None)
        limited = reply.category in ("rate_limited", "quota")
        error = {
            "code": "rate_limit_exceeded" if limited else "server_error",
            "message": reply.text,
        }
        output = [self.shapes.message(self.shown, "incomplete")] if self.opened else []
        failed_response = self.shapes.response("failed", output, error=error)
        await self.events.send("response.failed", response=failed_response)
        assert self.events.response is not None
        await self.events.response.write_eof()
        return self.events.response


async def streamed(request: web.Request, pieces: Pieces, shapes: Shapes) -> web.StreamResponse:
    stream = Streamed(request, shapes)
    step: int | None = None
    step_text = ""
    try:
        while not isinstance(item := await pieces.next(), Final):
            if isinstance(item, Link):  # where the turn sent it, in the message's text
                await stream.write(("\n\n" if stream.shown else "") + item.markdown)
                step, step_text = None, ""
            elif isinstance(part := item.part, Delta):
                piece = part.piece
                if part.step != step:
                    step, step_text = part.step, ""
                    piece = ("\n\n" if stream.shown else "") + piece  # a later step's text
                step_text += part.piece
                await stream.write(piece)
            # Progress lines are not the answer's text, and the Responses API has no event
            # for a tool of the server's own that is not OpenAI's: they are not shown here.
        reply = final_reply(item)
        if isinstance(reply, Text) and (failed := failure(reply)) is not None:
            if stream.events.response is None:
                return model_error(reply) or web.Response()
            return await stream.fail(reply, failed)
        if reply is not None:
            final = reply.text
            if step_text and final.startswith(step_text):
                rest = final[len(step_text) :]
            else:
                rest = ("\n\n" if stream.shown and final else "") + final
            if rest:
                await stream.write(rest)
        return await stream.finish(reply)
    except ConnectionError:  # the client hung up between two pieces: its turn is stopped
        pieces.cancel()
        return stream.events.response or web.Response()

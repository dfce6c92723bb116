"""`POST /v1/responses`: OpenAI's Responses API on the agent API, beside chat completions.

A request is one turn of its session, as a chat completion is (channel.py): the channel calls
the core directly and writes the answer to the waiting request. A response id carries its
session (responses_wire.py), so `previous_response_id` names the session to go on in and the
answer the turn follows, which the core checks the session has.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

from aiohttp import web

from channels.api.http_errors import refusal
from channels.api.replies import Pieces
from channels.api.responses_output import Shapes, streamed, whole
from channels.api.responses_wire import parse_responses
from channels.api.wire import BadRequest, ChatRequest, Names, fits

NAMES = Names(
    "input",
    "function_call_output items",
    "instructions and system and developer messages",
    "instructions",
)

if TYPE_CHECKING:
    from channels.api.channel import ApiChannel


async def respond(channel: ApiChannel, request: web.Request) -> web.StreamResponse:
    if (refused := channel._refused(request)) is not None:
        return refused
    try:
        body = await channel._read_body(request)
        parse = functools.partial(
            parse_responses, body, request.headers, channel.settings.max_parts
        )
        parsed = await channel._parse(body, parse)
        turn = parsed.turn
        message = ChatRequest(
            parsed.session_id,
            turn.text,
            turn.uploads,
            instructions=turn.instructions,
            results=turn.results,
            tools=parsed.tools,
            tool_choice=parsed.tool_choice,
            options=parsed.options,
            message_id=parsed.message_id,
            replayed=parsed.replayed,
        )
        fits(message, channel.max_message_chars, NAMES)
        media = await channel._media(message) if turn.uploads else ()
    except BadRequest as exc:
        return refusal(exc)
    rid = parsed.response_id
    msg = channel._inbound(message, media, reply_id=rid, follows=parsed.follows)
    pieces = Pieces(channel._answer, msg, functools.partial(channel.files.link, request))
    shapes = Shapes(rid, parsed, channel.count_tokens)
    try:
        if parsed.stream:
            return await streamed(request, pieces, shapes)
        return await whole(pieces, shapes)
    finally:
        pieces.cancel()  # the client hung up (its handler is cancelled), or it is over

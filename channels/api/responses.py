"""`POST /v1/responses`: OpenAI's Responses API on the agent API, beside chat completions.

A request is one turn of its session, as a chat completion is (channel.py): the channel calls
the core directly and writes the answer to the waiting request. A response id carries its
session (responses_wire.py), so `previous_response_id` names the session to go on in and the
answer the turn follows, which the core checks the session has.
"""

from __future__ import annotations

import asyncio
import functools
from typing import TYPE_CHECKING

from aiohttp import web

from channels.api.http_errors import refusal
from channels.api.replies import Pieces
from channels.api.responses_input import NewTurn
from channels.api.responses_output import Shapes, streamed, whole
from channels.api.responses_wire import parse_responses
from channels.api.wire import FILE_PART_CHARS, BadRequest, ChatRequest
from nanomem.agent import ClientTurn, InboundMessage
from nanomem.text.plural import plural

if TYPE_CHECKING:
    from channels.api.channel import ApiChannel


async def respond(channel: ApiChannel, request: web.Request) -> web.StreamResponse:
    from channels.api.channel import PARSE_IN_THREAD_BYTES  # it imports this module

    if (refused := channel._refused(request)) is not None:
        return refused
    try:
        body = await channel._read_body(request)
        # A big body takes a while to check and parse: not on the loop /health answers from.
        parse = functools.partial(
            parse_responses, body, request.headers, channel.settings.max_parts
        )
        parsed = await asyncio.to_thread(parse) if len(body) > PARSE_IN_THREAD_BYTES else parse()
        turn = parsed.turn
        message = ChatRequest(parsed.session_id, turn.text, turn.uploads)
        _fits(message, turn, channel)
        media = await channel._media(message) if turn.uploads else ()
    except BadRequest as exc:
        return refusal(exc)
    rid = parsed.response_id
    client = ClientTurn(
        tools=parsed.tools,
        tool_choice=parsed.tool_choice,
        instructions=turn.instructions,
        options=parsed.options,
        results=turn.results,
        wait_s=channel.settings.tool_wait_s,
        reply_id=rid,
        follows=parsed.follows,
    )
    sender = channel._sender(message)
    msg = InboundMessage(
        channel.name,
        parsed.session_id,
        turn.text,
        sender,
        media,
        id=parsed.message_id,
        replayed=parsed.replayed,
        client=client,
    )
    pieces = Pieces(channel._answer, msg, functools.partial(channel.files.link, request))
    shapes = Shapes(rid, parsed, channel.count_tokens)
    try:
        if parsed.stream:
            return await streamed(request, pieces, shapes)
        return await whole(pieces, shapes)
    finally:
        pieces.cancel()  # the client hung up (its handler is cancelled), or it is over


def _fits(message: ChatRequest, turn: NewTurn, channel: ApiChannel) -> None:
    """The new turn within agent.max_message_chars: its text and a line for each file, or the
    results of the client's calls; and so the client's instructions for it."""
    limit = channel.max_message_chars
    if (size := message.size) > limit:
        files = f" with its {plural(len(message.uploads), 'file')}" if message.uploads else ""
        raise BadRequest(
            f"the message is too long ({size} characters{files}, {FILE_PART_CHARS} a file; "
            f"limit {limit}, agent.max_message_chars)",
            param="input",
        )
    if (results := sum(len(result.content) for result in turn.results)) > limit:
        raise BadRequest(
            f"the function_call_output items are too long ({results} characters; limit "
            f"{limit}, agent.max_message_chars)",
            param="input",
        )
    if (told := sum(map(len, turn.instructions))) > limit:
        raise BadRequest(
            f"the instructions and system and developer messages are too long ({told} "
            f"characters; limit {limit}, agent.max_message_chars)",
            param="instructions",
        )

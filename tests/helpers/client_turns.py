"""An API client's turn through AgentLoop.answer, as the API channel runs it: the reply's part,
the check that a request was refused (CLIENT_REQUEST) for the reasons named, and a client's
own tool as either API sends it."""

from __future__ import annotations

import re
from typing import Any

from nanomem.agent.bus import InboundMessage
from nanomem.agent.client_turn import CLIENT_REQUEST
from nanomem.agent.outbound import OutboundMessage, Text
from nanomem.app import App

# A client's own tool, as chat completions send it; and flat, as the Responses API does.
WEATHER: Any = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
            "additionalProperties": False,
        },
        "strict": True,
    },
}
FLAT_WEATHER: Any = {"type": "function", **WEATHER["function"]}


async def answer(app: App, msg: InboundMessage) -> Any:
    """The reply's part (what was shown meanwhile is dropped)."""

    async def show(out: OutboundMessage) -> None:
        pass

    reply = await app.loop.answer(msg, show)
    assert reply is not None
    return reply.part


def refused(part: Any, *words: str) -> None:
    assert isinstance(part, Text) and part.style == "error", part
    assert part.category == CLIENT_REQUEST, part
    assert all(word in part.text for word in words), part.text


_CLIENT_RESULT = re.compile(
    r"<<untrusted (\w+) from the API client's tool [\w-]+>>\n(.*)\n<<end untrusted \1>>\n.*", re.S
)


def client_result(content: str) -> str:
    """A client tool's result as the client sent it: the model and the session get it inside
    untrusted markers (nanomem/tools/untrusted.py), which this checks are there."""
    block = _CLIENT_RESULT.fullmatch(content)
    assert block is not None, content
    return block.group(2)

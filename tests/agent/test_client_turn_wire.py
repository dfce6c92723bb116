"""A client's turn through AgentLoop.answer and the lean model client, over HTTP to the
loopback fake: what the model is sent on each request of the turn."""

from __future__ import annotations

import json

from nanomem.agent.bus import InboundMessage
from nanomem.agent.client_turn import ClientTurn, Paused, ToolResult
from nanomem.agent.outbound import OutboundMessage, Text
from nanomem.app import App, build_app
from nanomem.audience import Sender
from nanomem.home import Home
from nanomem.providers import ModelOptions
from tests.conftest import TEST_KEY, settings_for
from tests.fakes.openai_server import FakeOpenAI
from tests.helpers.client_turns import WEATHER

FORM = {
    "type": "json_schema",
    "json_schema": {
        "name": "weather",
        "schema": {
            "type": "object",
            "properties": {"summary": {"type": "string"}},
            "required": ["summary"],
        },
    },
}


def client_app(home: Home, fake: FakeOpenAI) -> App:
    llm = {
        "model": "openai/fake",
        "api_base": fake.base_url,
        "api_key": TEST_KEY,
        "transport": "direct",
        "timeout_s": 10,
    }
    return build_app(settings_for(home, llm=llm), home)


async def answer(app: App, client: ClientTurn, content: str = "") -> object:
    async def show(out: OutboundMessage) -> None:
        pass

    msg = InboundMessage("api", "s1", content, Sender("s1", is_owner=True), client=client)
    reply = await app.loop.answer(msg, show)
    assert reply is not None
    return reply.part


async def test_a_paused_and_continued_turn_on_the_wire(home: Home, fake_llm: FakeOpenAI) -> None:
    app = client_app(home, fake_llm)
    options = ModelOptions(max_tokens=300, temperature=0.2, seed=3, response_format=FORM)
    turn = ClientTurn(
        tools=(WEATHER,),
        tool_choice="required",
        instructions=("Answer as JSON.",),
        options=options,
    )
    fake_llm.tool_call("get_weather", {"city": "Paris"}, call_id="call_w1")
    part = await answer(app, turn, "Weather in Paris?")
    assert isinstance(part, Paused) and [c.id for c in part.calls] == ["call_w1"]
    first = fake_llm.requests[0]
    names = [t["function"]["name"] for t in first["tools"]]
    assert "get_weather" in names and "read_file" in names
    assert first["tool_choice"] == "required" and first["response_format"] == FORM
    assert (first["max_tokens"], first["temperature"], first["seed"]) == (300, 0.2, 3)
    assert first["messages"][1]["role"] == "system"
    assert "Answer as JSON." in first["messages"][1]["content"]

    fake_llm.reply(json.dumps({"summary": "sunny"}))
    going_on = ClientTurn(
        tools=(WEATHER,),
        options=options,
        results=(ToolResult("call_w1", "sunny, 21 C"),),
    )
    part = await answer(app, going_on)
    assert part == Text('{"summary": "sunny"}')
    second = fake_llm.requests[1]
    assert "tool_choice" not in second  # this request sent none: the first's is not kept
    assert second["response_format"] == FORM
    tail = second["messages"][-2:]
    assert tail[0]["role"] == "assistant" and tail[0]["tool_calls"][0]["id"] == "call_w1"
    assert tail[1] == tail[1] | {"role": "tool", "tool_call_id": "call_w1", "name": "get_weather"}
    assert "\nsunny, 21 C\n" in tail[1]["content"]  # inside the outside-text markers
    assert all("Answer as JSON." not in str(m.get("content")) for m in second["messages"])

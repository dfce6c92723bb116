"""An API client's response_format: asked of the model natively or by prompt, the answer
checked, re-asked once, and refused when it still does not fit."""

from __future__ import annotations

import json
import time
from typing import Any

from nanomem.agent.bus import InboundMessage
from nanomem.agent.client_turn import CLIENT_REQUEST, SCHEMA_UNMET, ClientTurn
from nanomem.agent.outbound import OutboundMessage, Text
from nanomem.agent.structured import problem
from nanomem.app import App
from nanomem.audience import Sender
from nanomem.home import Home
from nanomem.providers import ModelOptions
from nanomem.providers.provider import ProviderError
from nanomem.providers.scripted import ScriptedProvider, call, text
from tests.conftest import make_app

CITY = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "degrees": {"type": "integer"}},
    "required": ["city", "degrees"],
    "additionalProperties": False,
}
SCHEMA = {"type": "json_schema", "json_schema": {"name": "weather", "schema": CITY, "strict": True}}
GOOD = '{"city": "Paris", "degrees": 21}'


def ask(content: str, form: dict[str, Any] = SCHEMA, **client: Any) -> InboundMessage:
    options = ModelOptions(response_format=form)
    return InboundMessage(
        "api",
        "s1",
        content,
        Sender("s1", is_owner=True),
        client=ClientTurn(options=options, **client),
    )


async def answer(app: App, msg: InboundMessage) -> tuple[Any, list[OutboundMessage]]:
    shown: list[OutboundMessage] = []

    async def show(out: OutboundMessage) -> None:
        shown.append(out)

    reply = await app.loop.answer(msg, show)
    assert reply is not None
    return reply.part, shown


async def saved(app: App) -> list[dict[str, Any]]:
    return (await app.sessions.get("api:s1")).messages


async def test_the_model_is_asked_natively_and_a_fitting_answer_stands(home: Home) -> None:
    provider = ScriptedProvider([text(GOOD)])
    app = make_app(home, provider)
    part, shown = await answer(app, ask("Weather in Paris?"))
    assert part == Text(GOOD)
    options = provider.options_seen[0]
    assert options is not None and options.response_format == SCHEMA
    assert all(m["role"] != "system" for m in provider.calls[0][1:])  # not in the prompt
    assert not [p for p in shown if p.content]  # nothing shown before it was checked
    assert (await saved(app))[-1]["content"] == GOOD


async def test_a_model_that_cannot_is_asked_by_prompt(home: Home) -> None:
    refusal = ProviderError("bad_request", "HTTP 400: response_format is not supported")
    provider = ScriptedProvider([refusal, text(GOOD), text(GOOD)])
    app = make_app(home, provider)
    part, _ = await answer(app, ask("Weather in Paris?"))
    assert part == Text(GOOD)
    second = provider.options_seen[1]
    assert second is not None and second.response_format is None
    theirs = provider.calls[1][1]
    assert theirs["role"] == "system" and '"degrees"' in theirs["content"]
    # Remembered: the next turn asks by prompt straight away.
    await answer(app, ask("And now?"))
    assert len(provider.calls) == 3 and provider.options_seen[2].response_format is None  # type: ignore[union-attr]


async def test_a_wrong_answer_is_asked_again_and_neither_is_saved(home: Home) -> None:
    provider = ScriptedProvider([text("It is sunny, 21 degrees."), text(GOOD)])
    app = make_app(home, provider)
    part, _ = await answer(app, ask("Weather in Paris?"))
    assert part == Text(GOOD)
    again = provider.calls[1]
    assert again[-2] == {"role": "assistant", "content": "It is sunny, 21 degrees."}
    assert again[-1]["role"] == "user" and "not JSON" in again[-1]["content"]
    contents = [m.get("content") for m in await saved(app)]
    assert "It is sunny, 21 degrees." not in contents and contents[-1] == GOOD
    assert all("not JSON" not in str(c) for c in contents)


async def test_an_answer_still_wrong_is_schema_unmet_with_the_reason(home: Home) -> None:
    wrong = '{"city": "Paris", "degrees": "warm"}'
    provider = ScriptedProvider([text(wrong), text(wrong)])
    app = make_app(home, provider)
    part, _ = await answer(app, ask("Weather in Paris?"))
    assert isinstance(part, Text) and part.style == "error" and part.category == SCHEMA_UNMET
    assert "$.degrees" in part.text and "integer" in part.text
    last = (await saved(app))[-1]
    assert last["content"] == wrong and last["failed"] == SCHEMA_UNMET  # kept as given


async def test_json_object_wants_an_object(home: Home) -> None:
    form = {"type": "json_object"}
    provider = ScriptedProvider([text("[1, 2]"), text('{"a": 1}')])
    app = make_app(home, provider)
    part, _ = await answer(app, ask("Numbers", form))
    assert part == Text('{"a": 1}')
    assert "not a JSON object" in provider.calls[1][-1]["content"]


async def test_a_catastrophic_pattern_is_bounded(home: Home) -> None:
    schema = {
        "type": "object",
        "properties": {"s": {"type": "string", "pattern": "^(a|aa)+$"}},
        "required": ["s"],
    }
    form = {"type": "json_schema", "json_schema": {"name": "s", "schema": schema}}
    hostile = json.dumps({"s": "a" * 60 + "b"})
    provider = ScriptedProvider([text(hostile), text(hostile)])
    app = make_app(home, provider)
    started = time.monotonic()
    part, _ = await answer(app, ask("Go", form))
    assert time.monotonic() - started < 10
    assert isinstance(part, Text) and part.category == SCHEMA_UNMET and "took too long" in part.text
    # An ordinary pattern is checked as any other keyword.
    assert problem('{"s": "aaa"}', form) is None
    assert "does not match" in (problem('{"s": "ab"}', form) or "")


async def test_pattern_properties_and_invalid_schemas_are_refused_before_anything_is_saved(
    home: Home,
) -> None:
    provider = ScriptedProvider()
    app = make_app(home, provider)
    keyed = {"type": "object", "patternProperties": {"^(a|aa)+$": {"type": "string"}}}
    broken = {"type": "object", "properties": {"x": {"type": 12}}}
    for schema, words in ((keyed, "patternProperties"), (broken, "invalid")):
        form = {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}
        part, _ = await answer(app, ask("Go", form))
        assert isinstance(part, Text) and part.category == CLIENT_REQUEST and words in part.text
    assert provider.calls == [] and await saved(app) == []


def test_a_fenced_answer_is_not_json_the_client_can_parse() -> None:
    assert "not JSON" in (problem(f"```json\n{GOOD}\n```", SCHEMA) or "")
    assert problem(f"  {GOOD}\n", SCHEMA) is None


async def test_a_refusal_after_a_tool_step_goes_on_from_that_step(home: Home) -> None:
    refusal = ProviderError("bad_request", "HTTP 400: 'response_format' is not supported")
    provider = ScriptedProvider([call("list_dir", {"path": "memory"}), refusal, text(GOOD)])
    app = make_app(home, provider)
    part, _ = await answer(app, ask("Weather in Paris?"))
    assert part == Text(GOOD)
    roles = [m["role"] for m in provider.calls[2]]
    assert roles == ["system", "system", "user", "assistant", "tool"]  # the step once, as it was
    assert [m["role"] for m in await saved(app)] == ["user", "assistant", "tool", "assistant"]


async def test_a_refusal_of_one_schema_asks_by_prompt_for_that_turn_only(home: Home) -> None:
    refusal = ProviderError(
        "bad_request",
        "HTTP 400: Invalid schema for response_format 'weather': 'required' is missing",
    )
    provider = ScriptedProvider([refusal, text(GOOD), text(GOOD)])
    app = make_app(home, provider)
    assert (await answer(app, ask("Weather in Paris?")))[0] == Text(GOOD)
    assert provider.options_seen[1].response_format is None  # type: ignore[union-attr]
    await answer(app, ask("And now?"))
    assert provider.options_seen[2].response_format == SCHEMA  # type: ignore[union-attr]

"""One smoke test a framework against the real `nanomem gateway` in a process of its own (the
in-process tests, test_api_clients_*.py, cover each one in depth): its model the loopback fake
that answers as a model would, so a client's tools and response_format cross both wires."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import instructor
import litellm
import openai
import pytest
from langchain.agents import create_agent
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from pydantic_ai import Agent as PydanticAgent
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

from nanomem.home import Home
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.schema_model import SchemaModel, unmarked
from tests.helpers.clients import VALUES, WEATHER_TOOL, Forecast, weather
from tests.helpers.gateway import API_KEY, GatewayProcess, load_session, onboarded

ASK = 'What should I wear? use weather {"city": "Paris"}'
FORECAST = {"city": "Paris", "temperature_c": 21, "summary": "sunny"}


@pytest.fixture(scope="module")
def clients_home(tmp_path_factory: pytest.TempPathFactory) -> Home:
    return onboarded(tmp_path_factory, "clients")


@pytest.fixture(scope="module")
def base(clients_home: Home) -> Iterator[str]:
    with FakeOpenAI() as model:
        model.set_fallback(SchemaModel(VALUES))
        with GatewayProcess(
            clients_home,
            None,
            model,
            NANOMEM_API__ENABLED="true",
            NANOMEM_API__KEYS=json.dumps([API_KEY]),
        ) as gateway:
            gateway.wait_for_line(r"api: running")
            yield f"http://127.0.0.1:{gateway.port}/v1"


def said(home: Home, session: str) -> list[str]:
    messages = load_session(home, f"api:{session}").messages
    return [str(m["content"]).split("]\n\n", 1)[-1] for m in messages if m["role"] == "user"]


def results(home: Home, session: str) -> list[str]:
    messages = load_session(home, f"api:{session}").messages
    return [unmarked(str(m["content"])) for m in messages if m["role"] == "tool"]


def test_openai(base: str, clients_home: Home) -> None:
    client = openai.OpenAI(base_url=base, api_key=API_KEY)
    messages: list[Any] = [{"role": "user", "content": ASK}]
    first = client.chat.completions.create(
        model="nanomem", messages=messages, tools=[WEATHER_TOOL], user="e2e-openai"
    )
    (call,) = first.choices[0].message.tool_calls or []
    messages += [
        first.choices[0].message,
        {"role": "tool", "tool_call_id": call.id, "content": "sunny, 21 C in Paris"},
    ]
    second = client.chat.completions.create(
        model="nanomem", messages=messages, tools=[WEATHER_TOOL], user="e2e-openai"
    )
    assert second.choices[0].message.content == "tool said: sunny, 21 C in Paris"
    assert said(clients_home, "e2e-openai") == [ASK]
    assert results(clients_home, "e2e-openai") == ["sunny, 21 C in Paris"]


def test_pydantic_ai(base: str, clients_home: Home) -> None:
    model = OpenAIChatModel("nanomem", provider=OpenAIProvider(base_url=base, api_key=API_KEY))
    settings: Any = {"extra_body": {"session_id": "e2e-pydantic"}}
    result = PydanticAgent(model, tools=[weather], model_settings=settings).run_sync(ASK)
    assert result.output == "tool said: sunny, 21 C in Paris"
    assert results(clients_home, "e2e-pydantic") == ["sunny, 21 C in Paris"]


def test_langchain(base: str, clients_home: Home) -> None:
    chat = ChatOpenAI(
        model="nanomem",
        base_url=base,
        api_key=API_KEY,
        default_headers={"X-Session-Id": "e2e-langchain"},
    )
    state = create_agent(chat, tools=[tool(weather)]).invoke(
        {"messages": [{"role": "user", "content": ASK}]}
    )
    assert state["messages"][-1].content == "tool said: sunny, 21 C in Paris"
    typed = chat.with_structured_output(Forecast, method="function_calling").invoke("Forecast")
    assert typed == Forecast(**FORECAST)
    assert said(clients_home, "e2e-langchain") == [ASK, "Forecast"]


def test_litellm(base: str, clients_home: Home) -> None:
    reply = litellm.completion(
        model="openai/nanomem",
        api_base=base,
        api_key=API_KEY,
        messages=[{"role": "user", "content": "The forecast for Paris"}],
        response_format=Forecast,
        extra_headers={"X-Session-Id": "e2e-litellm"},
    )
    assert json.loads(reply.choices[0].message.content) == FORECAST
    assert said(clients_home, "e2e-litellm") == ["The forecast for Paris"]


def test_instructor(base: str, clients_home: Home) -> None:
    client = instructor.from_openai(openai.OpenAI(base_url=base, api_key=API_KEY))
    forecast = client.chat.completions.create(
        model="nanomem",
        response_model=Forecast,
        messages=[{"role": "user", "content": "The forecast for Paris"}],
        user="e2e-instructor",
    )
    assert forecast.model_dump() == FORECAST
    assert said(clients_home, "e2e-instructor") == ["The forecast for Paris"]

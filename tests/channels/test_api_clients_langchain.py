"""langchain-openai drives /v1 as its users do: `bind_tools`, an agent with a tool
(`langchain.agents.create_agent`), and `with_structured_output` in each of its methods, every
one a typed result (never None)."""

from __future__ import annotations

import json

import pytest
from langchain.agents import create_agent
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI

from tests.helpers.clients import Agent, Forecast, weather

ASK = 'What should I wear? use weather {"city": "Paris"}'
FORECAST = Forecast(city="Paris", temperature_c=21, summary="sunny")


def chat_model(agent: Agent, session: str) -> ChatOpenAI:
    return ChatOpenAI(
        model="nanomem",
        base_url=agent.base,
        api_key=agent.key,
        default_headers={"X-Session-Id": session},
    )


async def test_bind_tools_gives_the_tool_call(agent: Agent) -> None:
    reply = await chat_model(agent, "bound").bind_tools([weather]).ainvoke(ASK)
    assert [(c["name"], c["args"]) for c in reply.tool_calls] == [("weather", {"city": "Paris"})]
    assert reply.response_metadata["finish_reason"] == "tool_calls"
    assert await agent.said("bound") == [ASK]


async def test_an_agent_runs_its_tool_and_the_session_keeps_the_result(agent: Agent) -> None:
    assistant = create_agent(chat_model(agent, "lc-agent"), tools=[tool(weather)])
    state = await assistant.ainvoke({"messages": [{"role": "user", "content": ASK}]})
    assert state["messages"][-1].content == "tool said: sunny, 21 C in Paris"
    assert await agent.tool_results("lc-agent") == ["sunny, 21 C in Paris"]
    assert await agent.said("lc-agent") == [ASK]


@pytest.mark.parametrize("method", ["json_schema", "function_calling", "json_mode"])
async def test_structured_output_is_typed_in_each_method(agent: Agent, method: str) -> None:
    structured = chat_model(agent, f"lc-{method}").with_structured_output(Forecast, method=method)
    asked = "The forecast for Paris"
    if method == "json_mode":  # langchain's json_mode leaves the schema to the prompt
        schema = json.dumps(Forecast.model_json_schema())
        result = await structured.ainvoke(
            [("system", f"Reply in JSON: {schema}"), ("human", asked)]
        )
    else:
        result = await structured.ainvoke(asked)
    assert result == FORECAST
    assert await agent.said(f"lc-{method}") == [asked]


async def test_a_streaming_agent_on_the_responses_api(agent: Agent) -> None:
    model = ChatOpenAI(
        model="nanomem",
        base_url=agent.base,
        api_key=agent.key,
        use_responses_api=True,
        streaming=True,
        default_headers={"X-Session-Id": "lc-responses"},
    )
    assistant = create_agent(model, tools=[tool(weather)])
    state = await assistant.ainvoke({"messages": [{"role": "user", "content": ASK}]})
    assert state["messages"][-1].text == "tool said: sunny, 21 C in Paris"
    assert await agent.tool_results("lc-responses") == ["sunny, 21 C in Paris"]

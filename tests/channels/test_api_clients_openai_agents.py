"""The OpenAI Agents SDK drives /v1/responses as its users do: an agent with a function tool
and instructions, and typed output; tracing off, so nothing leaves the machine."""

from __future__ import annotations

from agents import Agent as SdkAgent
from agents import OpenAIResponsesModel, Runner, function_tool, set_tracing_disabled
from openai import AsyncOpenAI

from tests.helpers.clients import Agent, Forecast, weather

ASK = 'What should I wear? use weather {"city": "Paris"}'

set_tracing_disabled(True)  # the SDK would send its traces to OpenAI


def model(agent: Agent, session: str) -> OpenAIResponsesModel:
    client = AsyncOpenAI(
        base_url=agent.base, api_key=agent.key, default_headers={"X-Session-Id": session}
    )
    return OpenAIResponsesModel(model="nanomem", openai_client=client)


async def test_an_agent_runs_its_tool_with_its_instructions(agent: Agent) -> None:
    assistant = SdkAgent(
        name="outfits",
        instructions="Answer in one line.",
        model=model(agent, "agents"),
        tools=[function_tool(weather)],
    )
    result = await Runner.run(assistant, ASK)
    assert result.final_output == "tool said: sunny, 21 C in Paris"
    assert "Answer in one line." in agent.model_texts()
    assert "Answer in one line." not in await agent.file_text("agents")
    assert await agent.said("agents") == [ASK]
    assert await agent.tool_results("agents") == ["sunny, 21 C in Paris"]


async def test_typed_output(agent: Agent) -> None:
    forecaster = SdkAgent(name="forecast", model=model(agent, "agents-typed"), output_type=Forecast)
    result = await Runner.run(forecaster, "The forecast for Paris")
    assert result.final_output == Forecast(city="Paris", temperature_c=21, summary="sunny")
    assert agent.model.requests[-1]["response_format"]["type"] == "json_schema"

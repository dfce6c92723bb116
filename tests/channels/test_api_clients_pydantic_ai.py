"""pydantic-ai drives /v1 as its users do: an Agent runs its own tool through nanomem's turn
while nanomem remembers the conversation, typed output (NativeOutput, ToolOutput,
PromptedOutput) comes back as the model, and `instructions` steer without being saved."""

from __future__ import annotations

from typing import Any

from pydantic_ai import Agent as PydanticAgent
from pydantic_ai import NativeOutput, PromptedOutput, ToolOutput
from pydantic_ai.models.openai import OpenAIChatModel, OpenAIResponsesModel
from pydantic_ai.providers.openai import OpenAIProvider

from tests.helpers.clients import Agent, Forecast, weather

ASK = 'What should I wear? use weather {"city": "Paris"}'
FORECAST = Forecast(city="Paris", temperature_c=21, summary="sunny")


def pydantic_agent(agent: Agent, session: str, **kw: Any) -> PydanticAgent[None, Any]:
    provider = OpenAIProvider(base_url=agent.base, api_key=agent.key)
    model = OpenAIChatModel("nanomem", provider=provider)
    return PydanticAgent(model, model_settings={"extra_body": {"session_id": session}}, **kw)


async def test_an_agent_runs_its_tool_and_nanomem_remembers_the_conversation(
    agent: Agent,
) -> None:
    assistant = pydantic_agent(agent, "outfit", tools=[weather])
    first = await assistant.run(ASK)
    assert first.output == "tool said: sunny, 21 C in Paris"
    assert await agent.tool_results("outfit") == ["sunny, 21 C in Paris"]
    # A second run without the first's messages: nanomem's session holds them.
    await assistant.run("And tomorrow?")
    assert "sunny, 21 C in Paris" in agent.model_texts() and ASK in agent.model_texts()
    assert await agent.said("outfit") == [ASK, "And tomorrow?"]


async def test_native_output_is_typed(agent: Agent) -> None:
    forecaster = pydantic_agent(agent, "native", output_type=NativeOutput(Forecast))
    result = await forecaster.run("The forecast for Paris")
    assert result.output == FORECAST
    assert agent.model.requests[-1]["response_format"]["type"] == "json_schema"


async def test_tool_output_is_typed(agent: Agent) -> None:
    forecaster = pydantic_agent(agent, "tooled", output_type=ToolOutput(Forecast))
    result = await forecaster.run("The forecast for Paris")
    assert result.output == FORECAST
    # The next run sends the output tool's own result back before its prompt: the new prompt
    # is the turn (the call was answered by the run ending, and the turn closed).
    again = await forecaster.run("And Rome?", message_history=result.all_messages())
    assert again.output == FORECAST
    assert await agent.said("tooled") == ["The forecast for Paris", "And Rome?"]


async def test_prompted_output_and_instructions_are_the_clients_not_the_persons(
    agent: Agent,
) -> None:
    rule = "Always answer about the weather in Paris."
    forecaster = pydantic_agent(
        agent, "prompted", output_type=PromptedOutput(Forecast), instructions=rule
    )
    result = await forecaster.run("The forecast, please")
    assert result.output == FORECAST
    assert rule in agent.model_texts()
    assert rule not in await agent.file_text("prompted")
    assert await agent.said("prompted") == ["The forecast, please"]


async def test_a_step_calling_ours_and_theirs_runs_ours_and_pauses_for_theirs(
    agent: Agent,
) -> None:
    both = 'use list_dir {"path": "."} and weather {"city": "Paris"}'
    result = await pydantic_agent(agent, "mixed", tools=[weather]).run(both)
    # The client saw only its own call; the agent's list_dir ran inside the turn.
    called = [
        p.tool_name for m in result.all_messages() for p in m.parts if p.part_kind == "tool-call"
    ]
    assert called == ["weather"]
    assert result.output.startswith("tool said: ") and "sunny, 21 C in Paris" in result.output
    results = await agent.tool_results("mixed")
    assert len(results) == 2 and results[1] == "sunny, 21 C in Paris"


async def test_a_streamed_run_assembles_the_tool_call(agent: Agent) -> None:
    async with pydantic_agent(agent, "streamed", tools=[weather]).run_stream(ASK) as run:
        output = await run.get_output()
    assert output == "tool said: sunny, 21 C in Paris"
    assert agent.model.requests[-1]["stream"] is True  # streamed all the way to the model


async def test_the_responses_model_runs_tools_and_typed_output(agent: Agent) -> None:
    provider = OpenAIProvider(base_url=agent.base, api_key=agent.key)
    model = OpenAIResponsesModel("nanomem", provider=provider)
    settings: Any = {"extra_headers": {"X-Session-Id": "responses"}}
    assistant = PydanticAgent(model, tools=[weather], model_settings=settings)
    assert (await assistant.run(ASK)).output == "tool said: sunny, 21 C in Paris"
    for output in (NativeOutput(Forecast), ToolOutput(Forecast), PromptedOutput(Forecast)):
        typed = PydanticAgent(model, output_type=output, model_settings=settings)
        assert (await typed.run("And as a forecast?")).output == FORECAST
    assert await agent.said("responses") == [ASK] + ["And as a forecast?"] * 3
    results = await agent.tool_results("responses")
    # The output tool's call is the run's answer: the next prompt closed it with nanomem's note.
    assert results[0] == "sunny, 21 C in Paris"
    assert len(results) == 2 and results[1].startswith("[nanomem: ")

"""instructor drives /v1 as its users do: JSON mode (its schema in a system message) and TOOLS
mode (a forced function call) both give the typed object."""

from __future__ import annotations

import instructor
import openai
import pytest

from tests.helpers.clients import Agent, Forecast


@pytest.mark.parametrize("mode", [instructor.Mode.JSON, instructor.Mode.TOOLS])
async def test_each_mode_gives_the_typed_object(agent: Agent, mode: instructor.Mode) -> None:
    session = f"instructor-{mode.value}"
    client = instructor.from_openai(
        openai.AsyncOpenAI(base_url=agent.base, api_key=agent.key), mode=mode
    )
    forecast = await client.chat.completions.create(
        model="nanomem",
        response_model=Forecast,
        messages=[{"role": "user", "content": "The forecast for Paris"}],
        user=session,
    )
    # instructor answers with a model of its own deriving from Forecast
    assert isinstance(forecast, Forecast)
    assert forecast.model_dump() == {"city": "Paris", "temperature_c": 21, "summary": "sunny"}
    assert await agent.said(session) == ["The forecast for Paris"]
    # instructor's own system message (JSON mode's schema) is the client's, never saved.
    assert "json_schema" not in await agent.file_text(session)

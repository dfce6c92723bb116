"""The agent API served in-process by the real Gateway and API channel (scripted model), through
the official `openai` client: test_api_e2e.py shows the same through a gateway process."""

from __future__ import annotations

import openai
import pytest

from tests.helpers.api import Served


async def test_a_completion_is_the_agents_answer_and_is_saved(served: Served) -> None:
    reply = await served.client().chat.completions.create(
        model="nanomem",
        messages=[{"role": "user", "content": "hello api"}],
        extra_body={"session_id": "plain"},
    )
    answer = reply.choices[0].message.content or ""
    assert answer.startswith("echo: ") and answer.endswith("hello api")
    assert "channel api" in served.provider.calls[0][-1]["content"]
    saved = (await served.gateway.app.sessions.get("api:plain")).messages
    assert [m["role"] for m in saved] == ["user", "assistant"]


async def test_a_streamed_completion_arrives_in_pieces_with_usage(served: Served) -> None:
    stream = await served.client().chat.completions.create(
        model="nanomem",
        messages=[{"role": "user", "content": "stream this reply please"}],
        stream=True,
        stream_options={"include_usage": True},
        extra_body={"session_id": "streamed"},
    )
    chunks = [chunk async for chunk in stream]
    pieces = [
        c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content
    ]
    assert len(pieces) >= 2 and "".join(pieces).endswith("reply please")
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens > 0


async def test_models_list_the_agent(served: Served) -> None:
    assert [m.id async for m in served.client().models.list()] == ["nanomem"]


async def test_a_wrong_key_is_refused_before_the_model(served: Served) -> None:
    with pytest.raises(openai.AuthenticationError):
        await served.client("nm-wrong").chat.completions.create(
            model="nanomem", messages=[{"role": "user", "content": "let me in"}]
        )
    assert served.provider.calls == []
    ok = await served.client().chat.completions.create(  # control: the right key is let in
        model="nanomem", messages=[{"role": "user", "content": "me"}]
    )
    assert (ok.choices[0].message.content or "").endswith("me")


async def test_bad_requests_get_openai_errors_and_never_reach_the_model(served: Served) -> None:
    cases = [
        (b"{not json", 400, "not valid JSON"),
        (b'{"messages": []}', 400, "non-empty list"),
        (b'{"messages": [{"role": "user", "content": "  "}]}', 400, "empty"),
        (b'{"messages": [{"role": "user", "content": "' + b"x" * 1_100_000 + b'"}]}', 413, "MB"),
    ]
    for body, status, words in cases:
        got, error = await served.post(body)
        assert got == status, (body[:60], error)
        assert words in error["error"]["message"] and error["error"]["type"]
    assert served.provider.calls == []
    got, _ = await served.post(b'{"messages": [{"role": "user", "content": "fine"}]}')
    assert got == 200 and len(served.provider.calls) == 1  # control: a good one does

"""`POST /v1/responses` through the official openai SDK against the real gateway and API channel
(a scripted model): plain, images, instructions, streaming, sessions, parameters refused."""

from __future__ import annotations

import asyncio
import base64
import re
from typing import Any

import openai
import pytest

from nanomem.home import Home
from nanomem.providers import ProviderError, Reply, ToolCall
from nanomem.providers.scripted import call, text
from tests.helpers import WAIT_S, until
from tests.helpers.api import Served

# A real 1x1 PNG.
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)
DATA_URL = "data:image/png;base64," + base64.b64encode(PNG).decode()


async def saved(served: Served, session: str) -> list[dict[str, Any]]:
    return list((await served.gateway.app.sessions.get(f"api:{session}")).messages)


def user_words(messages: list[dict[str, Any]]) -> list[str]:
    """The person's words as saved (after the runtime line the core puts before them)."""
    said = [str(m["content"]) for m in messages if m["role"] == "user"]
    return [words.partition("]\n\n")[2] or words for words in said]


async def test_a_plain_response_is_the_agents_answer_and_is_saved(served: Served) -> None:
    served.provider.add(text("Hello from the agent."))
    response = await served.client().responses.create(
        model="nanomem", input="hello responses", extra_body={"session_id": "plain"}
    )
    assert response.output_text == "Hello from the agent."
    assert response.object == "response" and response.status == "completed"
    assert response.id.startswith("resp_") and response.error is None
    [message] = response.output
    assert message.type == "message" and message.role == "assistant"
    assert response.usage is not None and response.usage.output_tokens > 0
    assert response.usage.total_tokens == response.usage.input_tokens + response.usage.output_tokens
    assert response.usage.input_tokens_details.cached_tokens == 0
    assert response.usage.output_tokens_details.reasoning_tokens == 0
    assert "hello responses" in served.provider.calls[0][-1]["content"]
    assert [m["role"] for m in await saved(served, "plain")] == ["user", "assistant"]


async def test_an_image_is_saved_and_reaches_the_model(served: Served, home: Home) -> None:
    response = await served.client().responses.create(
        model="nanomem",
        input=[
            {
                "role": "user",
                "content": [
                    {"type": "input_text", "text": "what is this"},
                    {"type": "input_image", "image_url": DATA_URL, "detail": "low"},
                ],
            }
        ],
        extra_body={"session_id": "seen"},
    )
    assert response.status == "completed"
    assert len(list((home.workspace / "media").rglob("*-api-*.png"))) == 1
    last = served.provider.calls[0][-1]
    assert "what is this" in str(last["content"]) and "[attachments: media/" in str(last["content"])


async def test_the_client_s_copy_of_the_conversation_is_not_read(served: Served) -> None:
    # As the Agents SDK sends a conversation without previous_response_id: all of it, again.
    history: list[Any] = [
        {"role": "user", "content": "an old question"},
        {
            "type": "message",
            "id": "msg_1",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": "an old answer", "annotations": []}],
        },
        {"type": "reasoning", "id": "rs_1", "summary": []},
        {"role": "user", "content": "the new question"},
    ]
    response = await served.client().responses.create(
        model="nanomem", input=history, extra_body={"session_id": "copy"}
    )
    assert response.status == "completed"
    assert user_words(await saved(served, "copy")) == ["the new question"]


async def test_previous_response_id_goes_on_in_its_session(served: Served) -> None:
    client = served.client()
    first = await client.responses.create(
        model="nanomem", input="remember the word lighthouse", extra_body={"session_id": "chain"}
    )
    second = await client.responses.create(
        model="nanomem", input="which word?", previous_response_id=first.id
    )
    assert second.previous_response_id == first.id and second.id != first.id
    seen = served.provider.calls[-1]
    assert any("remember the word lighthouse" in str(m["content"]) for m in seen[:-1])
    assert user_words(await saved(served, "chain")) == [
        "remember the word lighthouse",
        "which word?",
    ]


async def test_a_previous_response_of_another_session_than_the_one_named_is_refused(
    served: Served,
) -> None:
    client = served.client()
    first = await client.responses.create(
        model="nanomem", input="hi", extra_body={"session_id": "mine"}
    )
    with pytest.raises(openai.BadRequestError) as refused:
        await client.responses.create(
            model="nanomem",
            input="go on",
            previous_response_id=first.id,
            extra_body={"session_id": "theirs"},
        )
    assert refused.value.param == "previous_response_id"
    assert len(served.provider.calls) == 1


TEXT_EVENTS = [
    "response.created",
    "response.in_progress",
    "response.output_item.added",
    "response.content_part.added",
    "response.output_text.delta",
    "response.output_text.done",
    "response.content_part.done",
    "response.output_item.done",
    "response.completed",
]


def in_order(kinds: list[str]) -> list[str]:
    """The kinds of events, each run of deltas as one."""
    return [kind for n, kind in enumerate(kinds) if n == 0 or kind != kinds[n - 1]]


async def test_a_streamed_response_sends_the_events_in_order(served: Served) -> None:
    served.provider.add(text("Streamed words arrive one by one."))
    stream = await served.client().responses.create(
        model="nanomem", input="stream please", stream=True, extra_body={"session_id": "s"}
    )
    events = [event async for event in stream]
    assert in_order([event.type for event in events]) == TEXT_EVENTS
    assert [event.sequence_number for event in events] == list(range(len(events)))
    deltas = [event.delta for event in events if event.type == "response.output_text.delta"]
    assert len(deltas) >= 2 and "".join(deltas) == "Streamed words arrive one by one."
    created, done = events[0], events[-1]
    assert created.type == "response.created" and created.response.status == "in_progress"
    assert done.type == "response.completed" and done.response.id == created.response.id
    assert done.response.output_text == "Streamed words arrive one by one."
    assert done.response.usage is not None and done.response.usage.output_tokens > 0


async def test_the_sdk_stream_helper_assembles_the_response(served: Served) -> None:
    served.provider.add(text("Assembled by the helper."))
    pieces = []
    async with served.client().responses.stream(
        model="nanomem", input="helper", extra_body={"session_id": "helper"}
    ) as stream:
        async for event in stream:
            if event.type == "response.output_text.delta":
                pieces.append(event.snapshot)
        final = await stream.get_final_response()
    assert pieces[-1] == "Assembled by the helper." and final.output_text == pieces[-1]
    assert [m["role"] for m in await saved(served, "helper")] == ["user", "assistant"]


async def test_a_model_failure_before_any_event_is_its_http_error(served: Served) -> None:
    for stream in (False, True):
        served.provider.add(ProviderError("auth", "bad key upstream"))
        with pytest.raises(openai.APIStatusError) as failed:
            await served.client().responses.create(
                model="nanomem", input="fail", stream=stream, extra_body={"session_id": "f"}
            )
        assert failed.value.status_code == 502
        assert isinstance(failed.value.body, dict) and failed.value.body["code"] == "upstream_error"


async def test_a_model_failure_mid_stream_fails_the_response(served: Served) -> None:
    looking = "Let me look in the workspace first, then I will answer properly."
    look = ToolCall("call_look", "list_dir", '{"path": "."}')
    served.provider.add(Reply(looking, (look,), finish_reason="tool_calls"))
    served.provider.add(ProviderError("auth", "bad key upstream"))
    stream = await served.client().responses.create(
        model="nanomem", input="look", stream=True, extra_body={"session_id": "mid"}
    )
    events = [event async for event in stream]
    kinds = in_order([event.type for event in events])
    assert kinds[:5] == TEXT_EVENTS[:5] and kinds[-2:] == ["error", "response.failed"]
    shown = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert shown and looking.startswith(shown)  # the step's tail may be held back (secrets)
    failed = events[-1]
    assert failed.type == "response.failed" and failed.response.error is not None
    assert failed.response.status == "failed" and failed.response.error.message


async def test_metadata_and_the_parameters_are_echoed(served: Served) -> None:
    response = await served.client().responses.create(
        model="nanomem",
        input="echo my parameters",
        instructions="Be brief.",
        metadata={"ticket": "T-1"},
        temperature=0.2,
        top_p=0.9,
        max_output_tokens=300,
        store=False,
        include=[],
        truncation="disabled",
        extra_body={"session_id": "echo"},
    )
    assert response.metadata == {"ticket": "T-1"} and response.instructions == "Be brief."
    assert (response.temperature, response.top_p, response.max_output_tokens) == (0.2, 0.9, 300)
    assert response.store is True  # the session keeps the turn, whatever was asked
    assert response.tool_choice == "auto" and response.tools == []
    assert response.model == "nanomem" and response.text.format.type == "text"  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"tools": [{"type": "web_search"}]}, "tools[0].type"),
        ({"tools": [{"type": "file_search", "vector_store_ids": ["vs_1"]}]}, "tools[0].type"),
        ({"tools": [{"type": "computer_use_preview"}]}, "tools[0].type"),
        ({"background": True}, "background"),
        ({"frobnicate": 1}, "frobnicate"),
        ({"reasoning": {"effort": "high"}}, "reasoning"),
        ({"include": ["message.output_text.logprobs"]}, "include[0]"),
        ({"temperature": 3}, "temperature"),
        ({"text": {"verbosity": "high"}}, "text.verbosity"),
        ({"metadata": {"k": 1}}, "metadata"),
        ({"previous_response_id": "resp_nonsense"}, "previous_response_id"),
        (
            {"input": [{"role": "user", "content": [{"type": "input_file", "file_id": "f"}]}]},
            "input[0].content[0]",
        ),
    ],
)
async def test_what_is_not_supported_is_a_400_naming_it(
    served: Served, extra: dict[str, Any], param: str
) -> None:
    body: dict[str, Any] = {"input": "hi", **extra}
    with pytest.raises(openai.BadRequestError) as refused:
        await served.client().responses.create(model="nanomem", extra_body=body)
    assert refused.value.param == param, refused.value.body
    assert served.provider.calls == []


async def test_a_file_the_turn_sends_is_linked_in_the_text(served: Served, home: Home) -> None:
    (home.workspace / "report.csv").write_text("plant,water at\nbasil,18:00\n")
    for stream in (False, True):
        served.provider.add(call("send_file", {"path": "report.csv"}), text("Here it is."))
        body: dict[str, Any] = {"model": "nanomem", "input": "the report please"}
        if stream:
            events = [e async for e in await served.client().responses.create(stream=True, **body)]
            assert events[-1].type == "response.completed"
            said = events[-1].response.output_text
        else:
            said = (await served.client().responses.create(**body)).output_text
        assert re.search(r"\[report\.csv\]\(http://127\.0\.0\.1:\d+/v1/files/[\w-]{32}\)", said)
        assert "Here it is." in said


async def test_a_client_that_hangs_up_mid_stream_stops_the_turn(served: Served) -> None:
    looking = "Let me look in the workspace first, then I will answer your question properly."

    async def held(messages: list[dict[str, Any]]) -> Reply:
        await asyncio.sleep(3600)  # only the hang-up ends this step
        return text("the held answer")

    look = ToolCall("call_look", "list_dir", '{"path": "."}')
    served.provider.add(Reply(looking, (look,), finish_reason="tool_calls"), held)
    stream = await served.client().responses.create(
        model="nanomem", input="hold on", stream=True, extra_body={"session_id": "hangup"}
    )
    async for event in stream:
        if event.type == "response.output_text.delta":
            break
    await until(lambda: len(served.provider.calls) == 2, what="the held second model call")
    await stream.close()

    # Without the stop, nothing but the person's message is saved until the held answer.
    deadline = asyncio.get_running_loop().time() + WAIT_S
    while len(messages := await saved(served, "hangup")) < 2:
        assert asyncio.get_running_loop().time() < deadline, "the stopped turn was not saved"
        await asyncio.sleep(0.01)
    assert [m["role"] for m in messages[:3]] == ["user", "assistant", "tool"]
    assert not any("the held answer" in str(m.get("content")) for m in messages)


async def test_an_image_url_is_fetched_through_the_guard(served: Served, home: Home) -> None:
    part = {"type": "input_image", "image_url": "http://127.0.0.1:9/cat.png"}
    with pytest.raises(openai.BadRequestError) as refused:
        await served.client().responses.create(
            model="nanomem",
            input=[{"role": "user", "content": [{"type": "input_text", "text": "see"}, part]}],
        )
    assert refused.value.param == "input[0].content[1]"
    assert "could not be fetched" in refused.value.message
    assert served.provider.calls == [] and not (home.workspace / "media").exists()

"""Request parameters at /v1/chat/completions through the real openai SDK and the in-process
gateway: what the agent does not honour is a 400 naming it with nothing saved and the model
not called, out-of-range values are refused in OpenAI's words, and X-Session-Id chooses the
session for clients that can set only headers."""

from __future__ import annotations

from typing import Any

import openai
import pytest

from tests.helpers.api import Served


async def saved(served: Served, session: str) -> list[dict[str, Any]]:
    return list((await served.gateway.app.sessions.get(f"api:{session}")).messages)


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"n": 3}, "n"),
        ({"logprobs": True}, "logprobs"),
        ({"top_logprobs": 2}, "top_logprobs"),
        ({"frobnicate": 1}, "frobnicate"),
        ({"temperature": 2.5}, "temperature"),
        ({"top_p": -0.1}, "top_p"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"stop": ["a", "b", "c", "d", "e"]}, "stop"),
    ],
)
async def test_what_is_not_honoured_is_a_400_naming_it_with_nothing_saved(
    served: Served, extra: dict[str, Any], param: str
) -> None:
    with pytest.raises(openai.BadRequestError) as refused:
        await served.client().chat.completions.create(
            model="nanomem",
            messages=[{"role": "user", "content": "three answers please"}],
            extra_body={"session_id": "refused", **extra},
        )
    assert refused.value.param == param and param in refused.value.message
    assert served.provider.calls == []
    assert await saved(served, "refused") == []
    ok = await served.client().chat.completions.create(  # control: the same without it
        model="nanomem",
        messages=[{"role": "user", "content": "one answer please"}],
        extra_body={"session_id": "refused", "n": 1, "logprobs": False},
    )
    assert (ok.choices[0].message.content or "").endswith("one answer please")


async def test_x_session_id_chooses_the_session(served: Served) -> None:
    client = served.client().with_options(default_headers={"X-Session-Id": "from-header"})
    await client.chat.completions.create(
        model="nanomem", messages=[{"role": "user", "content": "remember the header"}]
    )
    assert [m["role"] for m in await saved(served, "from-header")] == ["user", "assistant"]
    assert await saved(served, "default") == []


async def test_the_body_chooses_the_session_before_the_header(served: Served) -> None:
    client = served.client().with_options(default_headers={"X-Session-Id": "from-header"})
    await client.chat.completions.create(
        model="gpt-4o",  # any model name: the agent answers
        messages=[{"role": "user", "content": "by the body"}],
        user="from-user",
    )
    assert len(await saved(served, "from-user")) == 2
    assert await saved(served, "from-header") == []
    bad = served.client().with_options(default_headers={"X-Session-Id": "-100"})
    with pytest.raises(openai.BadRequestError) as refused:
        await bad.chat.completions.create(
            model="nanomem", messages=[{"role": "user", "content": "a group's room?"}]
        )
    assert refused.value.param == "X-Session-Id"
    assert served.provider.calls and len(served.provider.calls) == 1  # only the good one


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"tools": [{"type": "web_search"}]}, "tools[0]"),
        ({"functions": [{"name": "f"}]}, "functions"),
        ({"tool_choice": "required"}, "tool_choice"),  # required, but no tools
        ({"response_format": {"type": "xml"}}, "response_format"),
    ],
)
async def test_tools_and_formats_the_agent_cannot_take_are_refused_by_name(
    served: Served, extra: dict[str, Any], param: str
) -> None:
    with pytest.raises(openai.BadRequestError) as refused:
        await served.client().chat.completions.create(
            model="nanomem",
            messages=[{"role": "user", "content": "use it"}],
            extra_body=extra,
        )
    assert refused.value.param == param
    assert served.provider.calls == []

"""The agent API's routes and HTTP errors, served in-process by the real gateway: GET
/v1/models/{id}, every 404, 405 and 415 under /v1 in OpenAI's error JSON (the openai SDK
reads them as its typed errors), /health left as it is, and `usage: null` on every chunk
before the usage chunk."""

from __future__ import annotations

import json
from typing import Any

import aiohttp
import openai
import pytest

from nanomem.home import Home
from tests.helpers.api import Served
from tests.helpers.gateway import API_KEY

AUTH = {"Authorization": f"Bearer {API_KEY}"}
BODY = json.dumps({"messages": [{"role": "user", "content": "hello"}]}).encode()


async def fetch(
    served: Served, method: str, path: str, body: bytes = b"", headers: dict[str, str] | None = None
) -> tuple[int, dict[str, str], Any]:
    root = served.base.removesuffix("/v1")
    async with (
        aiohttp.ClientSession() as http,
        http.request(method, root + path, data=body, headers={**AUTH, **(headers or {})}) as resp,
    ):
        text = await resp.text()
        is_json = resp.content_type == "application/json"
        return resp.status, dict(resp.headers), json.loads(text) if is_json else text


async def test_the_agent_is_a_model_the_sdk_can_retrieve(served: Served) -> None:
    model = await served.client().models.retrieve("nanomem")
    assert model.id == "nanomem" and model.owned_by == "nanomem"
    with pytest.raises(openai.NotFoundError) as missing:
        await served.client().models.retrieve("gpt-4o")
    assert missing.value.code == "model_not_found"
    assert "'gpt-4o' does not exist" in missing.value.message
    with pytest.raises(openai.AuthenticationError):  # the key first, as for every route
        await served.client("nm-wrong-key-0123456789").models.retrieve("nanomem")


@pytest.mark.parametrize(
    ("method", "path", "status", "words"),
    [
        ("GET", "/v1/nothing/here", 404, "Invalid URL (GET /v1/nothing/here)"),
        ("POST", "/v1/completions", 404, "Invalid URL (POST /v1/completions)"),
        ("GET", "/v1", 404, "Invalid URL (GET /v1)"),
        ("PUT", "/v1/chat/completions", 405, "Invalid method for URL (PUT /v1/chat/completions)"),
        ("DELETE", "/v1/models", 405, "it takes GET"),
    ],
)
async def test_an_unknown_route_or_method_is_openais_error_json(
    served: Served, method: str, path: str, status: int, words: str
) -> None:
    got, headers, body = await fetch(served, method, path)
    assert got == status
    error = body["error"]
    assert words in error["message"] and error["type"] == "invalid_request_error"
    assert set(error) == {"message", "type", "param", "code"}
    if status == 405:
        assert "Allow" in headers


async def test_the_sdk_reads_an_unknown_route_as_its_not_found_error(served: Served) -> None:
    with pytest.raises(openai.NotFoundError) as missing:
        await served.client().get("/assistants", cast_to=object)
    assert missing.value.body == {
        "message": "Invalid URL (GET /v1/assistants)",
        "type": "invalid_request_error",
        "param": None,
        "code": None,
    }


async def test_routes_outside_v1_keep_their_own_form(served: Served) -> None:
    status, _, body = await fetch(served, "GET", "/health")
    assert status == 200 and "channels" in body
    status, _, body = await fetch(served, "GET", "/elsewhere")
    assert status == 404 and isinstance(body, str)  # aiohttp's own page, not OpenAI's JSON


@pytest.mark.parametrize(
    "kind", ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x"]
)
@pytest.mark.parametrize(
    ("path", "sent"),
    [
        pytest.param("/v1/chat/completions", BODY, id="chat"),
        pytest.param("/v1/responses", json.dumps({"input": "hello"}).encode(), id="responses"),
    ],
)
async def test_a_body_that_is_not_json_is_a_415_with_nothing_saved(
    served: Served, home: Home, kind: str, path: str, sent: bytes
) -> None:
    status, _, body = await fetch(served, "POST", path, sent, {"Content-Type": kind})
    assert status == 415, body
    message = body["error"]["message"]
    assert kind.split(";")[0] in message and "Content-Type: application/json" in message
    assert served.provider.calls == []
    assert not list(home.sessions.glob("*"))


@pytest.mark.parametrize("kind", ["application/json; charset=utf-8", "application/merge+json", ""])
async def test_json_or_a_body_of_no_stated_type_is_read(served: Served, kind: str) -> None:
    headers = {"Content-Type": kind} if kind else {}
    async with (
        aiohttp.ClientSession(skip_auto_headers=["Content-Type"]) as http,
        http.post(
            f"{served.base}/chat/completions", data=BODY, headers={**AUTH, **headers}
        ) as resp,
    ):
        assert resp.status == 200, await resp.text()
        assert (await resp.json())["choices"][0]["message"]["content"].endswith("hello")


async def test_every_chunk_before_the_usage_chunk_says_usage_null(served: Served) -> None:
    body = {
        "messages": [{"role": "user", "content": "count these words for me"}],
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    _, _, text = await fetch(
        served,
        "POST",
        "/v1/chat/completions",
        json.dumps(body).encode(),
        {"Content-Type": "application/json"},
    )
    events = [line.removeprefix("data: ") for line in text.split("\n\n") if line]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(event) for event in events[:-1]]
    assert len(chunks) >= 4
    assert all("usage" in c and c["usage"] is None for c in chunks[:-1])
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] > 0
    without = {**body, "stream_options": {"include_usage": False}}
    _, _, text = await fetch(
        served,
        "POST",
        "/v1/chat/completions",
        json.dumps(without).encode(),
        {"Content-Type": "application/json"},
    )
    events = [line.removeprefix("data: ") for line in text.split("\n\n") if line]
    plain = [json.loads(event) for event in events[:-1]]
    assert all("usage" not in c for c in plain)  # as OpenAI's: no usage key unless asked

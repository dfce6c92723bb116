"""An API client's response_format schema built to hurt (found by an attack pass on the core's
client turns): a `$ref` to a URL or a file, a `$ref` to itself, `allOf`s that double the work
at every level, a schema of megabytes, `uniqueItems` over thousands of objects. Each is a short
400 before anything is saved, or checked within its budget, while other chats go on."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from nanomem.agent.bus import InboundMessage
from nanomem.agent.client_turn import ClientTurn
from nanomem.agent.outbound import Text
from nanomem.audience import Sender
from nanomem.home import Home
from nanomem.providers import ModelOptions
from nanomem.providers.provider import Reply
from nanomem.providers.scripted import ScriptedProvider, last_user_text, text
from tests.conftest import make_app
from tests.helpers.client_turns import answer, refused


def form(schema: dict[str, Any]) -> dict[str, Any]:
    return {"type": "json_schema", "json_schema": {"name": "answer", "schema": schema}}


def ask(content: str, schema: dict[str, Any]) -> InboundMessage:
    client = ClientTurn(options=ModelOptions(response_format=form(schema)))
    return InboundMessage("api", "s1", content, Sender("s1", is_owner=True), client=client)


def doubling(levels: int) -> dict[str, Any]:
    """Each level's allOf names the next one twice: 2**levels checks of the last."""
    defs: dict[str, Any] = {
        f"d{n}": {"allOf": [{"$ref": f"#/$defs/d{n + 1}"}] * 2} for n in range(levels)
    }
    defs[f"d{levels}"] = {"type": "object"}
    return {"$defs": defs, "$ref": "#/$defs/d0"}


@pytest.fixture
def hits() -> Iterator[tuple[str, list[str]]]:
    """A loopback HTTP server serving a schema, and the paths it was asked for."""
    asked: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            asked.append(self.path)
            body = json.dumps({"type": "object"}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", asked
    finally:
        server.shutdown()
        thread.join()


async def test_a_ref_to_a_url_or_a_file_is_refused_and_never_fetched(
    home: Home, hits: tuple[str, list[str]], tmp_path: Path
) -> None:
    base, asked = hits
    secret = tmp_path / "secret.json"
    secret.write_text(json.dumps({"enum": ["TOPSECRET-7f3a"]}))
    provider = ScriptedProvider([text("{}")] * 4)
    app = make_app(home, provider)
    for ref in (f"{base}/schema.json", secret.as_uri()):
        schema = {"type": "object", "properties": {"x": {"$ref": ref}}}
        part = await answer(app, ask('Answer {"x": 1}', schema))
        refused(part, "$ref", "does not point inside the schema")
        assert "TOPSECRET" not in part.text
    assert asked == []
    assert provider.calls == [] and (await app.sessions.get("api:s1")).messages == []


async def test_a_schema_that_refers_to_itself_without_end_is_refused(home: Home) -> None:
    provider = ScriptedProvider([text("{}")] * 2)
    app = make_app(home, provider)
    schema = {
        "$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}},
        "$ref": "#/$defs/a",
    }
    refused(await answer(app, ask("Go", schema)), "refers to itself")
    assert provider.calls == [] and (await app.sessions.get("api:s1")).messages == []


HUGE = {"type": "object", "properties": {f"p{n}": {"type": "string"} for n in range(60_000)}}
MANY = json.dumps([{"n": n} for n in range(4000)])


@pytest.mark.parametrize(
    ("schema", "answered", "expected"),
    [
        (doubling(19), "{}", ["took too long"]),
        (HUGE, "{}", ["too large", "limit 100000"]),
        ({"type": "array", "uniqueItems": True}, MANY, []),  # unique: it fits
    ],
    ids=["doubling-allOf", "megabytes", "uniqueItems-4000-objects"],
)
async def test_a_costly_schema_is_bounded_and_other_chats_go_on(
    home: Home, schema: dict[str, Any], answered: str, expected: list[str]
) -> None:
    def model(messages: list[dict[str, Any]]) -> Reply:
        hostile = "hostile" in last_user_text(messages)
        return text(answered if hostile else "hi")

    app = make_app(home, ScriptedProvider([model] * 4))
    started = time.monotonic()
    hostile = asyncio.create_task(answer(app, ask("hostile", schema)))
    await asyncio.sleep(0.2)
    other = await app.loop.handle(InboundMessage("cli", "direct", "hello", Sender("me")))
    assert other is not None and other.part == Text("hi")
    assert time.monotonic() - started < 3  # the other chat was never held up
    part = await hostile
    assert time.monotonic() - started < 10
    if expected:
        refused(part, *expected)
        assert (await app.sessions.get("api:s1")).messages == []
    else:
        assert part == Text(answered)

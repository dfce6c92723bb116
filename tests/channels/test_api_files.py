"""`send_file` on the agent API, through the real gateway (in-process, its HTTP server on a real
port) and the model over HTTP: the answer links the file under /v1/files/<id>, served with the
API's key, as the file was when it was sent, across a restart, until it expires."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from channels.api.files import SentFiles
from nanomem.agent import File
from nanomem.home import Home
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.telegram_gateway import LiveGateway, call, obedient, telegram_gateway
from tests.fakes.telegram_server import FakeTelegram
from tests.helpers.loopback import Model

KEY = "sk-files-test-key-1234567890"
CSV = "plant,water at\nbasil,18:00\n"
LINK = re.compile(r"\[report\.csv\]\((http://127\.0\.0\.1:\d+/v1/files/([A-Za-z0-9_-]{32}))\)")


@pytest.fixture
def model() -> Model:
    return obedient


def gateway(home: Home, servers: tuple[FakeTelegram, FakeOpenAI]) -> Any:
    telegram, llm = servers
    return telegram_gateway(home, telegram, llm, api={"enabled": True, "keys": [KEY]})


@pytest.fixture
async def live(home: Home, servers: tuple[FakeTelegram, FakeOpenAI]) -> AsyncIterator[LiveGateway]:
    (home.workspace / "report.csv").write_text(CSV)
    async with gateway(home, servers) as running:
        yield running


def url(live: LiveGateway, path: str) -> str:
    return f"http://127.0.0.1:{live.gateway.port}{path}"


async def ask(live: LiveGateway, text: str, *, stream: bool = False) -> str:
    body = {"model": "nanomem", "messages": [{"role": "user", "content": text}], "stream": stream}
    headers = {"Authorization": f"Bearer {KEY}"}
    async with (
        aiohttp.ClientSession() as session,
        session.post(url(live, "/v1/chat/completions"), json=body, headers=headers) as response,
    ):
        assert response.status == 200, await response.text()
        if not stream:
            return str((await response.json())["choices"][0]["message"]["content"])
        pieces = []
        async for line in response.content:
            data = line.decode().strip().removeprefix("data: ")
            if data and data != "[DONE]":
                for choice in json.loads(data)["choices"]:
                    pieces.append(choice["delta"].get("content") or "")
        return "\x00".join(pieces)  # where one chunk ends and the next begins


async def get(address: str, key: str | None = KEY) -> tuple[int, bytes, Any]:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    async with aiohttp.ClientSession() as session, session.get(address, headers=headers) as got:
        return got.status, await got.read(), got.headers


async def test_the_answer_links_the_file_and_the_link_serves_it_with_the_key(
    live: LiveGateway, home: Home
) -> None:
    answer = await ask(live, call("send_file", path="report.csv", caption="here it is"))
    assert "tool said: sent report.csv (" in answer  # the model read the tool's result
    found = LINK.search(answer)
    assert found is not None, answer
    assert "here it is\n\n[report.csv]" in answer
    address = found.group(1)

    status, data, headers = await get(address)
    assert status == 200 and data == CSV.encode()
    assert headers["Content-Type"].startswith("text/csv")
    assert headers["Content-Disposition"].startswith('attachment; filename="report.csv"')

    assert (await get(address, key=None))[0] == 401
    assert (await get(address, key="sk-wrong"))[0] == 401
    assert (await get(url(live, "/v1/files/" + "A" * 32)))[0] == 404
    assert (await get(url(live, "/v1/files/..%2F..%2Fconfig.toml")))[0] == 404


async def test_the_link_serves_the_file_as_it_was_sent(live: LiveGateway, home: Home) -> None:
    answer = await ask(live, call("send_file", path="report.csv"))
    found = LINK.search(answer)
    assert found is not None, answer
    (home.workspace / "report.csv").write_text("changed since\n")
    assert (await get(found.group(1)))[1] == CSV.encode()


async def test_in_a_streamed_answer_the_link_is_a_chunk_of_its_own(live: LiveGateway) -> None:
    chunks = (await ask(live, call("send_file", path="report.csv"), stream=True)).split("\x00")
    assert any(LINK.fullmatch(chunk.strip()) for chunk in chunks), chunks


async def test_a_refused_file_gives_no_link(live: LiveGateway) -> None:
    answer = await ask(live, call("send_file", path="../config.toml"))
    assert "Error:" in answer and "/v1/files/" not in answer


async def test_a_link_still_works_after_a_restart(
    home: Home, servers: tuple[FakeTelegram, FakeOpenAI]
) -> None:
    (home.workspace / "report.csv").write_text(CSV)
    async with gateway(home, servers) as first:
        found = LINK.search(await ask(first, call("send_file", path="report.csv")))
        assert found is not None
    async with gateway(home, servers) as second:
        status, data, _ = await get(url(second, f"/v1/files/{found.group(2)}"))
        assert status == 200 and data == CSV.encode()


def test_a_kept_file_expires(tmp_path: Path) -> None:
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    (workspace / "a.txt").write_text("a")
    files = SentFiles(tmp_path / "sent", workspace, keep_s=3600)
    file_id, name = files.keep(File("a.txt"))
    found = files.find(file_id)
    assert name == "a.txt" and found is not None and found.path.read_bytes() == b"a"
    assert found.mime == "text/plain"

    expired = SentFiles(tmp_path / "sent", workspace, keep_s=0)
    assert expired.find(file_id) is None
    assert list((tmp_path / "sent").iterdir()) == []  # swept


def test_a_copy_without_its_record_is_never_served(tmp_path: Path) -> None:
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    (workspace / "a.txt").write_text("a")
    files = SentFiles(tmp_path / "sent", workspace)
    file_id, _ = files.keep(File("a.txt"))
    (tmp_path / "sent" / f"{file_id}.json").unlink()  # a crash between the copy and its record
    assert files.find(file_id) is None

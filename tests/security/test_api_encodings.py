"""Request bodies under a Content-Encoding, against the real agent API on the gateway's aiohttp
server (found by a fuzz pass): an encoding nanomem does not decode is a 415, a gzip or deflate
body that is not what it says is a 400, a small gzip that inflates past api.max_body_mb is a
413 — each an OpenAI error JSON, with nothing logged above INFO (no traceback) and no turn."""

from __future__ import annotations

import gzip
import json
import logging
import zlib
from typing import Any

import aiohttp
import pytest

from nanomem.providers.scripted import text
from tests.conftest import log_lines
from tests.helpers.api import Served
from tests.helpers.gateway import API_KEY

BODY = json.dumps({"messages": [{"role": "user", "content": "squeezed"}]}).encode()


async def post(served: Served, body: bytes, encoding: str) -> tuple[int, str, dict[str, Any]]:
    """Status, content type and JSON body of the answer; a 415 must say what is read instead."""
    headers = {
        "Content-Type": "application/json",
        "Content-Encoding": encoding,
        "Authorization": f"Bearer {API_KEY}",
    }
    async with (
        aiohttp.ClientSession(auto_decompress=False) as session,
        session.post(f"{served.base}/chat/completions", data=body, headers=headers) as resp,
    ):
        text = await resp.text()
        if resp.status == 415:
            assert resp.headers["Accept-Encoding"] == "gzip, deflate"
        return resp.status, resp.content_type, json.loads(text)


@pytest.mark.parametrize(
    ("encoding", "body", "status"),
    [
        ("gzip", BODY, 400),
        ("deflate", BODY, 400),
        ("gzip", gzip.compress(BODY, mtime=0)[:-12], 400),  # cut short
        ("br", BODY, 415),
        ("zstd", BODY, 415),
        ("compress", BODY, 415),
        ("gzip, br", gzip.compress(BODY, mtime=0), 415),
    ],
    ids=["gzip-plain", "deflate-plain", "gzip-cut", "br", "zstd", "compress", "gzip-then-br"],
)
async def test_a_body_nanomem_cannot_decode_is_a_clean_error(
    served: Served, caplog: pytest.LogCaptureFixture, encoding: str, body: bytes, status: int
) -> None:
    caplog.set_level(logging.DEBUG)
    with log_lines("WARNING") as logged:
        got, content_type, answer = await post(served, body, encoding)
    assert (got, content_type) == (status, "application/json"), answer
    assert answer["error"]["type"] == "invalid_request_error"
    assert answer["error"]["message"].startswith("the request body")
    assert logged == []
    assert [r for r in caplog.records if r.levelno > logging.INFO] == []
    assert served.provider.calls == []


async def test_a_small_gzip_that_inflates_past_the_body_limit_is_a_413(served: Served) -> None:
    bomb = gzip.compress(b" " * (64 * 1024 * 1024), mtime=0)  # 64 MB of spaces in about 64 KB
    assert len(bomb) < 100 * 1024
    with log_lines("WARNING") as logged:
        status, _, answer = await post(served, bomb, "gzip")
    assert status == 413, answer
    assert "api.max_body_mb" in answer["error"]["message"]
    assert logged == []
    assert served.provider.calls == []


@pytest.mark.parametrize(
    ("encoding", "body"),
    [
        ("gzip", gzip.compress(BODY, mtime=0)),
        ("x-gzip", gzip.compress(BODY, mtime=0)),
        ("deflate", zlib.compress(BODY)),
        ("identity", BODY),
    ],
    ids=["gzip", "x-gzip", "deflate", "identity"],
)
async def test_a_body_in_an_encoding_nanomem_reads_is_answered(
    served: Served, encoding: str, body: bytes
) -> None:
    served.provider.add(text("fine"))
    status, _, answer = await post(served, body, encoding)
    assert status == 200, answer
    assert answer["choices"][0]["message"]["content"] == "fine"

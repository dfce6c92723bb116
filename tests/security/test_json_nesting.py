"""A body nested 100k levels deep (`[[[[…]]]]`), and other unreadable bodies, against the real
agent API on the gateway's aiohttp server: a 400 OpenAI error, and nothing logged above INFO."""

from __future__ import annotations

import pytest

from tests.conftest import log_lines
from tests.helpers.api import Served

DEEP = 100_000


@pytest.mark.parametrize(
    "body",
    [
        b"[" * DEEP + b"]" * DEEP,
        b'{"messages": ' + b"[" * DEEP + b"]" * DEEP + b"}",
        b'{"messages": [{"role": "user", "content": "hi", "x": '
        + b'{"a": ' * DEEP
        + b"1"
        + b"}" * DEEP
        + b"}]}",
        b"[" * DEEP,  # never closed
        b'{"messages": [{"role": "user", "content": "\xff\xfe"}]}',  # not UTF-8
    ],
    ids=["array", "in-messages", "objects", "unclosed", "not-utf8"],
)
async def test_an_unreadable_or_deeply_nested_body_is_a_clean_400(
    served: Served,
    body: bytes,
) -> None:
    with log_lines("WARNING") as logged:
        status, answer = await served.post(body)
    assert status == 400, answer
    error = answer["error"]
    assert error["type"] == "invalid_request_error" and error["message"].startswith(
        "the request body"
    )
    assert logged == []
    assert served.provider.calls == []


async def test_nesting_within_the_bound_is_still_read(served: Served) -> None:
    # 63 levels: the body, its messages, an earlier message the client sent back (not read:
    # the session holds it) and 60 levels of its content; then the new one.
    inner = b'{"a": ' * 60 + b"1" + b"}" * 60
    body = (
        b'{"messages": [{"role": "assistant", "content": '
        + inner
        + b'}, {"role": "user", "content": "nested but fine"}]}'
    )
    status, answer = await served.post(body)
    assert status == 200, answer
    assert answer["choices"][0]["message"]["content"].endswith("nested but fine")

"""Hostile Matrix events: what a stranger's or a member's client can put in an event is read
within bounds, never taken as markup, a mention of everyone, or a path on the homeserver."""

from __future__ import annotations

import asyncio
import time

import pytest

from channels.matrix.client import download
from channels.matrix.events import content, inviter, said


def test_malformed_events_are_no_message_and_raise_nothing() -> None:
    hostile: list[dict[str, object]] = [
        {},
        {"type": "m.room.message"},
        {"type": "m.room.message", "content": "text"},
        {"type": "m.room.message", "content": {"msgtype": "m.text", "body": 7}},
        {"type": "m.room.message", "content": {"msgtype": ["m.text"], "body": "x"}},
        {"type": "m.room.message", "content": {"msgtype": "m.text", "m.relates_to": "x"}},
        {"type": "m.room.message", "content": {"msgtype": "m.server_notice", "body": "x"}},
    ]
    found = [said(event) for event in hostile]
    assert found[:3] == [None, None, None] and found[4:5] == [None] and found[6] is None
    assert found[3] is not None and found[3].body == ""  # a number is no text
    assert found[5] is not None and found[5].reply_to == ""
    assert inviter(["not an event", {"type": 5}], "@bot:x") == ""


def test_a_huge_body_and_a_flood_of_mentions_are_read_within_bounds() -> None:
    event = {
        "type": "m.room.message",
        "sender": "@eve:x",
        "event_id": "$e",
        "content": {
            "msgtype": "m.text",
            "body": "a" * 5_000_000 + "\ud800",
            "m.mentions": {"user_ids": ["@bot:x"] * 1_000_000},
            "filename": "n" * 10_000,
        },
    }
    started = time.monotonic()
    message = said(event)
    assert message is not None
    assert len(message.body) == 100_000 and len(message.mentions) == 100
    assert len(message.file_name) == 200
    assert time.monotonic() - started < 2


def test_the_models_text_is_never_markup_nor_a_ping() -> None:
    sent = content('@room <a href="https://evil">click</a><img src=x onerror=alert(1)>')
    assert "<a" not in sent["formatted_body"] and "<img" not in sent["formatted_body"]
    linked = content("[click](javascript:alert(1)) and [ok](https://example.org)")
    assert "javascript:" not in linked["formatted_body"].split("href=")[-1].split(">")[0]
    assert sent["m.mentions"] == {}  # clients ping nobody for @room or names in the body


@pytest.mark.parametrize(
    "mxc",
    [
        "mxc://../../admin",
        "mxc://server/../../x",
        "https://evil/x",
        "mxc://s/a/b",
        "mxc://",
        "mxc://s/..",
        "mxc://s/x?y",
    ],
)
def test_a_media_address_that_is_no_media_id_is_refused_before_any_request(mxc: str) -> None:
    with pytest.raises(ValueError, match="not a media address"):
        asyncio.run(download("http://127.0.0.1:9", "token", mxc, 1000))

"""An album interrupted by a SIGKILL is answered once, with all its parts, after the restart:
the real gateway in a subprocess against the loopback Bot API and model."""

from __future__ import annotations

import base64
import signal
from pathlib import Path
from typing import Any

import pytest

from nanomem.cli.onboard import onboard
from nanomem.home import Home
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.telegram_server import FakeTelegram
from tests.helpers import wait_until
from tests.helpers.gateway import GatewayProcess, texts

pytestmark = pytest.mark.slow

USER = 1000
PHOTOS = [b"\xff\xd8\xff\xe0 one", b"\xff\xd8\xff\xe0 two", b"\xff\xd8\xff\xe0 three"]
VISION = {"NANOMEM_LLM__SUPPORTS_IMAGES": "true", "NANOMEM_TELEGRAM__STREAM": "false"}


def album_turns(llm: FakeOpenAI) -> list[list[bytes]]:
    """The images of each model request whose new user message carries some."""
    found = []
    for request in llm.requests:
        content = [m for m in request["messages"] if m["role"] == "user"][-1]["content"]
        parts: list[Any] = content if isinstance(content, list) else []
        urls = [p["image_url"]["url"] for p in parts if p.get("type") == "image_url"]
        if urls:
            found.append([base64.b64decode(url.split(",", 1)[1]) for url in urls])
    return found


def answered_after_a_later_message(telegram: FakeTelegram) -> list[str]:
    """The chat's replies once a message sent now is answered: a duplicate answer of the album
    would come before it (one chat's messages are answered in order)."""
    telegram.send_text(USER, "later message")
    wait_until(
        lambda: any("later message" in t for t in texts(telegram.sent_messages(USER))),
        timeout=30,
        what="the later message's reply",
    )
    return [t for t in texts(telegram.sent_messages(USER)) if t.startswith("echo")]


def test_an_album_cut_by_a_crash_while_gathering_is_answered_once_whole(tmp_path: Path) -> None:
    home = Home(tmp_path / "home")
    onboard(home)
    with FakeTelegram() as telegram, FakeOpenAI() as llm:
        slow = GatewayProcess(home, telegram, llm, **VISION, NANOMEM_TELEGRAM__ALBUM_WAIT_S="10")
        first = telegram.send_album(USER, PHOTOS[:2], caption="our garden")
        # Sent after the album began: stored too, waiting behind the album when the crash comes.
        after = telegram.send_text(USER, "sent after the album")
        wait_until(lambda: telegram.acknowledged(after["update_id"]), 30, what="stored")
        slow.stop(signal.SIGKILL)
        assert llm.requests == []
        # The album's last part comes while the gateway is down.
        group = first[0]["message"]["media_group_id"]
        telegram.send_album(USER, PHOTOS[2:], media_group_id=group)
        with GatewayProcess(home, telegram, llm, **VISION):
            wait_until(lambda: album_turns(llm), timeout=30, what="the album's turn")
            replies = answered_after_a_later_message(telegram)
        assert album_turns(llm) == [PHOTOS]
        assert len(replies) == 3 and "our garden" in replies[0]
        assert "sent after the album" in replies[1]  # answered after the album, as it was sent


def test_an_album_cut_by_a_crash_during_its_turn_is_answered_once_whole(tmp_path: Path) -> None:
    home = Home(tmp_path / "home")
    onboard(home)
    with FakeTelegram() as telegram, FakeOpenAI() as llm:
        llm.hang(120)
        gateway = GatewayProcess(home, telegram, llm, **VISION)
        telegram.send_album(USER, PHOTOS, caption="our garden")
        wait_until(lambda: llm.requests, timeout=30, what="the album's turn")
        gateway.stop(signal.SIGKILL)
        assert album_turns(llm) == [PHOTOS]
        llm.clear()
        with GatewayProcess(home, telegram, llm, **VISION):
            replies = answered_after_a_later_message(telegram)
        assert album_turns(llm) == [PHOTOS]
        assert len(replies) == 2 and "our garden" in replies[0]

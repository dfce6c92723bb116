"""A link planted in the workspace by a shell command (sandboxed: the workspace is the one folder
it may write) must not carry nanomem's own later writes out of it: an image sent through the
agent API is saved under workspace/media like a Telegram file, through the real gateway."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from nanomem.home import Home
from tests.channels.test_api_e2e import KEY, post
from tests.fakes.openai_server import FakeOpenAI, echo_step
from tests.fakes.telegram_server import FakeTelegram
from tests.test_gateway_e2e import GatewayProcess

PNG = b"\x89PNG\r\n\x1a\nnot really a picture"


@pytest.mark.slow
def test_an_api_image_is_not_saved_through_a_planted_media_link(home: Home, tmp_path: Path) -> None:
    outside = tmp_path / "autostart"
    outside.mkdir()
    (home.workspace / "media").symlink_to(outside)  # what `ln -s ... media` in the sandbox left
    parts = [
        {"type": "text", "text": "what is this"},
        {
            "type": "image_url",
            "image_url": {"url": "data:image/png;base64," + base64.b64encode(PNG).decode()},
        },
    ]
    body = json.dumps({"messages": [{"role": "user", "content": parts}]}).encode()
    with FakeTelegram() as telegram, FakeOpenAI() as llm:
        llm.set_fallback(echo_step)
        process = GatewayProcess(
            home, telegram, llm, NANOMEM_API__ENABLED="true", NANOMEM_API__KEYS=json.dumps([KEY])
        )
        try:
            process.wait_for_line(r"api: running")
            status, answer = post(process, body)
        finally:
            assert process.stop() == 0, "".join(process.lines)
    assert list(outside.iterdir()) == [], answer
    assert status == 500 and "media" in answer["error"]["message"], answer
    assert "Traceback" not in "".join(process.lines)

"""A flood of content parts to the real agent API (found by a fuzz pass: 3,000 image_url parts
saved 3,000 files and made a 117k-character message): more parts than api.max_parts, or files
that take the message past agent.max_message_chars, are a 400 naming the limit, with nothing
saved, no session written and the model not called."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

from channels.api.wire import FILE_PART_CHARS
from nanomem.config import ApiSettings
from nanomem.home import Home
from nanomem.providers.scripted import text
from tests.helpers.api import Served

# A real 1x1 PNG.
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)
DATA_URL = "data:image/png;base64," + base64.b64encode(PNG).decode()


def request(parts: list[dict[str, Any]]) -> bytes:
    return json.dumps({"messages": [{"role": "user", "content": parts}]}).encode()


def image() -> dict[str, Any]:
    return {"type": "image_url", "image_url": {"url": DATA_URL}}


def files_below(folder: Path) -> list[Path]:
    return [path for path in folder.rglob("*") if path.is_file()] if folder.exists() else []


def nothing_kept(home: Home, served: Served) -> None:
    assert files_below(home.workspace / "media") == []
    assert files_below(home.sessions) == []
    assert served.provider.calls == []


async def test_three_thousand_images_are_refused_with_nothing_saved(
    served: Served, home: Home
) -> None:
    parts = [{"type": "text", "text": "what are these?"}, *[image() for _ in range(3000)]]
    status, answer = await served.post(request(parts))
    assert status == 400, answer
    limit = ApiSettings().max_parts
    assert f"3001 content parts; limit {limit}, api.max_parts" in answer["error"]["message"]
    nothing_kept(home, served)


async def test_files_count_against_the_message_limit(served: Served, home: Home) -> None:
    # agent.max_message_chars is 32000 here; the text alone fits, with its two images it does not.
    words = "w" * (32000 - FILE_PART_CHARS)
    status, answer = await served.post(request([{"type": "text", "text": words}, image(), image()]))
    assert status == 400, answer
    assert "agent.max_message_chars" in answer["error"]["message"]
    assert "2 files" in answer["error"]["message"]
    nothing_kept(home, served)


async def test_a_few_images_within_both_limits_are_answered(served: Served, home: Home) -> None:
    served.provider.add(text("two pictures"))
    parts = [{"type": "text", "text": "and these?"}, image(), image()]
    status, answer = await served.post(request(parts))
    assert status == 200, answer
    assert len(files_below(home.workspace / "media")) == 2

import base64
from typing import Any

import pytest

from nanomem.agent.bus import InboundMessage
from nanomem.home import Home
from nanomem.providers.provider import Reply, Usage
from nanomem.providers.scripted import ScriptedProvider, call, text
from nanomem.tools import Image, Tool, ToolOutput
from tests.conftest import make_app

PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)


def photo_message(path: str = "media/photo.png") -> InboundMessage:
    return InboundMessage("telegram", "42", "what is this?", media=(path,))


async def test_images_go_inline_to_a_vision_model_but_not_into_the_session(home: Home) -> None:
    provider = ScriptedProvider()
    app = make_app(home, provider, llm={"supports_images": True})
    (app.workspace / "media").mkdir()
    (app.workspace / "media" / "photo.png").write_bytes(PNG)
    await app.loop.handle(photo_message())
    sent = provider.calls[-1][-1]["content"]
    assert isinstance(sent, list) and sent[0]["type"] == "text"
    assert sent[1]["image_url"]["url"] == "data:image/png;base64," + base64.b64encode(PNG).decode()
    stored = (await app.sessions.get("telegram:42")).messages[0]["content"]
    assert isinstance(stored, str) and "[attachments: media/photo.png]" in stored
    await app.loop.handle(InboundMessage("telegram", "42", "and now?"))
    replayed = provider.calls[-1][1]["content"]
    assert isinstance(replayed, str)  # a photo is sent once, not with every later turn


async def test_a_text_only_model_gets_the_path_as_a_note(home: Home) -> None:
    provider = ScriptedProvider()
    app = make_app(home, provider, llm={"supports_images": False})
    (app.workspace / "media").mkdir()
    (app.workspace / "media" / "photo.png").write_bytes(PNG)
    await app.loop.handle(photo_message())
    sent = provider.calls[-1][-1]["content"]
    assert isinstance(sent, str) and "[attachments: media/photo.png]" in sent


@pytest.mark.parametrize("path", ["../outside.png", "/etc/hostname.png", "media/missing.png"])
async def test_media_outside_the_workspace_is_never_read(home: Home, path: str) -> None:
    (home.root / "outside.png").write_bytes(PNG)
    provider = ScriptedProvider()
    app = make_app(home, provider, llm={"supports_images": True})
    await app.loop.handle(photo_message(path))
    assert isinstance(provider.calls[-1][-1]["content"], str)  # no image was read


async def test_a_photo_counts_in_the_prompt_it_is_sent_in(home: Home) -> None:
    """The estimate the provider's usage is compared with includes the inline image: a
    provider that counts exactly what nanomem counts teaches no higher ratio."""
    app = make_app(home, ScriptedProvider(), llm={"supports_images": True})
    (app.workspace / "media").mkdir()
    (app.workspace / "media" / "photo.png").write_bytes(PNG)
    budget = app.budget
    budget.use_exact()

    def same_count(messages: list[dict[str, Any]]) -> Reply:
        prompt = sum(budget.count(m) for m in messages) + budget.count_tools(
            app.loop.tools.schema_text
        )
        return Reply("A pixel.", usage=Usage(prompt, 3), finish_reason="stop")

    provider = app.loop.provider = ScriptedProvider([same_count])
    before = budget.calibration.factor
    await app.loop.handle(photo_message())
    assert isinstance(provider.calls[-1][-1]["content"], list)  # the image went
    assert budget.calibration.factor < before  # observed ratio 1.0, pulled down from 1.1


def chart_tool(app: Any) -> None:
    def chart() -> ToolOutput:
        """Draw a chart."""
        return ToolOutput("a chart", (Image("image/png", PNG),))

    app.tools.add(Tool.from_function(chart))


async def test_a_tools_image_goes_to_the_next_model_call_only(home: Home) -> None:
    provider = ScriptedProvider([call("chart", {}), call("chart", {}), text("two charts")])
    app = make_app(home, provider, llm={"supports_images": True})
    chart_tool(app)
    await app.loop.handle(InboundMessage("telegram", "42", "draw"))
    after_first = provider.calls[1][-1]  # after the tool results, not inside them
    assert provider.calls[1][-2]["role"] == "tool"
    assert after_first["role"] == "user" and after_first["content"][0]["type"] == "text"
    url = after_first["content"][1]["image_url"]["url"]
    assert url == "data:image/png;base64," + base64.b64encode(PNG).decode()
    third = provider.calls[2]  # the second chart's image only: the first was shown once
    assert sum(isinstance(m["content"], list) for m in third) == 1
    assert third[-1]["role"] == "user" and third[-2]["role"] == "tool"
    stored = (await app.sessions.get("telegram:42")).messages
    assert [m["role"] for m in stored] == ["user", *["assistant", "tool"] * 2, "assistant"]
    assert all(isinstance(m["content"], str | None) for m in stored)
    assert sum("[image saved: media/tool-" in str(m["content"]) for m in stored) == 2


async def test_a_text_only_model_gets_no_image_from_a_tool(home: Home) -> None:
    provider = ScriptedProvider([call("chart", {}), text("a chart")])
    app = make_app(home, provider, llm={"supports_images": False})
    chart_tool(app)
    await app.loop.handle(InboundMessage("telegram", "42", "draw"))
    assert provider.calls[1][-1]["role"] == "tool"
    assert "[image saved: media/tool-" in provider.calls[1][-1]["content"]

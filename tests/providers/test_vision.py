"""Whether photos reach the model as images: the lean path decides without litellm."""

import base64
import subprocess
import sys
import textwrap

import pytest

from nanomem.config import LLMSettings
from nanomem.home import Home
from nanomem.providers.vision import supports_images
from tests.fakes.openai_server import FakeOpenAI

PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)


@pytest.mark.parametrize(
    ("model", "api_base", "expected"),
    [
        ("openai/gpt-4o-mini", None, True),
        ("gpt-4.1", None, True),
        ("openai/o3", None, True),
        ("openai/o4-mini", None, True),
        ("openai/o3-mini", None, False),
        ("o1-mini-2024-09-12", None, False),
        ("openai/o1-preview", None, False),
        ("openai/gemma-3-1b-it", "http://127.0.0.1:8000/v1", False),
        ("openai/gemma-3-27b-it", "http://127.0.0.1:8000/v1", True),
        ("ollama/gemma3:4b", None, True),
        ("ollama/gemma3:1b", None, False),
        ("ollama_chat/qwen2.5vl:7b", None, True),
        ("ollama/llama4:scout", None, True),
        ("ollama/mistral-small3.1", None, True),
        ("openrouter/anthropic/claude-3.5-sonnet", None, True),
        ("openai/llava:13b", "http://127.0.0.1:11434/v1", True),
        ("hosted_vllm/Qwen/Qwen2.5-VL-7B-Instruct", "http://127.0.0.1:8000/v1", True),
        ("openai/llama3.1", "http://127.0.0.1:11434/v1", False),
        ("openai/fake", "http://127.0.0.1:1/v1", False),
        ("deepseek/deepseek-chat", None, False),
        ("openai/yolo1", "http://127.0.0.1:1/v1", False),
    ],
)
def test_the_lean_path_knows_vision_models_by_name(
    model: str, api_base: str | None, expected: bool
) -> None:
    assert supports_images(LLMSettings(model=model, api_base=api_base)) is expected


@pytest.mark.parametrize("configured", [True, False])
def test_the_setting_wins(configured: bool) -> None:
    llm = LLMSettings(model="openai/llama3.1", api_base="http://x/v1", supports_images=configured)
    assert supports_images(llm) is configured
    llm = LLMSettings(model="openai/gpt-4o", supports_images=configured)
    assert supports_images(llm) is configured


def test_a_photo_on_the_lean_path_goes_inline_without_loading_litellm(home: Home) -> None:
    """The real app in a fresh process (litellm may already be loaded in this one)."""
    (home.workspace / "media").mkdir()
    (home.workspace / "media" / "photo.png").write_bytes(PNG)
    script = textwrap.dedent(
        """
        import asyncio, sys
        from pathlib import Path
        from nanomem.app import build_app
        from nanomem.agent.bus import InboundMessage
        from nanomem.config import load_settings
        from nanomem.home import Home

        home = Home(Path(sys.argv[1]))
        llm = {"model": "openai/gpt-4o-mini", "api_base": sys.argv[2], "api_key": "sk-test"}
        app = build_app(load_settings(home.config, {"llm": llm}), home)

        async def main() -> None:
            msg = InboundMessage("telegram", "42", "what is this?", media=("media/photo.png",))
            reply = await app.loop.handle(msg)
            await app.loop.close(grace_s=30)
            await app.aclose()
            assert reply is not None and reply.part.style != "error", reply

        asyncio.run(main())
        print("litellm loaded" if "litellm" in sys.modules else "litellm not loaded")
        """
    )
    with FakeOpenAI() as server:
        done = subprocess.run(
            [sys.executable, "-c", script, str(home.root), server.base_url],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr[-2000:]
        sent = server.requests[-1]["messages"][-1]["content"]
    assert done.stdout.strip() == "litellm not loaded"
    assert isinstance(sent, list) and sent[1]["type"] == "image_url"

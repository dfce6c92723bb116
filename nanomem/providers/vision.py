"""Whether the chat model takes images, decided without importing litellm on the lean path.

`llm.supports_images` wins when set. A model that goes through litellm asks litellm's model
list (litellm is loaded for it anyway). On the lean client (routing.py), importing
litellm for one yes/no would cost 2 s and 170 MB, so the model's name decides: the families
below are known to take images; any other name gets the photo's path, as litellm answers for a
model it does not know (a local server's text model would refuse an image with a 400).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from nanomem.providers.routing import route

if TYPE_CHECKING:
    from nanomem.config import LLMSettings

# Lowercase fragments of model names that take images, as OpenAI-compatible hosts name them.
VISION_NAMES = (
    "gpt-4o",
    "gpt-4.1",
    "gpt-4.5",
    "gpt-4-turbo",
    "gpt-4-vision",
    "gpt-5",
    "chatgpt-4o",
    "o1",
    "o3",
    "o4",
    "claude-3",
    "claude-opus-4",
    "claude-sonnet-4",
    "claude-haiku-4",
    "gemini",
    "gemma-3",
    "grok-2-vision",
    "grok-4",
    "llava",
    "bakllava",
    "pixtral",
    "mistral-small-3",
    "qwen-vl",
    "qwen2-vl",
    "qwen2.5-vl",
    "qwen3-vl",
    "-vision",
    "minicpm-v",
    "moondream",
    "llama-4",
    "internvl",
    # Ollama's spellings (`ollama/gemma3:4b`)
    "gemma3",
    "qwen2.5vl",
    "llama4",
    "mistral-small3.1",
    "mistral-small3.2",
)
# ... but these, whose names contain one of the above, take text only (OpenAI's reasoning
# previews and minis before o4-mini, Gemma 3's 270M and 1B): an image sent to them is a 400.
TEXT_ONLY_NAMES = (
    "o1-mini",
    "o1-preview",
    "o3-mini",
    "gemma-3-1b",
    "gemma-3-270m",
    "gemma3:1b",
    "gemma3:270m",
)


def supports_images(llm: LLMSettings) -> bool:
    """Whether photos go to the model as images (otherwise it gets their path)."""
    if llm.supports_images is not None:
        return llm.supports_images
    path = route(llm)
    if path.path == "litellm":
        from nanomem.providers.litellm_provider import litellm_supports_images as litellm_says

        return litellm_says(llm.model)
    name = path.model.lower().rsplit("/", 1)[-1]  # "meta-llama/Llama-4-Scout" → its own name
    if any(_fragment_in(fragment, name) for fragment in TEXT_ONLY_NAMES):
        return False
    return any(_fragment_in(fragment, name) for fragment in VISION_NAMES)


def _fragment_in(fragment: str, name: str) -> bool:
    # "o1" must begin the name (o1-pro), not match inside "llama3.1-o1ish" or "yolo1".
    if fragment[0] == "o" and fragment[1].isdigit():
        return name.startswith(fragment)
    return fragment in name

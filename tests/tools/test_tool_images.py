"""Images a tool returns: saved in the chat's media folder (a group's own), named in the text,
bounded in type and count; what is refused is said, and nothing is written for it."""

from __future__ import annotations

import re
from pathlib import Path

from nanomem.audience import Audience, Sender
from nanomem.tools import OUTSIDE, Image, Tool, ToolContext, ToolOutput, ToolRegistry
from nanomem.tools.images import MAX_TOOL_IMAGE_BYTES, MAX_TOOL_IMAGES
from tests.fakes.mcp_server import TINY_PNG

JPEG = b"\xff\xd8\xff\xe0" + b"\x00" * 16
OWNER = ToolContext(Sender("owner", is_owner=True), Audience("telegram:1", True))
GROUP = ToolContext(Sender("77", "Bo", shared_room=True), Audience("telegram:-100", False))
SAVED = re.compile(r"\[image saved: (media/tool-[0-9a-f]{12}\.(?:png|jpg)) \(")


def registry(workspace: Path | None, *images: Image, text: str = "a chart") -> ToolRegistry:
    def chart() -> ToolOutput:
        """Draw a chart."""
        return ToolOutput(text, images)

    def plain() -> str:
        """Say something."""
        return "just text"

    tools = [Tool.from_function(chart), Tool.from_function(plain)]
    return ToolRegistry(tools, workspace=workspace)


async def test_an_image_is_saved_and_named_in_the_text(tmp_path: Path) -> None:
    out = await registry(tmp_path, Image("image/png", TINY_PNG)).run("chart", "{}", OWNER)
    assert out.text.startswith("a chart\n[image saved: media/tool-")
    (path,) = SAVED.findall(out.text)
    assert (tmp_path / path).read_bytes() == TINY_PNG
    assert [(i.mime, i.data, i.path) for i in out.images] == [("image/png", TINY_PNG, path)]
    said = await registry(tmp_path, Image("image/png", TINY_PNG)).call("chart", "{}", OWNER)
    assert SAVED.search(said)  # `call` gives the same text


async def test_a_str_tool_is_unchanged(tmp_path: Path) -> None:
    tools = registry(tmp_path)
    assert await tools.run("plain", "{}", OWNER) == ToolOutput("just text")
    assert await tools.call("plain", "{}", OWNER) == "just text"
    assert not (tmp_path / "media").exists()


async def test_a_groups_images_go_to_its_own_folder(tmp_path: Path) -> None:
    out = await registry(tmp_path, Image("image/jpeg", JPEG)).run("chart", "{}", GROUP)
    (path,) = SAVED.findall(out.text)  # named from the group's folder, where its tools start
    assert (tmp_path / "rooms" / "telegram_-100" / path).read_bytes() == JPEG
    assert not (tmp_path / "media").exists()


async def test_what_is_not_an_image_we_send_is_said_and_not_saved(tmp_path: Path) -> None:
    images = (
        Image("image/svg+xml", b"<svg/>"),
        Image("image/png", JPEG),  # the bytes say otherwise
        Image("audio/wav", b"RIFF"),
    )
    out = await registry(tmp_path, *images).run("chart", "{}", OWNER)
    lines = out.text.splitlines()[1:]
    assert lines == [
        "[image not saved (image/svg+xml, 6 bytes): image/svg+xml is not an image type sent"
        " to models (png, jpeg, webp, gif)]",
        f"[image not saved (image/png, {len(JPEG)} bytes): its bytes are not image/png]",
        "[image not saved (audio/wav, 4 bytes): audio/wav is not an image type sent to models"
        " (png, jpeg, webp, gif)]",
    ]
    assert out.images == () and not (tmp_path / "media").exists()


async def test_an_image_too_large_to_send_inline_is_said_and_not_saved(tmp_path: Path) -> None:
    huge = TINY_PNG + b"\x00" * MAX_TOOL_IMAGE_BYTES  # a PNG's bytes, past what models take
    out = await registry(tmp_path, Image("image/png", huge)).run("chart", "{}", OWNER)
    assert out.text.splitlines()[1] == (
        f"[image not saved (image/png, {len(huge)} bytes): {len(huge)} bytes, more than the"
        f" {MAX_TOOL_IMAGE_BYTES} a model takes inline]"
    )
    assert out.images == () and not (tmp_path / "media").exists()


async def test_the_count_is_bounded(tmp_path: Path) -> None:
    images = [Image("image/png", TINY_PNG)] * (MAX_TOOL_IMAGES + 2)  # a flood is one line
    out = await registry(tmp_path, *images).run("chart", "{}", OWNER)
    assert len(out.images) == MAX_TOOL_IMAGES == len(SAVED.findall(out.text))
    assert out.text.endswith(
        f"\n[2 more images not saved: at most {MAX_TOOL_IMAGES} in one result]"
    )
    assert len(list((tmp_path / "media").iterdir())) == MAX_TOOL_IMAGES


async def test_a_media_folder_swapped_for_a_link_gets_nothing(tmp_path: Path) -> None:
    workspace, elsewhere = tmp_path / "workspace", tmp_path / "elsewhere"
    workspace.mkdir()
    elsewhere.mkdir()
    (workspace / "media").symlink_to(elsewhere)
    out = await registry(workspace, Image("image/png", TINY_PNG)).run("chart", "{}", OWNER)
    assert "[image not saved (image/png," in out.text and out.images == ()
    assert list(elsewhere.iterdir()) == []


async def test_without_a_workspace_an_image_is_only_named() -> None:
    out = await registry(None, Image("image/png", TINY_PNG), text="").run("chart", "{}", OUTSIDE)
    assert out == ToolOutput("[1 image(s) not kept: no workspace to save them in]")

"""Images a tool returns: checked, saved in the chat's media folder, and named in its text.

A tool returns `ToolOutput(text, images)` instead of a str when it has images; the registry
saves each one (`save_images`) and the turn shows them to a model that takes images
(agent/react_loop.py). What the session keeps is the text, with where each image is saved.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import NamedTuple

from nanomem.audience import media_folder, room_folder
from nanomem.durable import write_below

# The types providers take inline, by file suffix (photos) and by MIME type (tools' images).
IMAGE_TYPES = {
    ".jpg": "image/jpeg",
    ".jpeg": "image/jpeg",
    ".png": "image/png",
    ".webp": "image/webp",
    ".gif": "image/gif",
}
SUFFIXES = {"image/jpeg": ".jpg", "image/png": ".png", "image/webp": ".webp", "image/gif": ".gif"}
MAX_IMAGE_BYTES = 2000 * 2**20  # telegram.max_file_mb's ceiling: the channel checked the size
MAX_TOOL_IMAGES = 4  # per tool result: more are named in its text, not saved or sent
# A tool's image goes to the model inline: providers refuse the whole request above about 5 MB
# (Anthropic's limit; OpenAI takes 20), so a larger one is named and not sent.
MAX_TOOL_IMAGE_BYTES = 5 * 2**20


# NamedTuples, not frozen dataclasses: ~6x cheaper to define, and this module loads on every
# `nanomem chat -m`.
class Image(NamedTuple):
    mime: str  # one of SUFFIXES' keys once saved
    data: bytes
    path: str = ""  # where it was saved, as the chat's file tools name it


class ToolOutput(NamedTuple):
    """What a tool returns when it has images; a plain str still means text only."""

    text: str
    images: tuple[Image, ...] = ()


def problem(image: Image) -> str | None:
    """Why an image is not saved nor sent; None when it is fine."""
    mime = image.mime.lower().split(";")[0].strip()
    if mime not in SUFFIXES:
        kind = image.mime or "no type"
        return f"{kind} is not an image type sent to models (png, jpeg, webp, gif)"
    if len(image.data) > MAX_TOOL_IMAGE_BYTES:
        return f"{len(image.data)} bytes, more than the {MAX_TOOL_IMAGE_BYTES} a model takes inline"
    # A provider refuses the whole request for an image it cannot decode: the turn would fail.
    if image_type(image.data) != mime:
        return f"its bytes are not {mime}"
    return None


def save_images(
    workspace: Path, session: str | None, images: tuple[Image, ...], room: bool
) -> tuple[list[str], tuple[Image, ...]]:
    """Save each usable image in the chat's media folder (blocking): a note per image for the
    tool's text, and the images saved (with their paths). No link below the workspace is
    followed, as with the files a chat sends (agent/channel.py save_media)."""
    root = workspace.resolve()
    folder = media_folder(root, session or "", room)
    # A group's file tools start in its own folder: its images are named from there.
    seen_from = room_folder(root, session or "", room) or root
    notes: list[str] = []
    saved: list[Image] = []
    for image in images[:MAX_TOOL_IMAGES]:
        size = f"{image.mime}, {len(image.data)} bytes"
        if (why := problem(image)) is not None:
            notes.append(f"[image not saved ({size}): {why}]")
            continue
        mime = image.mime.lower().split(";")[0].strip()
        path = folder / f"tool-{os.urandom(6).hex()}{SUFFIXES[mime]}"
        try:
            write_below(root, path.relative_to(root), image.data)
        except OSError as exc:  # a link in the way (a command's?), or the disk is full
            notes.append(f"[image not saved ({size}): {exc.strerror or type(exc).__name__}]")
            continue
        named = str(path.relative_to(seen_from))
        notes.append(f"[image saved: {named} ({size})]")
        saved.append(Image(mime, image.data, named))
    if len(images) > MAX_TOOL_IMAGES:  # one line, however many: the text stays bounded
        notes.append(
            f"[{len(images) - MAX_TOOL_IMAGES} more images not saved: at most {MAX_TOOL_IMAGES}"
            " in one result]"
        )
    return notes, tuple(saved)


def image_type(data: bytes) -> str | None:
    """The type of an image models take, told by its first bytes (what a tool, a server or a
    data URL claims may be wrong); None for anything else."""
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if data.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if data.startswith((b"GIF87a", b"GIF89a")):
        return "image/gif"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return None


def image_suffix(data: bytes) -> str | None:
    """The suffix such an image is saved under, by its first bytes; None for anything else."""
    mime = image_type(data)
    return None if mime is None else SUFFIXES[mime]

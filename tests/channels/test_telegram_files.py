"""How a file goes to Telegram, by its name and size, and its caption within Telegram's 1024."""

from __future__ import annotations

import pytest

from channels.telegram.files import CAPTION_LIMIT, MAX_PHOTO_BYTES, caption_of, file_kind
from channels.telegram.format import visible_length


@pytest.mark.parametrize(
    ("name", "size", "kind"),
    [
        ("chart.png", 10, "photo"),
        ("Photo.JPEG", 10, "photo"),
        ("huge.jpg", MAX_PHOTO_BYTES + 1, "document"),  # too big for sendPhoto
        ("reply.ogg", 10, "voice"),
        ("note.opus", 10, "voice"),
        ("song.mp3", 10, "audio"),
        ("take.flac", 10, "audio"),
        ("report.csv", 10, "document"),
        ("archive.tar.gz", 10, "document"),
        ("README", 10, "document"),
    ],
)
def test_a_file_goes_as_its_kind(name: str, size: int, kind: str) -> None:
    assert file_kind(name, size) == kind


def test_a_caption_is_rendered_from_markdown() -> None:
    assert caption_of("the **plan** for `monday`") == (
        "the <b>plan</b> for <code>monday</code>",
        True,
    )


def test_a_caption_too_long_for_telegram_is_cut_as_plain_text() -> None:
    caption, html = caption_of("**" + "🌱 water " * 300 + "**")
    assert not html and caption.endswith("…")
    assert visible_length(caption) <= CAPTION_LIMIT  # an emoji beyond the BMP counts twice
    assert "<b>" not in caption

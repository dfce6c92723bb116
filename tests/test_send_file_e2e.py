"""`send_file` through the real gateway: the Telegram channel against the loopback Bot API, the
model over HTTP to the loopback OpenAI fake (a model that makes the tool calls it is told to).
A file made in the chat comes back as a document, an image as a photo, a voice note as one;
what the chat may not read is refused and nothing is sent."""

from __future__ import annotations

import os
import struct
import zlib
from collections.abc import AsyncIterator
from typing import Any

import pytest

from nanomem.audience import room_folder
from nanomem.home import Home
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.telegram_gateway import BOT, LiveGateway, call, obedient, telegram_gateway
from tests.fakes.telegram_server import FakeTelegram
from tests.helpers import until
from tests.helpers.loopback import Model

OWNER, GROUP, MEMBER = 1000, -100777, 1001
CSV = "plant,water at\nbasil,18:00\nfern,18:30\n"
SENDS = ("sendphoto", "senddocument", "sendvoice", "sendaudio")


@pytest.fixture
def model() -> Model:
    return obedient


@pytest.fixture
async def live(home: Home, servers: tuple[FakeTelegram, FakeOpenAI]) -> AsyncIterator[LiveGateway]:
    telegram, llm = servers
    allowed = {"allow_from": [OWNER, GROUP], "owner": OWNER}
    async with telegram_gateway(home, telegram, llm, telegram=allowed) as gateway:
        yield gateway


def png(width: int = 2, height: int = 2) -> bytes:
    """A real (tiny, grey) PNG."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    rows = b"".join(b"\x00" + b"\x80" * width for _ in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(rows))
        + chunk(b"IEND", b"")
    )


def sent_files(telegram: FakeTelegram, chat: int) -> list[tuple[str, dict[str, Any]]]:
    """(kind, message) of each file the bot sent to `chat`, in order."""
    return [
        (kind, message)
        for message in telegram.sent_messages(chat)
        for kind in ("photo", "document", "voice", "audio")
        if kind in message
    ]


async def say(live: LiveGateway, chat: int, text: str, **sender: Any) -> str:
    """`text` from a person in `chat`, and the bot's next text message there (the files it
    sends meanwhile are messages without text)."""
    telegram = live.telegram
    seen = max((m["message_id"] for m in telegram.sent_messages(chat)), default=0)
    telegram.send_text(chat, text, **sender)

    def replied() -> str | None:
        for message in telegram.sent_messages(chat):
            words = str(message.get("text") or "")
            if message["message_id"] > seen and words and not words.startswith("⚙"):
                return words
        return None

    return str(await until(replied, 30))


def file_calls(telegram: FakeTelegram) -> list[str]:
    return [method for method, _ in telegram.calls if method in SENDS]


async def test_the_csv_the_model_just_made_arrives_as_a_document_with_its_caption(
    live: LiveGateway,
) -> None:
    wrote = await say(live, OWNER, call("write_file", path="report.csv", content=CSV))
    assert wrote.startswith("tool said: Wrote")
    reply = await say(live, OWNER, call("send_file", path="report.csv", caption="here it is"))

    # The model got the tool's result and replied after it.
    assert reply.startswith("tool said: sent report.csv (")
    assert "to the chat" in reply
    ((kind, message),) = sent_files(live.telegram, OWNER)
    assert kind == "document"
    assert message["document"]["file_name"] == "report.csv"
    assert message["caption"] == "here it is"
    assert live.telegram.file_data(message["document"]) == CSV.encode()
    # ... in the order the turn made them: the file first, then the reply that speaks of it.
    texts = [m for m in live.telegram.sent_messages(OWNER) if m.get("text") == reply]
    assert message["message_id"] < texts[-1]["message_id"]


async def test_an_image_goes_as_a_photo_and_a_refused_photo_as_a_document(
    live: LiveGateway, home: Home
) -> None:
    image = png()
    (home.workspace / "chart.png").write_bytes(image)
    await say(live, OWNER, call("send_file", path="chart.png", caption="**the chart**"))
    ((kind, photo),) = sent_files(live.telegram, OWNER)
    assert kind == "photo"
    assert live.telegram.file_data(photo["photo"]) == image
    # The caption in the chat's markup: Markdown rendered to Telegram's HTML.
    assert photo["caption"] == "the chart" and photo["caption_html"] == "<b>the chart</b>"

    live.telegram.fail_next(
        "sendphoto", error_code=400, description="Bad Request: PHOTO_INVALID_DIMENSIONS"
    )
    await say(live, OWNER, call("send_file", path="chart.png"))
    kinds = [kind for kind, _ in sent_files(live.telegram, OWNER)]
    assert kinds == ["photo", "document"]
    document = sent_files(live.telegram, OWNER)[-1][1]["document"]
    assert live.telegram.file_data(document) == image
    assert file_calls(live.telegram)[-2:] == ["sendphoto", "senddocument"]


async def test_a_file_that_only_looks_like_an_image_is_sent_as_a_document(
    live: LiveGateway, home: Home
) -> None:
    (home.workspace / "fake.jpg").write_bytes(b"not an image at all")
    await say(live, OWNER, call("send_file", path="fake.jpg"))
    # Telegram could not make a photo of it (IMAGE_PROCESS_FAILED): it arrives as a document.
    assert [kind for kind, _ in sent_files(live.telegram, OWNER)] == ["document"]


async def test_a_voice_note_goes_as_voice_and_a_song_as_audio(
    live: LiveGateway, home: Home
) -> None:
    voice, song = b"OggS\x00voice-bytes", b"ID3\x04song-bytes"
    (home.workspace / "reply.ogg").write_bytes(voice)
    (home.workspace / "song.mp3").write_bytes(song)
    await say(live, OWNER, call("send_file", path="reply.ogg"))
    await say(live, OWNER, call("send_file", path="song.mp3", caption="a song"))
    (kind, sent_voice), (kind2, sent_song) = sent_files(live.telegram, OWNER)
    assert (kind, kind2) == ("voice", "audio")
    assert live.telegram.file_data(sent_voice["voice"]) == voice
    assert live.telegram.file_data(sent_song["audio"]) == song
    assert sent_song["caption"] == "a song"


async def test_a_long_caption_is_cut_to_telegrams_limit(live: LiveGateway, home: Home) -> None:
    (home.workspace / "notes.txt").write_text("notes\n")
    await say(live, OWNER, call("send_file", path="notes.txt", caption="word " * 400))
    ((_, message),) = sent_files(live.telegram, OWNER)
    assert len(message["caption"]) == 1024 and message["caption"].endswith("…")


@pytest.mark.parametrize(
    ("path", "refusal"),
    [
        ("/etc/passwd", "is outside the workspace"),
        ("../config.toml", "uses '..'"),
        ("escape/config.toml", "leads outside the workspace"),
        ("missing.csv", "no file at"),
        ("memory", "is a folder"),
        ("empty.txt", "is empty"),
        ("twin.md", "is a hard link"),
    ],
)
async def test_what_the_chat_may_not_or_cannot_send_is_refused_and_nothing_is_sent(
    live: LiveGateway, home: Home, path: str, refusal: str
) -> None:
    (home.workspace / "escape").symlink_to(home.root)
    (home.workspace / "empty.txt").write_bytes(b"")
    os.link(home.workspace / "USER.md", home.workspace / "twin.md")
    reply = await say(live, OWNER, call("send_file", path=path))
    assert reply.startswith("tool said: Error:") and refusal in reply
    assert file_calls(live.telegram) == []


async def test_a_group_cannot_send_itself_the_owners_personal_memory(
    live: LiveGateway, home: Home
) -> None:
    (home.workspace / "USER.md").write_text("# User\n- The owner's door code is 4711.\n")
    for path in ("USER.md", "../../USER.md", "memory/MEMORY.md"):
        reply = await say(
            live, GROUP, BOT + call("send_file", path=path), chat_type="supergroup", user_id=MEMBER
        )
        assert "Error:" in reply
    # A link planted in the group's own folder leads nowhere either.
    room = room_folder(home.workspace, f"telegram:{GROUP}", True)
    assert room is not None
    (room / "user.md").symlink_to(home.workspace / "USER.md")
    reply = await say(
        live, GROUP, BOT + call("send_file", path="user.md"), chat_type="supergroup", user_id=MEMBER
    )
    assert "leads outside this group's folder" in reply
    assert file_calls(live.telegram) == []

    # The group's own file goes, to the group.
    (room / "minutes.md").write_text("# Minutes\n")
    await say(
        live,
        GROUP,
        BOT + call("send_file", path="minutes.md"),
        chat_type="supergroup",
        user_id=MEMBER,
    )
    ((kind, message),) = sent_files(live.telegram, GROUP)
    assert kind == "document" and live.telegram.file_data(message["document"]) == b"# Minutes\n"


async def test_an_upload_that_fails_for_a_moment_is_sent_again(
    live: LiveGateway, home: Home
) -> None:
    (home.workspace / "report.csv").write_text(CSV)
    live.telegram.fail_next("senddocument", error_code=500, description="Internal Server Error")
    reply = await say(live, OWNER, call("send_file", path="report.csv"))
    assert reply.startswith("tool said: sent report.csv")
    await until(lambda: sent_files(live.telegram, OWNER), 30)  # sent after a retry
    assert file_calls(live.telegram) == ["senddocument", "senddocument"]

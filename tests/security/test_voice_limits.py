"""voice.max_minutes cannot be talked around, through the real gateway: the Telegram channel
against the loopback Bot API, the transcription service the loopback OpenAI fake. A recording
whose length is forged (a final page appended, granules lowered), unknown and large, longer than
Telegram says, or empty is refused with one line before the service hears a byte of it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from nanomem.home import Home
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.telegram_gateway import LiveGateway, telegram_gateway
from tests.fakes.telegram_server import FakeTelegram
from tests.helpers.ogg import NOTE, PRE_SKIP, Page, ogg, packets, recording

OWNER = 1000
KEPT = "It is kept in the chat's media folder."
TOO_LONG = (
    f"That recording is longer than 0.1 minutes, the most I transcribe (voice.max_minutes). {KEPT}"
)
TEN_SECONDS = recording(10)  # over the 6 s these tests allow
ONE_SECOND = PRE_SKIP + 48000


@pytest.fixture
async def live(home: Home, servers: tuple[FakeTelegram, FakeOpenAI]) -> AsyncIterator[LiveGateway]:
    telegram, llm = servers
    voice: dict[str, Any] = {"max_minutes": 0.1}
    async with telegram_gateway(
        home, telegram, llm, telegram={"allow_from": [OWNER]}, voice=voice
    ) as gateway:
        yield gateway


async def refused(live: LiveGateway, data: bytes, duration: int = 1) -> str:
    """The answer to a voice note whose length Telegram gives as `duration`; the transcription
    service and the model never asked."""
    answer = await live.reply(
        OWNER, lambda: live.telegram.send_voice(OWNER, data, duration=duration)
    )
    assert live.llm.audio_requests == [] and live.llm.requests == []
    assert "/retry" not in answer
    return answer


def forged_end(sound: list[Page] = TEN_SECONDS, checksum: int | None = None, **page: Any) -> bytes:
    """The sound's pages and an appended final page claiming the whole lasts one second."""
    last = sound[-1]
    fields = {"packets": last.packets[:1], "granule": ONE_SECOND, "sequence": last.sequence + 1}
    return ogg(sound) + Page(**(fields | page), flags=0x04).bytes(checksum)


async def test_a_forged_final_page_does_not_shorten_ten_seconds(live: LiveGateway) -> None:
    last = TEN_SECONDS[-1].sequence
    for data in (
        forged_end(checksum=0x1234),  # a wrong checksum
        forged_end(sequence=last + 5),  # out of sequence
        forged_end(serial=0xBAD),  # of another stream
        forged_end(granule=0, packets=()),  # claiming nothing at all
        forged_end(granule=-1, packets=()),
    ):
        assert await refused(live, data) == TOO_LONG


async def test_a_recording_whose_pages_do_not_chain_is_refused(live: LiveGateway) -> None:
    # Within the limit as far as its good pages go: what comes after them cannot be trusted.
    answer = await refused(live, forged_end(recording(3)[:-1], checksum=0x1234))
    assert answer == (
        "That recording is not a whole Ogg file (a page whose checksum is wrong), so how long "
        f"it plays cannot be told and I do not transcribe it. {KEPT}"
    )
    answer = await refused(live, ogg(recording(3)) + b"OggS and then some")
    assert "not a whole Ogg file (bytes that are no Ogg page)" in answer


async def test_granules_lowered_with_good_checksums_do_not_hide_the_sound(
    live: LiveGateway,
) -> None:
    # Every page well formed, in sequence and checksummed, each claiming a second at most: the
    # packets themselves still hold ten seconds of sound, and the service would hear them all.
    lowered = [
        Page(p.packets, min(p.granule, ONE_SECOND), p.sequence, flags=p.flags) for p in TEN_SECONDS
    ]
    assert await refused(live, ogg(lowered)) == TOO_LONG


async def test_telegrams_duration_over_the_limit_is_refused(live: LiveGateway) -> None:
    assert await refused(live, NOTE, duration=3600) == TOO_LONG  # the file itself says 2 s
    assert await live.say(OWNER, "/retry") == TOO_LONG  # what Telegram said is kept for it
    assert live.llm.audio_requests == [] and live.llm.requests == []


async def test_a_large_recording_of_unknown_length_is_refused(live: LiveGateway) -> None:
    # No Ogg header: its length is unknown, and 3 MB is far more than 6 s at 128 kbit/s.
    mp3 = b"ID3\x04" + bytes(3 * 2**20)
    answer = await live.reply(
        OWNER, lambda: live.telegram.send_audio(OWNER, mp3, file_name="talk.mp3", duration=1)
    )
    assert answer == (
        "How long that recording plays cannot be read from it, and at 3.0 MB it may be longer "
        f"than 0.1 minutes, the most I transcribe (voice.max_minutes). {KEPT}"
    )
    assert live.llm.audio_requests == [] and live.llm.requests == []


async def test_an_empty_voice_note_is_refused_at_once(live: LiveGateway) -> None:
    empty = (
        "That recording is empty: there is no sound in it to transcribe. Please record it again."
    )
    assert await refused(live, b"") == empty
    head, tags = packets()[:2]  # only the headers: an Ogg/Opus file with no sound in it
    headers = ogg([Page((head,), 0, 0, flags=0x02), Page((tags,), 0, 1, flags=0x04)])
    assert await refused(live, headers) == empty


async def test_a_recording_within_the_limit_is_still_transcribed(live: LiveGateway) -> None:
    live.llm.transcript("hello")
    live.llm.reply("Hi.")
    answer = await live.reply(OWNER, lambda: live.telegram.send_voice(OWNER, ogg(recording(5))))
    assert answer == "Hi."
    (sent,) = live.llm.audio_requests
    assert sent.data == ogg(recording(5))

"""The voice feature's parts: the OGG/Opus fixture, reading a recording's length, the audio
client against the loopback OpenAI fake, voice off, and spoken replies (voice.reply = "to_voice")
at the loop's level, with the real bus standing in for a channel.

tests/fixtures/voice-note.oga was made once with PyAV (which bundles libopus) in a scratch venv,
not a project dependency: 2 s of a 140 Hz warble with harmonics, its loudness rising and falling
four times a second like syllables, mono, 48 kHz, `libopus` at 16 kbit/s, 960-sample frames,
written with `av.open(path, "w", format="ogg")` (4.4 kB)."""

from __future__ import annotations

import math
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from nanomem.agent import File, InboundMessage, OutboundMessage, Reach, Text, save_media
from nanomem.app import App
from nanomem.features.voice import AudioClient, AudioEndpoint, Voice, VoiceError
from nanomem.features.voice.audio import clock, is_own_voice, is_spoken
from nanomem.features.voice.client import upload_name
from nanomem.features.voice.endpoint import TURN_ON
from nanomem.features.voice.length import BrokenOgg, ogg_crc, ogg_opus_seconds, recording_seconds
from nanomem.home import Home
from nanomem.providers.scripted import ScriptedProvider, text
from nanomem.text.masking import redact
from tests.conftest import TEST_KEY, cli_env, make_app, run_cli_here
from tests.fakes.openai_server import FakeOpenAI
from tests.helpers.ogg import PRE_SKIP, Page, crc, ogg, packets, recording

NOTE = (Path(__file__).resolve().parent.parent / "fixtures" / "voice-note.oga").read_bytes()
CHAT = "telegram:42"


@pytest.fixture
def fake() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as server:
        yield server


def client(fake: FakeOpenAI, key: str = TEST_KEY) -> AudioClient:
    return AudioClient(AudioEndpoint(fake.base_url, key, "test"), timeout_s=10, backoff_s=0)


def test_the_fixture_is_a_real_ogg_opus_recording_of_two_seconds() -> None:
    assert NOTE.startswith(b"OggS") and b"OpusHead" in NOTE[:64] and len(NOTE) < 20_000
    seconds = ogg_opus_seconds(NOTE, stop_s=600)
    assert seconds is not None and 1.9 < seconds < 2.1
    assert ogg_opus_seconds(b"ID3\x03 an mp3", stop_s=600) is None
    tags = NOTE.index(b"OggS", 4)  # the OpusTags page: headers only, no sound
    assert ogg_opus_seconds(NOTE[: NOTE.index(b"OggS", tags + 4)], stop_s=600) == 0


def test_a_recording_made_of_the_fixture_is_as_long_as_its_packets() -> None:
    assert ogg_opus_seconds(ogg(recording(10)), stop_s=600) == pytest.approx(10, abs=0.05)
    # The walk stops soon after the limit: a file of tiny packets costs no more than that.
    assert 60 < ogg_opus_seconds(ogg(recording(300)), stop_s=60) < 62  # type: ignore[operator]


def test_pages_that_do_not_chain_are_a_broken_ogg() -> None:
    pages = recording(3)[:-1]  # no end-of-stream page yet
    last = pages[-1]
    after = last.sequence + 1

    def appended(page: Page, checksum: int | None = None) -> bytes:
        return ogg(pages) + page.bytes(checksum)

    cases = {
        "checksum is wrong": appended(Page(last.packets, last.granule, after), 0xBAD),
        "out of its stream's sequence": appended(Page(last.packets, last.granule, after + 1)),
        "sequence": appended(Page(last.packets, last.granule, after, serial=0xBAD)),
        "going back": appended(Page(last.packets, PRE_SKIP, after)),
        "flagged out of place": appended(Page(last.packets, last.granule, after, flags=0x01)),
        "after the stream's end": ogg(recording(3)) + Page((), -1, after + 1).bytes(),
        "cut short": ogg(pages)[:-10],
        "no Ogg page": ogg(pages) + b"ID3",
    }
    for reason, data in cases.items():
        with pytest.raises(BrokenOgg, match=reason):
            ogg_opus_seconds(data, stop_s=600)


def wav(seconds: float, *, rate: int = 16000, said: float | None = None, kind: int = 1) -> bytes:
    """A 16-bit mono WAV file of `seconds` of silence whose data chunk claims `said` seconds."""
    pcm = bytes(round(seconds * rate) * 2)
    size = round((seconds if said is None else said) * rate) * 2
    fmt = b"".join(
        n.to_bytes(w, "little")
        for n, w in ((kind, 2), (1, 2), (rate, 4), (rate * 2, 4), (2, 2), (16, 2))
    )
    chunks = b"fmt " + (16).to_bytes(4, "little") + fmt + b"data" + size.to_bytes(4, "little")
    return b"RIFF" + (4 + len(chunks) + len(pcm)).to_bytes(4, "little") + b"WAVE" + chunks + pcm


def test_a_wav_files_length_is_its_pcm_bytes_at_its_rate() -> None:
    assert recording_seconds(wav(3), stop_s=600) == 3
    assert recording_seconds(wav(3, said=1), stop_s=600) == 3  # the bytes are there to be heard
    assert recording_seconds(wav(0), stop_s=600) == 0
    assert recording_seconds(wav(3, kind=0x55), stop_s=600) is None  # mp3 in a WAV: unknown
    broken = bytearray(wav(3))
    broken[28:32] = (1000).to_bytes(4, "little")  # a byte rate that does not add up
    assert recording_seconds(bytes(broken), stop_s=600) is None


def test_a_file_of_tiny_packets_is_over_any_limit_it_outnumbers() -> None:
    head, tags = packets()[:2]
    tiny = (b"\x80",) * 255  # 2.5 ms frames: 400 a second, four times what a recorder makes
    pages = [Page((head,), 0, 0, flags=0x02), Page((tags,), 0, 1)]
    pages += [Page(tiny, PRE_SKIP + (n - 1) * 255 * 120, n) for n in range(2, 60)]
    assert ogg_opus_seconds(ogg(pages), stop_s=600) == pytest.approx(58 * 255 / 400)
    assert ogg_opus_seconds(ogg(pages), stop_s=60) == math.inf


def test_the_ogg_checksum_is_rfc_3533s() -> None:
    (page,) = recording(1, per_page=100)[2:]
    assert ogg_crc(page.bytes()) == crc(page.bytes()[:22] + bytes(4) + page.bytes()[26:])


def test_names_say_what_is_spoken_and_whose_voice_it_is() -> None:
    assert is_spoken("media/a.oga") and is_spoken("media/b.NOTE.mp4") and is_spoken("c.wav")
    assert not is_spoken("media/film.mp4") and not is_spoken("report.pdf")
    assert is_own_voice("a.oga") and is_own_voice("b.note.mp4") and is_own_voice("c.voice.wav")
    assert not is_own_voice("talk.mp3")
    # Forwarded (someone else's): still transcribed, not the person's own words.
    assert is_spoken("x.fwd.mp4") and is_spoken("y.ogg")
    assert not is_own_voice("x.fwd.mp4") and not is_own_voice("y.ogg")
    assert upload_name("media/x.oga") == ("audio.ogg", "audio/ogg")  # OpenAI refuses .oga
    assert upload_name("media/x.note.mp4") == ("audio.mp4", "video/mp4")
    assert [clock(12), clock(185.4), clock(3723)] == ["0:12", "3:05", "1:02:03"]


async def test_a_transient_failure_is_tried_again(fake: FakeOpenAI) -> None:
    fake.transcription_error(503, "overloaded")
    fake.transcript("second time lucky")
    assert await client(fake).transcribe("n.oga", NOTE, "whisper-1") == "second time lucky"
    assert [r.data for r in fake.audio_requests] == [NOTE, NOTE]


async def test_a_refused_key_is_named_but_never_shown(fake: FakeOpenAI) -> None:
    fake.transcription_error(401, f"Incorrect API key provided: {TEST_KEY}")
    with pytest.raises(VoiceError) as caught:
        await client(fake).transcribe("n.oga", NOTE, "whisper-1")
    assert (
        str(caught.value) == "the transcription service refused the key (HTTP 401; voice.api_key)"
    )
    assert len(fake.audio_requests) == 1  # not worth another attempt


async def test_an_error_message_from_the_server_never_carries_the_key(fake: FakeOpenAI) -> None:
    fake.transcription_error(400, f"bad request for key {TEST_KEY}")
    with pytest.raises(VoiceError) as caught:
        await client(fake).transcribe("n.oga", NOTE, "whisper-1")
    assert TEST_KEY not in str(caught.value) and "HTTP 400" in str(caught.value)


async def test_no_key_no_authorization_header(fake: FakeOpenAI) -> None:
    await client(fake, key="").transcribe("n.oga", NOTE, "whisper-1")
    assert fake.audio_requests[0].auth is None


async def test_an_unreachable_service_is_said_plainly() -> None:
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    endpoint = AudioEndpoint(f"http://127.0.0.1:{port}/v1", TEST_KEY, "test")
    with pytest.raises(VoiceError) as caught:
        await AudioClient(endpoint, timeout_s=5, backoff_s=0).transcribe("n.oga", NOTE, "w")
    assert str(caught.value) == "the transcription service could not be reached"


async def test_a_recording_over_the_upload_limit_is_not_sent(fake: FakeOpenAI) -> None:
    with pytest.raises(VoiceError, match="transcription takes up to 25 MB"):
        await client(fake).transcribe("n.oga", bytes(26 * 2**20), "whisper-1")
    assert fake.audio_requests == []


async def test_a_recording_over_the_upload_limit_is_refused_for_good(
    home: Home, fake: FakeOpenAI
) -> None:
    app = voice_app(home, fake)
    big = save_media(home.workspace, CHAT, "big.oga", NOTE + bytes(25 * 2**20), False)
    reply = await app.loop.handle(InboundMessage("telegram", "42", "", media=(big,)))
    assert reply is not None and reply.part == Text(
        "That recording is over 25 MB, more than transcription takes, so I cannot transcribe "
        "it. It is kept in the chat's media folder.",
        "error",
    )
    assert fake.audio_requests == []  # and no /retry is offered: it could never succeed


async def test_a_recording_the_service_finds_too_large_offers_no_retry(
    home: Home, fake: FakeOpenAI
) -> None:
    fake.transcription_error(413, "Maximum content size limit exceeded")
    app = voice_app(home, fake)
    note = save_media(home.workspace, CHAT, "note.oga", NOTE, False)
    reply = await app.loop.handle(InboundMessage("telegram", "42", "", media=(note,)))
    assert reply is not None and reply.part == Text(
        "I could not transcribe that recording: the transcription service found the recording "
        "too large (HTTP 413). It is kept in the chat's media folder.",
        "error",
    )
    assert len(fake.audio_requests) == 1  # asked once: a lasting refusal is not tried again


async def test_speech_is_asked_as_opus_with_the_text_cut_to_4096(fake: FakeOpenAI) -> None:
    audio = await client(fake).speak("word " * 2000, "tts-1", "alloy")
    assert audio == NOTE
    (asked,) = fake.audio_requests
    assert asked.path == "speech" and len(asked.fields["input"]) == 4096
    assert (asked.fields["response_format"], asked.fields["voice"]) == ("opus", "alloy")


def voice_app(home: Home, fake: FakeOpenAI, *replies: str, **voice: object) -> App:
    provider = ScriptedProvider([text(reply) for reply in replies])
    return make_app(home, provider, voice={"api_base": fake.base_url, **voice})


async def spoken(app: App) -> list[OutboundMessage]:
    """What reached the channel's outbox once the turn's background work is done."""
    await app.loop.close()
    box = app.bus.outbox("telegram")
    return [box.get_nowait() for _ in range(box.qsize())]


async def test_a_voice_note_is_answered_with_a_voice_note_after_the_text(
    home: Home, fake: FakeOpenAI
) -> None:
    app = voice_app(home, fake, "**Sure**, at six.", reply="to_voice")
    await app.feature(Voice).start(Reach(pushing=frozenset({"telegram"})))
    note = save_media(home.workspace, CHAT, "n.oga", NOTE, False)
    fake.transcript("remind me at six")
    msg = InboundMessage("telegram", "42", "[voice note]", media=(note,))
    reply = await app.loop.handle(msg)
    assert reply is not None and reply.part == Text("**Sure**, at six.")
    (sent,) = await spoken(app)
    assert isinstance(sent.part, File) and sent.part.path.endswith(".ogg")
    assert (sent.channel, sent.chat_id) == ("telegram", "42")
    assert (home.workspace / sent.part.path).read_bytes() == NOTE
    speech = fake.audio_requests[-1]
    assert speech.fields == {
        "model": "tts-1",
        "voice": "alloy",
        "input": "Sure, at six.",  # the words, not the Markdown
        "response_format": "opus",
    }


async def test_a_typed_message_gets_no_voice_and_a_failed_synthesis_costs_nothing(
    home: Home, fake: FakeOpenAI
) -> None:
    app = voice_app(home, fake, "Hello.", "Hi again.", reply="to_voice")
    await app.feature(Voice).start(Reach(pushing=frozenset({"telegram"})))
    await app.loop.handle(InboundMessage("telegram", "42", "hello"))
    note = save_media(home.workspace, CHAT, "n.oga", NOTE, False)
    fake.speech_error(400, "voice not found")
    reply = await app.loop.handle(InboundMessage("telegram", "42", "", media=(note,)))
    assert reply is not None and reply.part == Text("Hi again.")
    assert await spoken(app) == []
    assert [r.path for r in fake.audio_requests] == ["transcriptions", "speech"]


async def test_without_a_channel_that_takes_it_no_voice_is_made(
    home: Home, fake: FakeOpenAI
) -> None:
    app = voice_app(home, fake, "Hello.", reply="to_voice")  # not started: `nanomem chat`
    note = save_media(home.workspace, CHAT, "n.oga", NOTE, False)
    await app.loop.handle(InboundMessage("telegram", "42", "", media=(note,)))
    assert await spoken(app) == []
    assert [r.path for r in fake.audio_requests] == ["transcriptions"]


async def test_voice_off_answers_how_to_turn_it_on_without_a_model_call(home: Home) -> None:
    provider = ScriptedProvider()
    app = make_app(home, provider, llm={"model": "anthropic/claude-sonnet-4"})
    note = save_media(home.workspace, CHAT, "n.oga", NOTE, False)
    reply = await app.loop.handle(InboundMessage("telegram", "42", "", media=(note,)))
    assert reply is not None and reply.part == Text(TURN_ON, "error")
    assert provider.calls == []


def test_status_says_where_voice_goes_and_never_the_key(home: Home) -> None:
    env = cli_env(home) | {
        "NANOMEM_LLM__MODEL": "openai/fake",
        "NANOMEM_LLM__API_BASE": "http://127.0.0.1:9/v1",
        "NANOMEM_LLM__API_KEY": TEST_KEY,
    }
    shown = run_cli_here("status", env=env).stdout
    assert "whisper-1 at http://127.0.0.1:9/v1 (the model connection, llm.model)" in shown
    env |= {
        "NANOMEM_VOICE__API_BASE": "https://api.groq.com/openai/v1",
        "NANOMEM_VOICE__API_KEY": "gsk-secret-key-123456",
    }
    env |= {"NANOMEM_VOICE__REPLY": "to_voice"}
    shown = run_cli_here("status", env=env).stdout
    assert "at https://api.groq.com/openai/v1 (voice.api_base), spoken replies by tts-1" in shown
    assert "gsk-secret" not in shown and TEST_KEY not in shown
    env["NANOMEM_LLM__MODEL"] = "anthropic/claude-sonnet-4"
    del env["NANOMEM_VOICE__API_BASE"]
    assert "voice           off: set voice.api_base" in run_cli_here("status", env=env).stdout
    env["NANOMEM_VOICE__ENABLED"] = "false"
    assert "voice           off (voice.enabled)" in run_cli_here("status", env=env).stdout


def test_the_voice_key_is_masked_wherever_text_is_logged_or_stored(home: Home) -> None:
    key = "gsk-voice-secret-0123456789"
    make_app(home, ScriptedProvider(), voice={"api_key": key})
    assert key not in redact(f"the key is {key}")

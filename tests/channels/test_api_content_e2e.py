"""OpenAI content arrays through the real gateway process: images (data URLs and http URLs
behind the web tools' address guard) and audio reach the turn as the chat's media."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nanomem.home import Home
from tests.fakes.openai_server import FakeOpenAI, echo_step
from tests.fakes.telegram_server import FakeTelegram
from tests.fakes.web_server import FakeWeb
from tests.helpers.gateway import API_KEY, GatewayProcess, onboarded, post
from tests.helpers.loopback import loopback

# A real 1x1 PNG.
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)
DATA_URL = "data:image/png;base64," + base64.b64encode(PNG).decode()
WAV = b"RIFF\x24\x00\x00\x00WAVEfmt \x10\x00\x00\x00\x01\x00\x01\x00" + b"\x00" * 20
ALLOWED_HOST = "127.0.0.2"  # the one network tools.web.allow_networks opens


@pytest.fixture(scope="module")
def servers() -> Iterator[tuple[FakeTelegram, FakeOpenAI]]:
    with loopback(echo_step) as both:
        yield both


@pytest.fixture(scope="module")
def webs() -> Iterator[tuple[FakeWeb, FakeWeb]]:
    """One site on loopback (refused: a private address), one on the allowed network."""
    with FakeWeb() as private, FakeWeb(host=ALLOWED_HOST) as allowed:
        for site in (private, allowed):
            site.serve("/cat.png", PNG, "image/png")
            site.serve("/page.png", "<html>not an image</html>", "image/png")
            site.serve("/gone.png", "gone", "text/plain", status=404)
            site.serve("/big.png", PNG + b"\0" * 1_100_000, "image/png")  # api.max_body_mb: 1
            site.serve("/half.png", PNG + b"\0" * 600_000, "image/png")
            site.serve("/away.png", "", status=302, headers={"Location": "ftp://x.example/?key=k1"})
        yield private, allowed


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Home:
    return onboarded(tmp_path_factory, "api-content")


@pytest.fixture(scope="module")
def gateway(servers: tuple[FakeTelegram, FakeOpenAI], home: Home) -> Iterator[GatewayProcess]:
    with GatewayProcess(
        home,
        *servers,
        NANOMEM_API__ENABLED="true",
        NANOMEM_API__KEYS=json.dumps([API_KEY]),
        NANOMEM_API__MAX_BODY_MB="1",
        NANOMEM_LLM__SUPPORTS_IMAGES="true",
        NANOMEM_TOOLS__WEB__ALLOW_NETWORKS=json.dumps([f"{ALLOWED_HOST}/32"]),
    ) as process:
        process.wait_for_line(r"api: running")
        yield process


@pytest.fixture
def llm(servers: tuple[FakeTelegram, FakeOpenAI]) -> FakeOpenAI:
    return servers[1]


def ask(gateway: GatewayProcess, session: str, *parts: dict[str, Any]) -> tuple[int, Any]:
    messages = [{"role": "user", "content": list(parts)}]
    return post(gateway, json.dumps({"session_id": session, "messages": messages}).encode())


def image(url: str) -> dict[str, Any]:
    return {"type": "image_url", "image_url": {"url": url, "detail": "low"}}


def text(words: str) -> dict[str, Any]:
    return {"type": "text", "text": words}


def last_user(llm: FakeOpenAI) -> Any:
    return [m for m in llm.requests[-1]["messages"] if m["role"] == "user"][-1]["content"]


def image_urls(content: Any) -> list[str]:
    parts = content if isinstance(content, list) else []
    return [p["image_url"]["url"] for p in parts if p.get("type") == "image_url"]


def media_files(home: Home, session: str) -> list[Path]:
    folder = home.workspace / "media"
    return sorted(folder.rglob("*-api-*")) if folder.exists() else []


def test_a_data_url_image_reaches_the_vision_model(
    gateway: GatewayProcess, llm: FakeOpenAI
) -> None:
    status, reply = ask(gateway, "data", text("what is this"), image(DATA_URL))
    assert status == 200, reply
    content = last_user(llm)
    assert image_urls(content) == [DATA_URL]
    assert "what is this" in content[0]["text"]


def test_text_parts_are_joined_with_a_blank_line(gateway: GatewayProcess, llm: FakeOpenAI) -> None:
    status, reply = ask(gateway, "joined", text("first part"), text("second part"))
    assert status == 200, reply
    assert "first part\n\nsecond part" in str(last_user(llm))


def test_an_image_url_on_loopback_is_refused_by_the_guard(
    gateway: GatewayProcess, llm: FakeOpenAI, webs: tuple[FakeWeb, FakeWeb], home: Home
) -> None:
    private, _ = webs
    before, saved = len(llm.requests), media_files(home, "guarded")
    status, error = ask(gateway, "guarded", text("look"), image(private.url("/cat.png")))
    assert status == 400, error
    assert error["error"]["param"] == "messages[0].content[1]"
    assert "loopback address" in error["error"]["message"]
    assert not any(path == "/cat.png" for _, path, _, _ in private.requests)  # never connected
    assert len(llm.requests) == before and media_files(home, "guarded") == saved


def test_an_image_url_on_an_allowed_network_is_fetched(
    gateway: GatewayProcess, llm: FakeOpenAI, webs: tuple[FakeWeb, FakeWeb]
) -> None:
    _, allowed = webs
    status, reply = ask(gateway, "fetched", text("and this?"), image(allowed.url("/cat.png")))
    assert status == 200, reply
    assert image_urls(last_user(llm)) == [DATA_URL]  # fetched, saved, sent inline


def test_images_fetched_are_bounded_by_the_body_limit_together(
    gateway: GatewayProcess, llm: FakeOpenAI, webs: tuple[FakeWeb, FakeWeb]
) -> None:
    _, allowed = webs
    half = image(allowed.url("/half.png"))
    status, reply = ask(gateway, "bounded", text("one"), half)
    assert status == 200, reply
    before = len(llm.requests)
    status, error = ask(gateway, "bounded", text("two"), half, half)
    assert status == 400 and error["error"]["param"] == "messages[0].content[2]", error
    assert "together" in error["error"]["message"] and len(llm.requests) == before


@pytest.mark.parametrize(
    ("path", "words"),
    [
        ("/page.png", "not JPEG"),
        ("/gone.png", "HTTP 404"),
        ("/big.png", "larger than"),
        ("/away.png", "another kind of address"),  # a redirect's target, not repeated
    ],
)
def test_a_fetched_url_that_is_no_image_is_refused(
    gateway: GatewayProcess,
    llm: FakeOpenAI,
    webs: tuple[FakeWeb, FakeWeb],
    home: Home,
    path: str,
    words: str,
) -> None:
    _, allowed = webs
    before, saved = len(llm.requests), media_files(home, "no-image")
    # Every URL is fetched before any file is saved: the data URL before it is not kept.
    url = allowed.url(f"{path}?key=k0")
    status, error = ask(gateway, "no-image", image(DATA_URL), image(url))
    assert status == 400, error
    assert error["error"]["param"] == "messages[0].content[1]"
    assert words in error["error"]["message"]
    assert "key=" not in error["error"]["message"]  # no URL: its query may carry a key
    assert len(llm.requests) == before and media_files(home, "no-image") == saved


def test_input_audio_is_saved_and_reaches_the_model_as_the_persons_words(
    gateway: GatewayProcess, llm: FakeOpenAI, home: Home
) -> None:
    audio = {
        "type": "input_audio",
        "input_audio": {"data": base64.b64encode(WAV).decode(), "format": "wav"},
    }
    heard = len(llm.audio_requests)
    llm.transcript("remind me to water the plants at six")
    status, reply = ask(gateway, "audio", text("listen"), audio)
    assert status == 200, reply
    (wav,) = [p for p in media_files(home, "audio") if p.suffix == ".wav"]
    assert wav.read_bytes() == WAV and wav.name.endswith(".voice.wav")
    (sent,) = llm.audio_requests[heard:]  # transcribed as sent, through the model's server
    assert sent.path == "transcriptions" and sent.data == WAV
    words = str(last_user(llm))
    assert "[voice note] remind me to water the plants at six" in words
    assert "<<untrusted" not in words  # recorded by the person asking, not outside text


def test_a_malformed_part_is_a_400_naming_it(gateway: GatewayProcess, llm: FakeOpenAI) -> None:
    before = len(llm.requests)
    status, error = ask(gateway, "bad", text("hi"), {"type": "file", "file": {"file_id": "x"}})
    assert status == 400
    assert error["error"]["param"] == "messages[0].content[1]"
    assert "'file' part" in error["error"]["message"]
    assert error["error"]["type"] == "invalid_request_error"
    assert len(llm.requests) == before

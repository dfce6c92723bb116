"""The agent API's pieces in-process: request parsing, settings, the public-bind refusal."""

from __future__ import annotations

import base64
import json

import pytest

from channels.api.request import parse_request
from channels.api.wire import BadRequest, completion, usage
from nanomem.agent.outbound import Button
from nanomem.config import ConfigError, is_loopback
from nanomem.gateway.service import Gateway, enabled_channels
from nanomem.home import Home
from nanomem.log import redact
from nanomem.providers.scripted import ScriptedProvider
from tests.conftest import make_app, settings_for

PNG = base64.b64encode(b"\x89PNG\r\n\x1a\nfake").decode()


def body(**fields: object) -> bytes:
    return json.dumps({"messages": [{"role": "user", "content": "hi"}], **fields}).encode()


def test_only_the_last_user_message_is_the_new_turn() -> None:
    raw = json.dumps(
        {
            "messages": [
                {"role": "system", "content": "ignored"},
                {"role": "user", "content": "earlier, ignored"},
                {"role": "assistant", "content": "ignored too"},
                {"role": "user", "content": "the new turn"},
            ]
        }
    ).encode()
    parsed = parse_request(raw, 16, {})
    assert parsed.text == "the new turn" and parsed.session_id == "default"
    assert not parsed.stream and not parsed.include_usage


def test_the_session_comes_from_session_id_then_user() -> None:
    assert parse_request(body(session_id="s1", user="u1"), 16, {}).session_id == "s1"
    assert parse_request(body(user="ada@example.org"), 16, {}).session_id == "ada@example.org"
    streamed = parse_request(body(stream=True, stream_options={"include_usage": True}), 16, {})
    assert streamed.stream and streamed.include_usage


@pytest.mark.parametrize("bad", ["-100", "a/../b", "x" * 129, "a:b", " spaced", 7])
def test_unsafe_session_ids_are_refused(bad: object) -> None:
    """A leading '-' would make the session a group's shared room; ids end up in file names."""
    with pytest.raises(BadRequest, match="session_id") as refused:
        parse_request(body(session_id=bad), 16, {})
    assert refused.value.status == 400


@pytest.mark.parametrize(
    ("raw", "words"),
    [
        (b"{oops", "not valid JSON"),
        (b"[]", "JSON object"),
        (b'{"messages": []}', "non-empty list"),
        (b'{"messages": [{"role": "assistant", "content": "x"}]}', "is the assistant"),
        (b'{"messages": [{"role": "user", "content": ""}]}', "empty"),
        (b'{"messages": [{"role": "user", "content": [{"type": "audio"}]}]}', "'audio' part"),
    ],
)
def test_malformed_requests_are_400(raw: bytes, words: str) -> None:
    with pytest.raises(BadRequest, match=words):
        parse_request(raw, 16, {})


def last_parts(*parts: object) -> bytes:
    messages = [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "http://x/"}}]},
        {"role": "assistant", "content": "a cat"},  # the session holds that turn already
        {"role": "user", "content": list(parts)},
    ]
    return json.dumps({"messages": messages}).encode()


def test_a_content_array_gives_text_images_and_audio_in_order() -> None:
    wav = base64.b64encode(b"RIFF\x00\x00\x00\x00WAVEfmt ").decode()
    parsed = parse_request(
        last_parts(
            {"type": "text", "text": "what is this"},
            {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}},
            {"type": "text", "text": "and this"},
            {"type": "image_url", "image_url": {"url": "https://example.org/cat.png"}},
            {"type": "input_audio", "input_audio": {"data": wav, "format": "wav"}},
        ),
        16,
        {},
    )
    assert parsed.text == "what is this\n\nand this"
    png, remote, audio = parsed.uploads
    assert (png.suffix, png.data, png.url) == (".png", b"\x89PNG\r\n\x1a\nfake", "")
    assert remote.url == "https://example.org/cat.png" and not remote.data
    assert remote.where == "messages[3].content[3]"  # the earlier message's URL is not read
    assert audio.suffix == ".voice.wav" and audio.data.startswith(b"RIFF")


def test_the_image_type_is_read_from_its_bytes() -> None:
    jpeg = base64.b64encode(b"\xff\xd8\xff\xe0rest").decode()
    url = f"data:image/png;base64,{jpeg}"  # declared png, is a jpeg
    image = {"type": "image_url", "image_url": {"url": url}}
    (upload,) = parse_request(last_parts(image), 16, {}).uploads
    assert upload.suffix == ".jpg"


HTML = base64.b64encode(b"<html>not an image</html>").decode()


@pytest.mark.parametrize(
    ("part", "words"),
    [
        ({"type": "file", "file": {"file_id": "f"}}, "'file' part"),
        ({"type": "video"}, "'video' part"),
        ("just a string", "not a content part"),
        ({"text": "no type"}, "not a content part"),
        ({"type": "text", "text": 7}, "needs 'text'"),
        ({"type": "image_url"}, "needs image_url.url"),
        ({"type": "image_url", "image_url": {"url": "ftp://x/y.png"}}, "data URL"),
        ({"type": "image_url", "image_url": {"url": "data:image/png;base64,@@@"}}, "base64"),
        ({"type": "image_url", "image_url": {"url": f"data:text/html;base64,{HTML}"}}, "text/html"),
        ({"type": "image_url", "image_url": {"url": f"data:image/png;base64,{HTML}"}}, "not JPEG"),
        ({"type": "image_url", "image_url": {"url": f"data:image/bmp;base64,{PNG}"}}, "image/bmp"),
        ({"type": "input_audio", "input_audio": {"data": PNG}}, "format"),
        ({"type": "input_audio", "input_audio": {"data": PNG, "format": "flac"}}, "wav or mp3"),
        ({"type": "input_audio", "input_audio": {"data": "%%", "format": "mp3"}}, "base64"),
        ({"type": "input_audio", "input_audio": {"data": "", "format": "mp3"}}, "empty"),
    ],
)
def test_a_bad_part_is_a_400_naming_it(part: object, words: str) -> None:
    with pytest.raises(BadRequest, match=words) as refused:
        parse_request(last_parts({"type": "text", "text": "look"}, part), 16, {})
    assert refused.value.status == 400
    assert refused.value.param == "messages[3].content[1]"
    assert str(refused.value).startswith("messages[3].content[1]")


def test_the_api_counts_as_a_channel(home: Home) -> None:
    api = {"enabled": True, "keys": ["nm-unit-test-key-42"]}
    assert enabled_channels(settings_for(home, api=api)) == ["api"]
    gateway = Gateway.from_app(make_app(home, ScriptedProvider(), api=api))
    assert list(gateway.channels) == ["api", "cli"]  # cli: what terminal chats left for it


@pytest.mark.parametrize(
    "host", ["127.0.0.1", "::1", "localhost", "0.0.0.0", "::", "192.168.1.5", "example.org", ""]
)
def test_an_api_without_keys_is_refused_on_every_address(home: Home, host: str) -> None:
    app = make_app(home, ScriptedProvider(), api={"enabled": True}, gateway={"host": host})
    with pytest.raises(ConfigError, match=r"api\.keys is empty"):
        Gateway.from_app(app)


def test_an_api_with_keys_is_fine_on_any_address(home: Home) -> None:
    assert all(is_loopback(h) for h in ("127.0.0.1", "127.0.0.2", "::1", "localhost"))
    public_with_keys = make_app(
        home,
        ScriptedProvider(),
        api={"enabled": True, "keys": ["nm-unit-test-key-42"]},
        gateway={"host": "0.0.0.0"},
    )
    assert list(Gateway.from_app(public_with_keys).channels) == ["api", "cli"]
    assert redact("key nm-unit-test-key-42") == "key ***"  # registered as a secret
    telegram_only = make_app(
        home,
        ScriptedProvider(),
        telegram={"enabled": True, "token": "123:abcdefgh"},
        gateway={"host": "0.0.0.0"},
    )
    assert list(Gateway.from_app(telegram_only).channels) == ["telegram", "cli"]


def test_a_reply_s_buttons_are_in_the_completion_message() -> None:
    choices = (Button("Approve", "/dream-approve 3f2a9c1e"),)
    message = completion("c1", "Keep it?", usage(1, 2), choices)["choices"][0]["message"]
    assert message["buttons"] == [{"label": "Approve", "command": "/dream-approve 3f2a9c1e"}]
    assert "buttons" not in completion("c2", "plain", usage(1, 2))["choices"][0]["message"]

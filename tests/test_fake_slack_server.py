"""The loopback Slack speaks as Slack does to slack-sdk's own clients: the Web API through
AsyncWebClient(base_url=...), Socket Mode through the aiohttp SocketModeClient (hello,
envelopes, acks, disconnect and reconnect, re-delivery of what was not acked)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from slack_sdk.errors import SlackApiError
from slack_sdk.socket_mode.aiohttp import SocketModeClient
from slack_sdk.socket_mode.request import SocketModeRequest
from slack_sdk.socket_mode.response import SocketModeResponse
from slack_sdk.web.async_client import AsyncWebClient

from tests.fakes.slack_server import APP_TOKEN, BOT_TOKEN, BOT_USER, FakeSlack
from tests.helpers import until


@pytest.fixture
async def fake() -> AsyncIterator[FakeSlack]:
    server = await asyncio.to_thread(FakeSlack().start)
    server.add_user("U0001", "alice")
    server.add_conversation("D0001", "im", "U0001")
    yield server
    await asyncio.to_thread(server.stop)


async def test_the_web_api_answers_with_the_bot_token_only(fake: FakeSlack) -> None:
    client = AsyncWebClient(token=BOT_TOKEN, base_url=fake.base_url)
    assert (await client.auth_test())["user_id"] == BOT_USER
    posted = await client.chat_postMessage(channel="D0001", text="hi", thread_ts="1.000001")
    await client.chat_update(channel="D0001", ts=posted["ts"], text="hello")
    assert fake.messages_in("D0001")[0]["text"] == "hello"
    assert fake.messages_in("D0001")[0]["thread_ts"] == "1.000001"
    with pytest.raises(SlackApiError, match="invalid_auth"):
        await AsyncWebClient(token="xoxb-wrong", base_url=fake.base_url).auth_test()
    with pytest.raises(SlackApiError, match="channel_not_found"):
        await client.conversations_info(channel="C404")


async def test_a_rate_limit_is_429_with_retry_after_then_passes(fake: FakeSlack) -> None:
    client = AsyncWebClient(token=BOT_TOKEN, base_url=fake.base_url)
    fake.fail("chat.postMessage", "ratelimited", status=429, retry_after=7)
    with pytest.raises(SlackApiError) as refused:
        await client.chat_postMessage(channel="D0001", text="hi")
    assert refused.value.response.status_code == 429
    assert refused.value.response.headers["Retry-After"] == "7"
    await client.chat_postMessage(channel="D0001", text="hi")
    assert len(fake.messages_in("D0001")) == 1


async def test_a_file_goes_up_in_three_steps_and_down_with_the_token(fake: FakeSlack) -> None:
    client = AsyncWebClient(token=BOT_TOKEN, base_url=fake.base_url)
    await client.files_upload_v2(channel="D0001", filename="a.txt", content=b"abc", title="a")
    assert fake.uploads[0]["data"] == b"abc" and fake.uploads[0]["channel"] == "D0001"
    shared = fake.add_file("b.txt", b"xyz")
    import aiohttp

    async with aiohttp.ClientSession() as session:
        url = shared["url_private_download"]
        async with session.get(url, headers={"Authorization": f"Bearer {BOT_TOKEN}"}) as got:
            assert await got.read() == b"xyz"
        async with session.get(url) as refused:
            assert refused.content_type == "text/html"  # a sign-in page, as Slack answers


async def test_socket_mode_hello_envelopes_acks_and_a_redelivery(fake: FakeSlack) -> None:
    web = AsyncWebClient(token=BOT_TOKEN, base_url=fake.base_url)
    client = SocketModeClient(app_token=APP_TOKEN, web_client=web)
    seen: list[tuple[str, int | None]] = []
    acking = True

    async def listener(client: SocketModeClient, req: SocketModeRequest) -> None:
        seen.append((req.envelope_id, req.retry_attempt))
        if acking:
            await client.send_socket_mode_response(SocketModeResponse(req.envelope_id))

    client.socket_mode_request_listeners.append(listener)  # type: ignore[arg-type]
    await client.connect()
    try:
        await until(fake.connected, 10, "the connection")
        first = await asyncio.to_thread(fake.send_message, "D0001", "U0001", "hi")
        await until(lambda: first.acked_at, 10, "the ack")
        assert first.ack_s is not None and first.ack_s < 3
        acking = False
        second = await asyncio.to_thread(fake.command, "D0001", "U0001", "help")
        await until(lambda: len(seen) == 2, 10, "the command")
        assert second.acked_at is None
        acking = True
        await asyncio.to_thread(fake.redeliver, second)
        await until(lambda: second.acked_at, 10, "the re-delivery's ack")
        assert seen[-1] == (second.envelope_id, None)  # a command carries no retry_attempt
        opened = fake.connections_opened
        await asyncio.to_thread(fake.disconnect)
        await until(lambda: fake.connections_opened > opened, 20, "the reconnection")
    finally:
        await client.close()

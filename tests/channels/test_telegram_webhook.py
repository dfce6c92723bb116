"""Telegram by webhook: settings that cannot work are refused when the channel is made (before
any secret is), a secret made is kept, and Telegram's word that it cannot deliver shows in
/health until it delivers again (the real gateway and channel, in-process, with the fake Bot
API posting to the gateway's route)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from channels.telegram.channel import TelegramChannel
from nanomem.config import ConfigError, TelegramSettings
from nanomem.home import Home
from tests.conftest import log_lines
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.telegram_gateway import telegram_gateway
from tests.fakes.telegram_server import FakeTelegram
from tests.helpers import until

URL = "https://bot.example.org/telegram/hook"
OWNER = 1000


def channel(tmp_path: Path, **telegram: Any) -> TelegramChannel:
    settings = TelegramSettings(enabled=True, token="123:TOKEN", mode="webhook", **telegram)
    files = (tmp_path / "secret", tmp_path / "said.json")
    return TelegramChannel(settings, workspace=tmp_path, commands=[], webhook_files=files)


@pytest.mark.parametrize(
    ("url", "said"),
    [
        (None, "telegram.webhook_url is not set"),
        ("", "telegram.webhook_url is not set"),
        ("http://bot.example.org/hook", "must be an https:// address"),
        ("bot.example.org/hook", "must be an https:// address"),
        ("https://bot.example.org:99999/hook", "is not a URL"),
        ("https://bot.example.org", "is the gateway's own"),
        ("https://bot.example.org/health", "is the gateway's own"),
        ("https://bot.example.org/v1/chat/completions", "is the gateway's own"),
        ("https://bot.example.org/chat", "is the gateway's own"),  # the web app's pages
        ("https://bot.example.org/login/abc", "is the gateway's own"),
        ("https://bot.example.org/static/app.js", "is the gateway's own"),
        ("https://me:pw@bot.example.org/hook", "may not hold"),
    ],
)
def test_an_address_that_cannot_work_is_refused_before_a_secret_is_made(
    tmp_path: Path, url: str | None, said: str
) -> None:
    with pytest.raises(ConfigError, match=said):
        channel(tmp_path, webhook_url=url)
    assert not (tmp_path / "secret").exists()


@pytest.mark.parametrize("secret", ["has a space", "x" * 257, "ünïcode", "semi;colon"])
def test_a_secret_telegram_would_refuse_is_refused(tmp_path: Path, secret: str) -> None:
    with pytest.raises(ConfigError, match="1 to 256 letters, digits, _ or -"):
        channel(tmp_path, webhook_url=URL, webhook_secret=secret)


def test_a_made_secret_is_kept_for_the_next_start_and_never_logged(tmp_path: Path) -> None:
    with log_lines("DEBUG") as lines:
        channel(tmp_path, webhook_url=URL, webhook_secret="  ")  # blank: made
        made = (tmp_path / "secret").read_text()
        channel(tmp_path, webhook_url=URL)
    assert (tmp_path / "secret").read_text() == made and len(made.strip()) >= 32
    assert (tmp_path / "secret").stat().st_mode & 0o777 == 0o600
    assert not any(made.strip() in line for line in lines)


async def test_a_delivery_telegram_says_fails_shows_in_health_until_it_works(
    home: Home, servers: tuple[FakeTelegram, FakeOpenAI]
) -> None:
    telegram, _ = servers
    hooked = {"mode": "webhook", "webhook_url": URL, "webhook_secret": "s3cret-for-tests-123456"}
    async with telegram_gateway(home, *servers, telegram=hooked | {"owner": OWNER}) as live:
        telegram.forward_webhook_to("http://127.0.0.1:9")  # a reverse proxy passing it nowhere
        telegram.send_text(OWNER, "through a broken proxy")

        def problem() -> str:
            return str(live.gateway.health.snapshot()[1]["channels"]["telegram"]["detail"])

        await until(lambda: "cannot deliver" in problem(), what="the problem in /health")
        status, body = await live.health()
        assert status == 503 and "Connection failed" in body["channels"]["telegram"]["detail"]
        telegram.forward_webhook_to(f"http://127.0.0.1:{live.gateway.port}")  # proxy mended
        (reply,) = await telegram.wait_for_messages_async(OWNER, 1)
        assert reply["text"].endswith("through a broken proxy")
        await until(lambda: not problem(), what="/health well again at the next check")
        assert (await live.health())[0] == 200


async def test_an_album_posted_part_by_part_is_one_turn(
    home: Home, servers: tuple[FakeTelegram, FakeOpenAI]
) -> None:
    """Telegram posts each part of an album on its own: stored as polling stores them, then
    gathered into one message."""
    telegram, llm = servers
    hooked = {"mode": "webhook", "webhook_url": URL, "webhook_secret": "s3cret-for-tests-123456"}
    settings = hooked | {"owner": OWNER, "stream": False}
    async with telegram_gateway(home, *servers, telegram=settings) as live:
        telegram.forward_webhook_to(f"http://127.0.0.1:{live.gateway.port}")
        photos = [b"\xff\xd8\xff\xe0 one", b"\xff\xd8\xff\xe0 two"]
        reply = await live.reply(
            OWNER, lambda: telegram.send_album(OWNER, photos, caption="both by webhook")
        )
    assert reply.startswith("echo:") and "both by webhook" in reply
    assert len(llm.requests) == 1 and [p["status"] for p in telegram.posts()] == [200, 200]


async def test_a_webhook_set_by_another_program_while_polling_is_removed(
    home: Home, servers: tuple[FakeTelegram, FakeOpenAI]
) -> None:
    """Telegram refuses getUpdates (409) while a webhook is set: in polling mode the channel
    removes it, keeping what waits, and goes on polling."""
    import aiohttp

    telegram, _ = servers
    async with telegram_gateway(home, *servers, telegram={"owner": OWNER}) as live:
        with log_lines("WARNING") as lines:
            form = {"url": URL, "secret_token": "someone-elses"}
            async with aiohttp.ClientSession() as session:
                await session.post(f"{telegram.base_url}{telegram.token}/setWebhook", data=form)
            reply = await live.say(OWNER, "sent while a webhook was set")
        assert reply.endswith("sent while a webhook was set") and telegram.webhook() is None
    removed = [params for method, params in telegram.calls if method == "deletewebhook"]
    assert len(removed) == 1 and removed[0].get("drop_pending_updates") is not True
    assert sum("a webhook was set for this bot token" in line for line in lines) == 1


async def test_an_address_telegram_refuses_is_named_in_health_while_the_start_is_retried(
    home: Home, servers: tuple[FakeTelegram, FakeOpenAI]
) -> None:
    telegram, _ = servers
    port_refused = (
        "Bad Request: bad webhook: Webhook can be set up only on ports 80, 88, 443 or 8443"
    )
    telegram.fail_next("setWebhook", error_code=400, description=port_refused)
    hooked = {"mode": "webhook", "webhook_url": URL, "webhook_secret": "s3cret-for-tests-123456"}
    with log_lines("ERROR") as lines:
        async with telegram_gateway(home, *servers, telegram=hooked | {"owner": OWNER}) as live:
            report = live.gateway.health.channels["telegram"]
            assert report.restarts == 1  # down once, with the reason, then up at the retry
            assert telegram.webhook() is not None
    said = "telegram: the Bot API refused a call at start: Bad webhook: webhook can be set up"
    assert any(line.startswith(said) for line in lines)
    setting = [p for method, p in telegram.calls if method == "setwebhook"]
    assert len(setting) == 2

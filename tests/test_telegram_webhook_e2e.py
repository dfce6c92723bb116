"""`nanomem gateway` in webhook mode, in a subprocess: the fake Bot API posts each update to the
gateway's webhook route (with the path of telegram.webhook_url, as a reverse proxy in front of
the gateway passes it on) and posts it again until it is answered 200, as Telegram does."""

from __future__ import annotations

import re
import signal
from typing import Any

import pytest

from nanomem.home import Home
from tests.conftest import cli_env, run_cli
from tests.fakes.openai_server import FakeOpenAI, Step, echo_step
from tests.fakes.telegram_server import FakeTelegram
from tests.helpers import wait_until
from tests.helpers.gateway import GatewayProcess, load_session, onboarded, user_texts

URL = "https://bot.example.org/telegram/hook"
WEBHOOK = {"NANOMEM_TELEGRAM__MODE": "webhook", "NANOMEM_TELEGRAM__WEBHOOK_URL": URL}


@pytest.fixture
def model() -> Any:
    """Echoes, but the first HOLD is held until `llm.release()` (a kill lands while that turn
    runs); its replay is answered at once."""
    held: list[str] = []

    def scripted(request: dict[str, Any]) -> Step:
        said = user_texts(request)[-1]
        if "HOLD" in said:
            first = not held
            held.append(said)
            return Step.reply("the held answer", hold_after=0 if first else None)
        return echo_step(request)

    return scripted


def hooked(home: Home, telegram: FakeTelegram, llm: FakeOpenAI) -> GatewayProcess:
    """A gateway in webhook mode, and the fake's posts passed on to it."""
    gateway = GatewayProcess(home, telegram, llm, **WEBHOOK)
    telegram.forward_webhook_to(f"http://127.0.0.1:{gateway.port}")
    return gateway


def test_a_message_by_webhook_is_answered_and_a_restart_loses_nothing(
    servers: tuple[FakeTelegram, FakeOpenAI], tmp_path_factory: pytest.TempPathFactory
) -> None:
    telegram, llm = servers
    home = onboarded(tmp_path_factory, "webhook")
    with hooked(home, telegram, llm) as gateway:
        hook = telegram.webhook()
        kept = home.telegram_webhook_secret
        secret = kept.read_text().strip()
        assert hook is not None and hook["url"] == URL and hook["secret_token"] == secret
        assert hook["allowed_updates"] == ["message", "callback_query"]
        assert len(secret) >= 32 and kept.stat().st_mode & 0o777 == 0o600
        gateway.wait_for_line(r"telegram: webhook: Telegram posts to https://bot\.example\.org")
        telegram.send_text(1001, "hello by webhook")
        (reply,) = telegram.wait_for_messages(1001, 1)
        assert reply["text"].startswith("echo: ") and reply["text"].endswith("hello by webhook")
        wait_until(home.telegram_webhook.exists, what="Telegram's word, as the gateway asked")
        shown = (
            run_cli("status", env=gateway.env).stdout + run_cli("doctor", env=gateway.env).stdout
        )
        assert re.search(r"telegram +.*, webhook at https://bot\.example\.org/telegram/hook", shown)
        said = (
            r"telegram webhook +Telegram at \S+: posts to https://bot\.example\.org/telegram/hook"
        )
        assert re.search(said, shown) and secret not in shown
        assert "webhook https://bot.example.org/telegram/hook (0 waiting)" in shown  # doctor
    assert telegram.getupdates_count == 0 and [p["status"] for p in telegram.posts()] == [200]
    assert telegram.webhook() is not None  # kept: Telegram holds what comes while it is down
    telegram.send_text(1001, "while it was down")
    wait_until(lambda: telegram.posts()[-1]["status"] is None, what="a post nobody answered")
    with hooked(home, telegram, llm) as again:  # the same secret: Telegram's retries are taken
        (_, late) = telegram.wait_for_messages(1001, 2)
        assert late["text"].endswith("while it was down")
    logged = "".join(gateway.lines + again.lines) + (home.logs / "nanomem.log").read_text()
    assert secret not in logged


def test_an_update_posted_again_after_a_kill_is_answered_once(
    servers: tuple[FakeTelegram, FakeOpenAI], tmp_path_factory: pytest.TempPathFactory
) -> None:
    telegram, llm = servers
    home = onboarded(tmp_path_factory, "webhook-kill")
    gateway = hooked(home, telegram, llm)
    telegram.lose_answers(1)  # the gateway stored it and answered; the answer never arrives
    update_id = telegram.send_text(1002, "HOLD, then a kill")["update_id"]
    wait_until(
        lambda: any(p["update_id"] == update_id and p["lost"] for p in telegram.posts()),
        what="the post the gateway answered",
    )
    gateway.stop(signal.SIGKILL)
    llm.release()  # the killed run's answer, if it was asked, goes nowhere
    with hooked(home, telegram, llm) as again:
        wait_until(lambda: telegram.acknowledged(update_id), what="the post answered again")
        again.wait_for_line(rf"update {update_id} came again; it was stored already")
        # A chat's messages are answered in order: a second reply to the re-posted update
        # would come before this one's.
        telegram.send_text(1002, "after the re-post")
        wait_until(
            lambda: any(m["text"].endswith("after the re-post")
                        for m in telegram.sent_messages(1002)),
            what="the next message's reply",
        )  # fmt: skip
        shown = [m["text"] for m in telegram.sent_messages(1002)]
        assert shown[0] == "the held answer" and len(shown) == 2, shown
    said = [m for m in load_session(home, "telegram:1002").messages if m["role"] == "user"]
    assert sum("HOLD, then a kill" in str(m["content"]) for m in said) == 1


def webhook_env(home: Home, telegram: FakeTelegram, llm: FakeOpenAI, url: str) -> dict[str, str]:
    return cli_env(
        home,
        llm,
        NANOMEM_TELEGRAM__ENABLED="true",
        NANOMEM_TELEGRAM__TOKEN=telegram.token,
        NANOMEM_TELEGRAM__BASE_URL=telegram.base_url,
        NANOMEM_TELEGRAM__OWNER="1000",
        NANOMEM_TELEGRAM__MODE="webhook",
        NANOMEM_TELEGRAM__WEBHOOK_URL=url,
        NANOMEM_GATEWAY__PORT="0",
    )


def test_an_address_telegram_would_refuse_stops_the_gateway_at_start(
    servers: tuple[FakeTelegram, FakeOpenAI], home: Home
) -> None:
    telegram, llm = servers
    env = webhook_env(home, telegram, llm, "http://bot.example.org/telegram/hook")
    done = run_cli("gateway", env=env, timeout=60)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "telegram.webhook_url must be an https:// address" in done.stderr
    assert telegram.calls == [] and not home.telegram_webhook_secret.exists()
    doctor = run_cli("doctor", env=env).stdout
    assert re.search(r"✗ telegram +telegram\.webhook_url must be an https:// address", doctor)


def test_a_webhook_path_another_part_of_the_gateway_serves_stops_it_at_start(
    servers: tuple[FakeTelegram, FakeOpenAI], home: Home
) -> None:
    """Slack's Events API route (Slack in http mode): Telegram's updates would go to Slack's
    handler (or Slack's to Telegram's), so the gateway refuses to start, saying why."""
    from tests.fakes.slack_server import FakeSlack
    from tests.helpers.slack import slack_env

    telegram, llm = servers
    env = webhook_env(home, telegram, llm, "https://bot.example.org/slack/events")
    with FakeSlack() as slack:
        env |= slack_env(slack, NANOMEM_SLACK__MODE="http")
        done = run_cli("gateway", env=env, timeout=60)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert "give telegram.webhook_url a path nothing else of the gateway serves" in done.stderr
    assert telegram.calls == []  # no webhook set at Telegram


def test_doctor_says_when_telegram_posts_nowhere_yet(
    servers: tuple[FakeTelegram, FakeOpenAI], home: Home
) -> None:
    telegram, llm = servers
    doctor = run_cli("doctor", env=webhook_env(home, telegram, llm, URL)).stdout
    said = "! telegram +Telegram posts nowhere \\(no webhook set\\), not to https://bot\\.example"
    assert re.search(said, doctor) and "start `nanomem gateway`" in doctor
    assert [m for m, _ in telegram.calls] == ["getme", "getwebhookinfo"]  # it only asks


def test_polling_again_removes_the_webhook_and_keeps_what_waits(
    servers: tuple[FakeTelegram, FakeOpenAI], tmp_path_factory: pytest.TempPathFactory
) -> None:
    telegram, llm = servers
    home = onboarded(tmp_path_factory, "webhook-then-polling")
    with hooked(home, telegram, llm):
        pass
    telegram.send_text(1003, "sent before the switch")
    with GatewayProcess(home, telegram, llm) as gateway:  # telegram.mode is polling again
        (reply,) = telegram.wait_for_messages(1003, 1)
        assert reply["text"].endswith("sent before the switch")
        gateway.wait_for_line(r"removed the webhook https://bot\.example\.org/telegram/hook")
    assert telegram.webhook() is None
    removed = [params for method, params in telegram.calls if method == "deletewebhook"]
    assert removed and all(p.get("drop_pending_updates") is not True for p in removed)

"""The gateway in-process: supervision, /health, graceful and forced stops (scripted model)."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from nanomem.agent import Feature, HealthReport
from nanomem.agent.channel import Capabilities, DeliveryLater
from nanomem.agent.outbound import OutboundMessage
from nanomem.config import ConfigError
from nanomem.features.dream import Dreaming
from nanomem.gateway.service import Gateway, enabled_channels
from nanomem.home import Home
from nanomem.providers.scripted import ScriptedProvider, text
from tests.conftest import cli_env, log_lines, make_app, run_cli_here, settings_for
from tests.helpers import until
from tests.helpers.channels import FakeChannel
from tests.helpers.dream import LEARN, app_with_history

NEVER_S = 3600.0  # a model latency no test waits out: what ends such a turn is the point
WAIT_S = 60.0  # the safety net of every wait; far below NEVER_S


class Served:
    def __init__(self, gateway: Gateway, task: asyncio.Task[int]) -> None:
        self.gateway, self.task = gateway, task

    async def health(self) -> tuple[int, dict[str, Any]]:
        url = f"http://127.0.0.1:{self.gateway.port}/health"
        async with aiohttp.ClientSession() as session, session.get(url) as response:
            return response.status, await response.json()


@pytest.fixture
async def serve(home: Home) -> AsyncIterator[Callable[..., Awaitable[Served]]]:
    started: list[Served] = []

    async def start(
        *channels: FakeChannel,
        provider: ScriptedProvider | None = None,
        grace_s: float = 5,
        features: Sequence[Feature] = (),
    ) -> Served:
        app = make_app(
            home,
            provider or ScriptedProvider(),
            gateway={"port": 0, "grace_s": grace_s},
            dream={"enabled": False},
        )
        for feature in features:
            app.add(feature)
        gateway = Gateway(app, {channel.name: channel for channel in channels})
        served = Served(gateway, asyncio.create_task(gateway.run()))
        started.append(served)
        await until(lambda: gateway.port)
        return served

    yield start
    for served in started:  # a failed test must not leave a gateway running
        if not served.task.done():
            served.gateway.request_stop()
            served.gateway.request_stop()
            await asyncio.wait_for(served.task, 5)


class FlakyTelegram(FakeChannel):
    """Its first message with buttons cannot be delivered now (the network is down)."""

    def __init__(self) -> None:
        super().__init__("telegram", capabilities=Capabilities(buttons=True, reaches_owner=True))
        self.refusals = 1

    async def send(self, msg: OutboundMessage) -> None:
        if msg.buttons and self.refusals:
            self.refusals -= 1
            raise DeliveryLater("telegram: the network is down")
        await super().send(msg)


async def test_a_dream_change_is_told_to_the_owner_until_it_is_delivered(home: Home) -> None:
    # Marked as told once queued, a notice lost on the way left the change waiting unseen.
    sections: dict[str, Any] = {
        "dream": {"review": "ask", "enabled": False},
        "gateway": {"port": 0},
        "telegram": {"allow_from": [42]},
    }
    app = await app_with_history(home, ScriptedProvider(LEARN), **sections)
    assert (await app.feature(Dreaming).dream.run("cron")).pending is not None
    telegram = FlakyTelegram()
    gateway = Gateway(app, {"telegram": telegram})
    task = asyncio.create_task(gateway.run())
    try:
        told = await until(lambda: [m for m in telegram.sent if m.buttons], timeout=WAIT_S)
        assert told[0].chat_id == "42" and told[0].content.startswith("Dream prepared")
        assert telegram.refusals == 0
    finally:
        gateway.request_stop()
        await asyncio.wait_for(task, WAIT_S)


def test_only_enabled_channels_are_run_beside_the_terminals_delivery(home: Home) -> None:
    assert enabled_channels(settings_for(home)) == []
    assert enabled_channels(settings_for(home, telegram={"enabled": True})) == ["telegram"]
    # Nothing enabled: it still fires what terminal chats left for later (their reminders).
    gateway = Gateway.from_app(make_app(home, ScriptedProvider()))
    assert list(gateway.channels) == ["cli"]
    assert gateway.channels["cli"].capabilities.pushes


def test_enabled_telegram_without_a_token_exits_2(home: Home) -> None:
    env = cli_env(home, None, NANOMEM_LLM__MODEL="openai/fake", NANOMEM_TELEGRAM__ENABLED="1")
    result = run_cli_here("gateway", env=env)
    assert result.returncode == 2
    assert result.stderr.strip().startswith("nanomem: telegram.token is not set")


async def test_health_reports_channels_queues_and_uptime(
    serve: Callable[..., Awaitable[Served]],
) -> None:
    channel = FakeChannel("fake")
    served = await serve(channel)
    await until(lambda: channel.bus)
    status, body = await served.health()
    assert status == 200
    assert body["status"] == "ok" and body["last_dream"] is None
    assert body["channels"]["fake"]["state"] == "up" and body["channels"]["fake"]["restarts"] == 0
    assert body["queues"] == {"inbound": 0, "outbound": {"fake": 0}, "inbox": None, "parked": None}
    channel.trouble = "fake: polling stalled"
    status, body = await served.health()
    assert status == 503 and body["status"] == "degraded"
    assert (
        body["channels"]["fake"] | {"state": "down", "detail": "fake: polling stalled"}
        == body["channels"]["fake"]
    )
    served.gateway.request_stop()
    assert await served.task == 0


class Gauge(Feature):
    """A feature with a block of /health (and one that tries to take the gateway's own key)."""

    name = "gauge"

    def __init__(self) -> None:
        self.level, self.low, self.broken = 3, False, False

    def health(self) -> Mapping[str, HealthReport]:
        if self.broken:
            raise OSError("the gauge's file is gone")
        return {
            "tank": HealthReport({"level": self.level}, warning=self.low),
            "queues": HealthReport("not the gauge's to say"),
        }


async def test_health_shows_every_feature_s_block(
    serve: Callable[..., Awaitable[Served]],
) -> None:
    gauge = Gauge()
    with log_lines("ERROR") as logged:
        served = await serve(FakeChannel("fake"), features=[gauge])
        status, body = await served.health()
    assert status == 200 and body["status"] == "ok"
    assert list(body) == [
        "status",
        "uptime_s",
        "started_at",
        "channels",
        "last_dream",  # the features' blocks, by key, between the channels and the queues
        "schedules",
        "tank",
        "tasks",
        "queues",
    ]
    assert body["tank"] == {"level": 3}
    assert body["last_dream"] is None and body["schedules"] is None  # no run; no inbox here
    assert body["queues"]["inbound"] == 0  # the gateway's own: no feature's block takes it
    assert "health: a feature's block may not be called 'queues'" in logged
    gauge.level, gauge.low = 1, True  # only a person can mend it: a warning, still 200
    status, body = await served.health()
    assert (status, body["status"], body["tank"]) == (200, "warning", {"level": 1})
    gauge.broken = True
    with log_lines("ERROR") as logged:
        status, body = await served.health()
    assert (status, body["status"], body["gauge"]) == (200, "warning", {"error": "see the log"})
    assert "tank" not in body  # shown under the feature's name instead
    assert [line.split("\n")[0] for line in logged] == ["gauge could not report its health"]
    assert "the gauge's file is gone" not in str(body)  # the reason is for the log only


async def test_a_channel_that_cannot_start_is_retried_while_others_work(
    serve: Callable[..., Awaitable[Served]],
) -> None:
    broken, working = FakeChannel("broken", fail_starts=2), FakeChannel("working")
    with log_lines() as logged:
        served = await serve(broken, working)
        await until(lambda: working.bus)
        await until(lambda: "broken: the network is down (retrying in 1 s)" in logged)
    status, body = await served.health()
    assert status == 503
    assert body["channels"]["broken"]["state"] == "down"
    assert body["channels"]["broken"]["detail"] == "broken: the network is down"
    await working.say("hello")
    reply = await until(lambda: working.sent)
    assert reply[0].content.endswith("\n\nhello")
    await until(lambda: broken.bus)  # third start, after 1 s and 2 s
    status, body = await served.health()
    assert status == 200 and body["channels"]["broken"]["restarts"] == 1
    served.gateway.request_stop()
    assert await served.task == 0


async def test_a_graceful_stop_finishes_running_turns_and_delivers_them(
    serve: Callable[..., Awaitable[Served]],
) -> None:
    channel = FakeChannel("fake")
    provider = ScriptedProvider([text("done in time")], latency=0.5)
    served = await serve(channel, provider=provider)
    await until(lambda: channel.bus)
    await channel.say("take your time")
    await until(lambda: provider.calls)
    served.gateway.request_stop()
    assert await asyncio.wait_for(served.task, WAIT_S) == 0
    assert [m.content for m in channel.sent] == ["done in time"]
    assert channel.events == ["start", "stop_receiving", "stop"]


async def test_the_grace_period_bounds_the_wait_and_sessions_stay_whole(
    serve: Callable[..., Awaitable[Served]], home: Home
) -> None:
    channel = FakeChannel("fake")
    provider = ScriptedProvider(latency=NEVER_S)
    served = await serve(channel, provider=provider, grace_s=0.5)
    await until(lambda: channel.bus)
    await channel.say("a very slow question", chat="9")
    await until(lambda: provider.calls)
    served.gateway.request_stop()
    # The turn would take an hour: a stop within WAIT_S means the grace period ended it.
    assert await asyncio.wait_for(served.task, WAIT_S) == 0
    session = await served.gateway.app.sessions.get("fake:9")
    assert session.messages[0]["content"].endswith("a very slow question")


async def test_a_second_stop_request_cancels_at_once(
    serve: Callable[..., Awaitable[Served]],
) -> None:
    channel = FakeChannel("fake")
    provider = ScriptedProvider(latency=NEVER_S)
    served = await serve(channel, provider=provider, grace_s=NEVER_S)
    await until(lambda: channel.bus)
    await channel.say("slow")
    await until(lambda: provider.calls)
    served.gateway.request_stop()
    await until(lambda: "stop_receiving" in channel.events)  # the first stop is under way
    served.gateway.request_stop()
    # Neither the turn nor the grace period would end within WAIT_S: the second request did,
    # and says so as a second signal does (130, docs/commands.md).
    assert await asyncio.wait_for(served.task, WAIT_S) == 130


async def test_a_busy_port_is_a_configuration_error(home: Home) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        app = make_app(home, ScriptedProvider(), gateway={"port": port})
        with pytest.raises(ConfigError, match=f"cannot listen on 127.0.0.1:{port}") as raised:
            await Gateway(app, {"fake": FakeChannel("fake")}).run()
    # Not a gateway of this home (that one would have been refused by its lock): moving this
    # one to another port is the fix, not a step towards two gateways polling one bot.
    assert "another program, or a gateway of another home" in str(raised.value)


def test_home_is_onboarded_by_the_gateway_itself(tmp_path: Path) -> None:
    fresh = Home(tmp_path / "fresh")
    # Telegram without a token: it stops after onboarding (2), where it would otherwise serve.
    env = cli_env(fresh, None, NANOMEM_LLM__MODEL="openai/fake", NANOMEM_TELEGRAM__ENABLED="1")
    assert run_cli_here("gateway", env=env).returncode == 2
    assert fresh.config.exists() and (fresh.workspace / "SOUL.md").exists()

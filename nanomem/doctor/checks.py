"""Every check, in the order they are printed: those that wait on the network or on a child
run at once, each within its own bound and all within TOTAL_S."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable
from pathlib import Path

from nanomem.config import Settings
from nanomem.doctor import discord, local, matrix, services, slack
from nanomem.doctor.finding import Finding, within
from nanomem.doctor.model import TIMEOUT_S, model
from nanomem.home import Home

TOTAL_S = 60.0  # the whole doctor, whatever hangs
SANDBOX_S = 15.0


def offline(home: Home, config: Path) -> list[Finding]:
    """What needs no settings: a broken config must not hide these."""
    return [local.versions(), local.permissions(home, config), local.disk(home)]


async def online(home: Home, settings: Settings) -> list[Finding]:
    """The checks that use the settings: the model, the channels, the sandbox, MCP servers
    and a running gateway, concurrently."""
    from nanomem.gateway.claim import running

    checks: list[tuple[str, float, Callable[[], Awaitable[Finding]]]] = [
        ("model", TIMEOUT_S + 5, lambda: model(settings.llm)),
    ]
    if settings.telegram.enabled:
        timeout = services.HTTP_TIMEOUT_S + 5
        checks.append(("telegram", timeout, lambda: services.telegram(settings.telegram)))
    if settings.matrix.enabled:
        checks.append(
            ("matrix", services.HTTP_TIMEOUT_S + 5, lambda: matrix.matrix(settings.matrix))
        )
    if settings.slack.enabled:
        checks.append(("slack", slack.TIMEOUT_S + 5, lambda: slack.slack(settings.slack)))
    if settings.discord.enabled:
        checks.append(
            ("discord", services.HTTP_TIMEOUT_S + 5, lambda: discord.discord(settings.discord))
        )
    if settings.tools.shell_enabled:
        checks.append(("sandbox", SANDBOX_S, lambda: _sandbox(settings)))
    for name, server in settings.mcp.servers.items():
        if server.enabled:
            start = functools.partial(services.mcp_server, name, server, settings)
            checks.append((f"mcp {name}", server.timeout_s + 5, start))
    found = await asyncio.to_thread(running, home)
    host, cert = settings.gateway.host, settings.gateway.tls_cert
    probe = functools.partial(services.gateway, found, host, cert)
    checks.append(("gateway", services.HTTP_TIMEOUT_S + 5, probe))
    runs = [within(name, min(seconds, TOTAL_S), check) for name, seconds, check in checks]
    findings = list(await asyncio.gather(*runs))
    if settings.web.enabled:
        findings.insert(1, services.web_app(settings))
    if settings.api.enabled:
        findings.insert(1, services.api(settings))
    return findings


async def _sandbox(settings: Settings) -> Finding:
    # The first probe runs bwrap (blocking): in a thread, beside the network checks.
    found = await asyncio.to_thread(local.sandbox, settings)
    assert found is not None  # only asked for with the shell on
    return found

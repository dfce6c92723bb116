"""`nanomem doctor`'s check of the Discord bot: its token, asked "who am I" (`GET /users/@me`)."""

from __future__ import annotations

import json
from typing import Any

from nanomem.channel_settings import DiscordSettings
from nanomem.doctor.finding import Finding
from nanomem.text.masking import masked, secret_of, shown_url

HTTP_TIMEOUT_S = 10.0
MAX_ANSWER = 64 * 1024  # a user object is small: a longer answer is not one
SET_TOKEN = "nanomem config set discord.token <the token from the Developer Portal → Bot>"


async def discord(settings: DiscordSettings) -> Finding:
    from nanomem.providers import ConnectionFailed

    token = secret_of(settings.token)
    if not token:
        return Finding.fail("discord", "discord.enabled, but no token is set", SET_TOKEN)
    url = f"{settings.api_base.rstrip('/')}/users/@me"
    shown = f"{shown_url(url)} (token {masked(token)})"
    try:
        status, body = await _who_am_i(url, token)
    except TimeoutError:
        fix = "check the network"
        return Finding.fail("discord", f"no answer from {shown} within {HTTP_TIMEOUT_S:g} s", fix)
    except ConnectionFailed as exc:
        fix = "check the network, or discord.api_base"
        return Finding.fail("discord", f"could not reach {shown} ({exc})", fix)
    if status == 401:
        return Finding.fail("discord", f"{shown}: Discord refused the token (401)", SET_TOKEN)
    name = body.get("username") if isinstance(body, dict) and body.get("bot") else None
    if status != 200 or not isinstance(name, str):
        fix = "check discord.api_base"
        return Finding.fail("discord", f"{shown} answered {status}, not a bot", fix)
    if settings.owner is None:
        fix = "nanomem config set discord.owner <your numeric user id>"
        return Finding.warn("discord", f"bot {name}; no owner set", fix)
    where = shown_url(settings.api_base)
    return Finding.ok("discord", f"bot {name} ({where}), owner {settings.owner}")


async def _who_am_i(url: str, token: str) -> tuple[int, Any]:
    """(status, the JSON body or None), through the lean client's connection (its proxy and
    TLS decisions), the body read to MAX_ANSWER at most."""
    from nanomem.providers import Connection

    headers = {b"Authorization": f"Bot {token}".encode()}
    connection = Connection(url, timeout_s=HTTP_TIMEOUT_S, connections=1)
    try:
        async with connection.get(headers) as answer:
            status, body = answer.status, await answer.excerpt(MAX_ANSWER)
    finally:
        await connection.close()
    try:
        return status, json.loads(body)
    except ValueError:
        return status, None

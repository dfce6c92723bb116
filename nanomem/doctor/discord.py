"""`nanomem doctor`'s check of the Discord bot: its token, asked "who am I" (`GET /users/@me`)."""

from __future__ import annotations

from nanomem.channel_settings import DiscordSettings
from nanomem.doctor.finding import Finding
from nanomem.doctor.services import HTTP_TIMEOUT_S, get_json
from nanomem.text.masking import masked, secret_of, shown_url

SET_TOKEN = "nanomem config set discord.token <the token from the Developer Portal → Bot>"


async def discord(settings: DiscordSettings) -> Finding:
    from nanomem.providers import ConnectionFailed

    token = secret_of(settings.token)
    if not token:
        return Finding.fail("discord", "discord.enabled, but no token is set", SET_TOKEN)
    url = f"{settings.api_base.rstrip('/')}/users/@me"
    shown = f"{shown_url(url)} (token {masked(token)})"
    try:
        status, body = await get_json(url, headers={b"Authorization": f"Bot {token}".encode()})
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

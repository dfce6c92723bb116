"""`nanomem doctor`'s check of the Discord bot: its token, asked "who am I" (`GET /users/@me`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nanomem.channel_settings import DiscordSettings
from nanomem.doctor.finding import Finding
from nanomem.text.masking import masked, secret_of, shown_url

HTTP_TIMEOUT_S = 10.0
MAX_ANSWER = 64 * 1024  # a user object is small: a longer answer is not one
if TYPE_CHECKING:
    import httpx

SET_TOKEN = "nanomem config set discord.token <the token from the Developer Portal → Bot>"


async def discord(settings: DiscordSettings) -> Finding:
    import httpx

    token = secret_of(settings.token)
    if not token:
        return Finding.fail("discord", "discord.enabled, but no token is set", SET_TOKEN)
    url = f"{settings.api_base.rstrip('/')}/users/@me"
    shown = f"{shown_url(url)} (token {masked(token)})"
    headers = {"Authorization": f"Bot {token}", "User-Agent": "DiscordBot (nanomem, 1)"}
    try:
        async with (
            httpx.AsyncClient(timeout=HTTP_TIMEOUT_S) as client,
            client.stream("GET", url, headers=headers) as answer,
        ):
            status, body = answer.status_code, await _read(answer)
    except httpx.TimeoutException:
        return Finding.fail(
            "discord", f"no answer from {shown} within {HTTP_TIMEOUT_S:g} s", "check the network"
        )
    except (httpx.HTTPError, OSError) as exc:
        fix = "check the network, or discord.api_base"
        return Finding.fail("discord", f"could not reach {shown} ({type(exc).__name__})", fix)
    if status == 401:
        return Finding.fail("discord", f"{shown}: Discord refused the token (401)", SET_TOKEN)
    name = body.get("username") if isinstance(body, dict) and body.get("bot") else None
    if status != 200 or not isinstance(name, str):
        return Finding.fail(
            "discord", f"{shown} answered {status}, not a bot", "check discord.api_base"
        )
    if settings.owner is None:
        fix = "nanomem config set discord.owner <your numeric user id>"
        return Finding.warn("discord", f"bot {name}; no owner set", fix)
    return Finding.ok(
        "discord", f"bot {name} ({shown_url(settings.api_base)}), owner {settings.owner}"
    )


async def _read(answer: httpx.Response) -> Any:
    """The JSON body, read to MAX_ANSWER at most; None when it is not JSON."""
    from nanomem.text import untrusted_json

    data = b""
    async for chunk in answer.aiter_bytes():
        data += chunk
        if len(data) > MAX_ANSWER:
            return None
    try:
        return untrusted_json.loads(data.decode("utf-8", "replace"))
    except ValueError:
        return None

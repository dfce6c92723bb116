"""The Slack channel's check: `auth.test` with the bot token (who the app is, and that Slack
takes the token), and that the tokens its mode needs are set."""

from __future__ import annotations

import json

from nanomem.config import SlackSettings
from nanomem.doctor.finding import Finding
from nanomem.text.masking import masked, secret_of, shown_url

TIMEOUT_S = 10.0
MAX_ANSWER = 64 * 1024  # auth.test's answer is small: a longer one is not its
SET_TOKEN = "nanomem config set slack.bot_token xoxb-… (the app's Bot User OAuth Token)"


async def slack(settings: SlackSettings) -> Finding:
    from nanomem.providers import Connection, ConnectionFailed

    token = secret_of(settings.bot_token)
    if not token:
        return Finding.fail("slack", "slack.enabled, but no bot_token is set", SET_TOKEN)
    if settings.mode == "socket" and not secret_of(settings.app_token):
        fix = "nanomem config set slack.app_token xapp-… (Basic Information → App-Level Tokens)"
        return Finding.fail("slack", "Socket Mode needs slack.app_token", fix)
    if settings.mode == "http" and not secret_of(settings.signing_secret):
        fix = "nanomem config set slack.signing_secret … (Basic Information → Signing Secret)"
        return Finding.fail("slack", "the Events API needs slack.signing_secret", fix)
    base = settings.api_base if settings.api_base.endswith("/") else settings.api_base + "/"
    url = f"{base}auth.test"
    connection = Connection(url, timeout_s=TIMEOUT_S, connections=1)
    headers = {b"Authorization": f"Bearer {token}".encode(), b"Content-Type": b"application/json"}
    try:
        async with connection.post(b"{}", headers) as answer:
            status, body = answer.status, await answer.excerpt(MAX_ANSWER)
    except TimeoutError:
        return Finding.fail("slack", f"no answer from {shown_url(url)} within {TIMEOUT_S:g} s",
                            "check the network, or slack.api_base")  # fmt: skip
    except ConnectionFailed as exc:
        return Finding.fail(
            "slack", f"could not reach {shown_url(url)} ({exc})", "check the network"
        )
    finally:
        await connection.close()
    try:
        said = json.loads(body)
    except ValueError:
        said = None
    if not isinstance(said, dict) or status != 200:
        return Finding.fail(
            "slack", f"{shown_url(url)} answered {status}, not Slack", "check slack.api_base"
        )
    if said.get("ok") is not True:
        error = str(said.get("error", "?"))[:80]
        return Finding.fail(
            "slack", f"Slack refused the bot token {masked(token)} ({error})", SET_TOKEN
        )
    who = f"{said.get('user', '?')} ({said.get('user_id', '?')}) in {said.get('team', '?')}"
    if settings.owner is None:
        fix = "nanomem config set slack.owner U… (your member id: profile → ⋮ → Copy member ID)"
        return Finding.warn("slack", f"app {who}, {settings.mode} mode; no owner set", fix)
    return Finding.ok("slack", f"app {who}, {settings.mode} mode, owner {settings.owner}")

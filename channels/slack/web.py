"""Slack's Web API, as the channel uses it: slack-sdk's AsyncWebClient at `slack.api_base`,
its failures read into one `SendError` (for good, or for now: how long Slack asked us to wait),
and a shared file fetched with the bot token within a size limit."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
from slack_sdk.errors import SlackApiError, SlackClientError
from slack_sdk.web.async_client import AsyncWebClient

CALL_S = 30.0  # the longest one Web API call may take
# Slack's answers that no retry will change: the conversation or message is gone, or the app
# may not post there. Anything else (a 5xx, a network fault) may pass.
FOR_GOOD = frozenset(
    "channel_not_found not_in_channel is_archived msg_too_long no_text invalid_blocks "  # noqa: SIM905
    "message_not_found cant_update_message restricted_action user_not_found "
    "invalid_auth account_inactive token_revoked missing_scope not_authed".split()
)


class SendError(Exception):
    """A Web API call failed: `transient` when it may pass, `retry_in_s` when Slack said when
    (HTTP 429's Retry-After)."""

    def __init__(self, message: str, *, transient: bool, retry_in_s: float | None = None) -> None:
        super().__init__(message)
        self.transient, self.retry_in_s = transient, retry_in_s


def web_client(token: str, api_base: str) -> AsyncWebClient:
    base = api_base if api_base.endswith("/") else api_base + "/"
    return AsyncWebClient(token=token, base_url=base, timeout=int(CALL_S))


def keep_connections(client: AsyncWebClient) -> None:
    """One pool of connections for every call, made in the running loop: without one,
    slack-sdk opens a session, and a new TCP (and TLS) connection, for each call and closes
    it after."""
    client.session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=CALL_S))


async def drop_connections(client: AsyncWebClient) -> None:
    session, client.session = client.session, None
    if session is not None:
        await session.close()


async def call(client: AsyncWebClient, method: str, **params: Any) -> dict[str, Any]:
    """One Web API method; its answer, or SendError."""
    try:
        response = await asyncio.wait_for(client.api_call(method, json=params), CALL_S)
    except SlackApiError as exc:
        raise _read(method, exc) from None
    except (SlackClientError, aiohttp.ClientError, TimeoutError, OSError) as exc:
        raise SendError(f"{method}: {type(exc).__name__}", transient=True) from None
    return dict(response.data) if isinstance(response.data, dict) else {}


def _read(method: str, exc: SlackApiError) -> SendError:
    response = exc.response
    error = str(response.get("error", "")) if isinstance(response.data, dict) else ""
    if response.status_code == 429:
        wait = _seconds(response.headers.get("Retry-After") or response.headers.get("retry-after"))
        return SendError(f"{method}: rate limited", transient=True, retry_in_s=wait)
    transient = response.status_code >= 500 or error not in FOR_GOOD
    return SendError(f"{method}: {error or response.status_code}", transient=transient)


def _seconds(value: Any) -> float:
    try:
        return min(max(float(value), 1.0), 300.0)
    except (TypeError, ValueError):
        return 1.0


async def upload(
    client: AsyncWebClient, channel: str, thread: str | None, name: str, data: bytes, caption: str
) -> None:
    """Slack's external upload: a URL for the bytes, the bytes, then the share."""
    try:
        sharing = client.files_upload_v2(
            channel=channel,
            thread_ts=thread,
            filename=name,
            content=data,
            title=name,
            initial_comment=caption or None,
        )
        await asyncio.wait_for(sharing, CALL_S * 2)
    except SlackApiError as exc:
        raise _read("files.upload", exc) from None
    except (SlackClientError, aiohttp.ClientError, TimeoutError, OSError) as exc:
        raise SendError(f"files.upload: {type(exc).__name__}", transient=True) from None


async def download(token: str, url: str, limit: int) -> bytes:
    """A file someone shared, fetched with the bot token; at most `limit` bytes (ValueError
    beyond). Slack answers a sign-in page, not the file, to a request without the token."""
    headers = {"Authorization": f"Bearer {token}"}
    timeout = aiohttp.ClientTimeout(total=CALL_S * 4)
    async with (
        aiohttp.ClientSession(timeout=timeout) as session,
        session.get(url, headers=headers, allow_redirects=False) as response,
    ):
        if response.status != 200 or response.content_type == "text/html":
            raise OSError(f"the file could not be fetched (HTTP {response.status})")
        data = bytearray()
        async for chunk in response.content.iter_chunked(65536):
            data += chunk
            if len(data) > limit:
                raise ValueError("larger than allowed")
        return bytes(data)

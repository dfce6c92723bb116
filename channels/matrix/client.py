"""The homeserver, reached through matrix-nio (this package's only importer of it): logging in,
syncing, sending, and what an error response means for a reply."""

from __future__ import annotations

import re
from typing import Any

import httpx
from nio import (
    AsyncClient,
    AsyncClientConfig,
    ErrorResponse,
    JoinedMembersResponse,
    LoginResponse,
    ProfileGetDisplayNameResponse,
    RoomGetEventResponse,
    RoomSendResponse,
    SyncResponse,
    UploadResponse,
    WhoamiResponse,
)

from nanomem.agent import DeliveryLater

# A server name and a media id as the spec allows them: nothing else reaches a URL path.
_MXC = re.compile(r"mxc://([A-Za-z0-9.\-]+(?::[0-9]{1,5})?)/([A-Za-z0-9_\-]{1,255})")
REQUEST_S = 30.0  # the longest one request other than a sync's long poll may take
# Never sleep out a rate limit inside nio: a reply says "later" to the core instead.
CONFIG = AsyncClientConfig(
    max_limit_exceeded=0, max_timeouts=0, request_timeout=REQUEST_S, store_sync_tokens=False
)


class MatrixError(Exception):
    """The homeserver refused a request (its errcode in `code`)."""

    def __init__(self, what: str, code: str = "", retry_in_s: float | None = None) -> None:
        super().__init__(what)
        self.code, self.retry_in_s = code, retry_in_s


def client_for(homeserver: str, user_id: str, device_id: str) -> AsyncClient:
    return AsyncClient(homeserver, user_id, device_id=device_id or None, config=CONFIG)


def checked(response: Any, what: str) -> Any:
    """The response, or MatrixError saying what the homeserver answered instead."""
    if isinstance(response, ErrorResponse):
        code = str(response.status_code or "")
        retry = response.retry_after_ms / 1000 if response.retry_after_ms else None
        if code == "M_LIMIT_EXCEEDED" and retry is None:
            retry = 5.0
        raise MatrixError(f"{what}: {code} {response.message}".strip(), code, retry)
    return response


async def login(client: AsyncClient, password: str, device_id: str) -> tuple[str, str]:
    """Log in with the password: (access token, device id). The same device id keeps the
    homeserver's transaction ids, which stop a re-sent reply from posting twice."""
    client.device_id = device_id or None
    found: LoginResponse = checked(await client.login(password, "nanomem"), "login")
    return found.access_token, found.device_id


async def whoami(client: AsyncClient) -> tuple[str, str]:
    """(user id, device id) of the access token."""
    found: WhoamiResponse = checked(await client.whoami(), "whoami")
    return found.user_id, found.device_id or ""


async def display_name(client: AsyncClient, user_id: str) -> str:
    response = await client.get_displayname(user_id)
    return response.displayname or "" if isinstance(response, ProfileGetDisplayNameResponse) else ""


async def sync(
    client: AsyncClient, since: str | None, timeout_ms: int, sync_filter: dict[str, Any]
) -> SyncResponse:
    found: SyncResponse = checked(await client.sync(timeout_ms, sync_filter, since=since), "sync")
    return found


async def members(client: AsyncClient, room_id: str) -> int:
    """How many have joined the room, as the homeserver says now (nio's own room list is empty
    after a restart)."""
    found: JoinedMembersResponse = checked(await client.joined_members(room_id), "members")
    return len(found.members)


async def sender_of(client: AsyncClient, room_id: str, event_id: str) -> str:
    """Who sent an event ("" when it cannot be read)."""
    response = await client.room_get_event(room_id, event_id)
    return response.event.sender if isinstance(response, RoomGetEventResponse) else ""


async def body_of(client: AsyncClient, room_id: str, event_id: str) -> str | None:
    """An event's current body as sent (edits aside); None when it cannot be read."""
    response = await client.room_get_event(room_id, event_id)
    if not isinstance(response, RoomGetEventResponse):
        return None
    body = response.event.source.get("content", {}).get("body")
    return body if isinstance(body, str) else None


async def send(client: AsyncClient, room_id: str, content: dict[str, Any], txn: str | None) -> str:
    """Send an m.room.message; its event id. A rate limit or an unreachable homeserver is
    DeliveryLater (with the wait the homeserver asked for); a refusal is MatrixError."""
    try:
        response = await client.room_send(room_id, "m.room.message", content, tx_id=txn)
    except (httpx.HTTPError, OSError, TimeoutError) as exc:
        raise DeliveryLater(f"the homeserver cannot be reached: {exc}") from exc
    except Exception as exc:  # aiohttp's errors, raised through nio
        if type(exc).__module__.startswith("aiohttp"):
            raise DeliveryLater(f"the homeserver cannot be reached: {exc}") from exc
        raise
    try:
        found: RoomSendResponse = checked(response, "send")
    except MatrixError as exc:
        if exc.code == "M_LIMIT_EXCEEDED" or exc.code.startswith("5"):
            raise DeliveryLater(str(exc), retry_in_s=exc.retry_in_s) from exc
        raise
    return found.event_id


async def typing(client: AsyncClient, room_id: str, on: bool, timeout_ms: int = 30_000) -> None:
    await client.room_typing(room_id, on, timeout_ms)


async def upload(client: AsyncClient, data: bytes, mime: str, name: str) -> str:
    """Put a file in the media repository; its mxc:// address."""

    async def provide(*_: int) -> bytes:
        return data

    response, _ = await client.upload(provide, mime, name, filesize=len(data))
    found: UploadResponse = checked(response, "upload")
    return found.content_uri


async def download(homeserver: str, token: str, mxc: str, limit: int) -> bytes:
    """A file from the media repository, read no further than `limit` bytes (the size a
    message claims may lie): ValueError past it."""
    found = _MXC.fullmatch(mxc)
    if found is None:
        raise ValueError(f"not a media address: {mxc[:80]!r}")
    server, media = found.groups()
    url = f"{homeserver.rstrip('/')}/_matrix/client/v1/media/download/{server}/{media}"
    headers = {"Authorization": f"Bearer {token}"}
    async with (
        httpx.AsyncClient(timeout=REQUEST_S, follow_redirects=True) as http,
        http.stream("GET", url, headers=headers) as response,
    ):
        response.raise_for_status()
        data = bytearray()
        async for chunk in response.aiter_bytes():
            data += chunk
            if len(data) > limit:
                raise ValueError("the file is larger than matrix.max_file_mb")
        return bytes(data)

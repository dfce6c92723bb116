"""The homeserver, reached through matrix-nio (this package's only importer of it): logging in,
syncing, sending, end-to-end encryption by nio's own machinery (its SQLite crypto store, keys
uploaded and queried, room keys shared and requested), and what an error response means for a
reply."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path
from typing import Any

import httpx
from nio import (
    AsyncClient,
    AsyncClientConfig,
    ErrorResponse,
    JoinedMembersResponse,
    LocalProtocolError,
    LoginResponse,
    MatrixRoom,
    MegolmEvent,
    ProfileGetDisplayNameResponse,
    RoomGetEventResponse,
    RoomGetStateEventResponse,
    RoomSendResponse,
    SendRetryError,
    SyncResponse,
    UploadResponse,
    WhoamiResponse,
)

from nanomem.agent import DeliveryLater

# A server name and a media id as the spec allows them: nothing else reaches a URL path.
_MXC = re.compile(r"mxc://([A-Za-z0-9.\-]+(?::[0-9]{1,5})?)/([A-Za-z0-9_\-]{1,255})")
REQUEST_S = 30.0  # the longest one request other than a sync's long poll may take
# Never sleep out a rate limit inside nio: a reply says "later" to the core instead.
# The sync token is kept with the inbox rows it confirms, never in nio's store.
LIMITS: dict[str, Any] = {
    "max_limit_exceeded": 0,
    "max_timeouts": 0,
    "request_timeout": REQUEST_S,
    "store_sync_tokens": False,
}
CONFIG = AsyncClientConfig(**LIMITS, encryption_enabled=False)
ENCRYPTION = "m.room.encryption"


class MatrixError(Exception):
    """The homeserver refused a request (its errcode in `code`)."""

    def __init__(self, what: str, code: str = "", retry_in_s: float | None = None) -> None:
        super().__init__(what)
        self.code, self.retry_in_s = code, retry_in_s


def crypto_installed() -> bool:
    """Whether matrix-nio can encrypt here (the e2e extra: vodozemac, peewee)."""
    from nio.crypto import ENCRYPTION_ENABLED

    return bool(ENCRYPTION_ENABLED)


def client_for(
    homeserver: str, user_id: str, device_id: str, store: Path | None = None
) -> AsyncClient:
    """A client; with `store` (a private folder), one that encrypts, its device's keys kept
    there in nio's SQLite store (one file per user and device)."""
    if store is None:
        return AsyncClient(homeserver, user_id, device_id=device_id or None, config=CONFIG)
    store.mkdir(mode=0o700, parents=True, exist_ok=True)
    store.chmod(0o700)  # mkdir's mode is cut by the umask, and an old folder keeps its own
    config = AsyncClientConfig(**LIMITS, encryption_enabled=True)
    return AsyncClient(
        homeserver, user_id, device_id=device_id or None, store_path=str(store), config=config
    )


async def keys_kept(client: AsyncClient) -> None:
    """What nio's own sync loop does after each sync: our device's keys uploaded, the devices
    of the rooms' members asked for, one-time keys claimed, and the room keys nio queued for
    other devices sent."""
    if client.olm is None:
        return
    if client.should_upload_keys:
        checked(await client.keys_upload(), "keys upload")
    if client.should_query_keys:
        checked(await client.keys_query(), "keys query")
    if client.should_claim_keys:
        checked(await client.keys_claim(client.get_users_for_key_claiming()), "keys claim")
    for response in await client.send_to_device_messages():
        checked(response, "to-device")


async def ask_for_key(client: AsyncClient, event: dict[str, Any], room_id: str) -> None:
    """Ask the sender's devices for the room key of a message nio could not decrypt."""
    if client.olm is None:
        return
    megolm = MegolmEvent.from_dict({**event, "room_id": room_id})
    if isinstance(megolm, MegolmEvent):
        megolm.room_id = room_id
        with contextlib.suppress(LocalProtocolError):  # asked already in this run
            await client.request_room_key(megolm)


async def room_known(client: AsyncClient, room_id: str) -> None:
    """nio encrypts only for a room it knows is encrypted, and forgets rooms across restarts:
    a room no sync of this run brought is learned from the homeserver (and nio's store, which
    keeps the encrypted ones), so a reply there never goes out in the clear."""
    if client.olm is None or room_id in client.rooms:
        return
    encrypted = room_id in client.encrypted_rooms
    if not encrypted:
        found = await client.room_get_state_event(room_id, ENCRYPTION)
        encrypted = isinstance(found, RoomGetStateEventResponse) and bool(found.content)
        if isinstance(found, ErrorResponse) and found.status_code != "M_NOT_FOUND":
            raise DeliveryLater(f"whether {room_id} is encrypted is unknown: {found.message}")
    client.rooms[room_id] = MatrixRoom(room_id, client.user_id, encrypted)
    if encrypted:
        client.encrypted_rooms.add(room_id)


def encrypted(client: AsyncClient, room_id: str) -> bool:
    room = client.rooms.get(room_id)
    return client.olm is not None and room is not None and room.encrypted


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
    homeserver's transaction ids, which stop a re-sent reply from posting twice, and the
    device's keys in the crypto store (nio opens it as it logs in)."""
    client.device_id = device_id or None
    found: LoginResponse = checked(await client.login(password, "nanomem"), "login")
    return found.access_token, found.device_id


def restored(client: AsyncClient, user_id: str, device_id: str, token: str) -> None:
    """An access token's login taken up: with encryption, the device's crypto store opened."""
    client.restore_login(user_id, device_id, token)


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
    """An event's current body as sent (edits aside, decrypted when it was encrypted); None
    when it cannot be read."""
    response = await client.room_get_event(room_id, event_id)
    if not isinstance(response, RoomGetEventResponse):
        return None
    event = response.event
    if isinstance(event, MegolmEvent) and client.olm is not None:
        event.room_id = room_id
        try:
            event = client.decrypt_event(event)
        except Exception:  # our own room key lost: taken as not readable
            return None
    body = event.source.get("content", {}).get("body")
    return body if isinstance(body, str) else None


async def send(client: AsyncClient, room_id: str, content: dict[str, Any], txn: str | None) -> str:
    """Send an m.room.message; its event id. A rate limit or an unreachable homeserver is
    DeliveryLater (with the wait the homeserver asked for); a refusal is MatrixError. In an
    encrypted room nio encrypts it for every device of the members, unverified ones too: we
    trust on first use."""
    try:
        await room_known(client, room_id)
        response = await client.room_send(
            room_id, "m.room.message", content, tx_id=txn, ignore_unverified_devices=True
        )
    except SendRetryError as exc:  # the members or their keys could not be fetched now
        raise DeliveryLater(f"the room's keys cannot be shared now: {exc}") from exc
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


async def upload(
    client: AsyncClient, room_id: str, data: bytes, mime: str, name: str
) -> dict[str, Any]:
    """Put a file in the media repository: the message's `url`, or in an encrypted room its
    `file` (the file encrypted before upload, its key only in the encrypted message)."""
    await room_known(client, room_id)
    secret = encrypted(client, room_id)

    # A file object: nio reads it from the start again when it retries, and encrypts it as
    # it reads (its encryption does not await a coroutine's bytes).
    response, keys = await client.upload(
        io.BytesIO(data), mime, name, encrypt=secret, filesize=len(data)
    )
    found: UploadResponse = checked(response, "upload")
    if secret and keys:
        return {"file": {**keys, "url": found.content_uri, "mimetype": mime}}
    return {"url": found.content_uri}


def decrypted_file(data: bytes, file: dict[str, Any]) -> bytes:
    """An encrypted attachment's bytes (ValueError when its keys do not fit it)."""
    from nio.crypto import decrypt_attachment

    try:
        key, iv = file["key"]["k"], file["iv"]
        sha256 = file["hashes"]["sha256"]
        return bytes(decrypt_attachment(data, key, sha256, iv))
    except Exception as exc:  # a missing key, a wrong hash: the file cannot be read
        raise ValueError(f"the encrypted file cannot be decrypted: {type(exc).__name__}") from exc


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

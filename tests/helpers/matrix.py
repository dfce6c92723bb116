"""A person on the test homeserver, with matrix-nio as their client: rooms made, people
invited, messages sent, and what the bot wrote read back as a person's client shows it."""

from __future__ import annotations

import asyncio
import io
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web
from nio import (
    AsyncClient,
    AsyncClientConfig,
    DownloadResponse,
    LoginResponse,
    RoomCreateResponse,
    RoomMessagesResponse,
    RoomSendResponse,
    SyncResponse,
    UploadResponse,
)
from nio.crypto import decrypt_attachment

from tests.helpers.synapse import Synapse, User

ENCRYPTION = {"algorithm": "m.megolm.v1.aes-sha2"}


class Person:
    def __init__(self, server: Synapse, user: User) -> None:
        self.server, self.user = server, user

    def _run(self, step: Callable[[AsyncClient], Awaitable[Any]]) -> Any:
        async def run() -> Any:
            client = AsyncClient(self.server.url, self.user.user_id)
            client.access_token = self.user.token
            try:
                return await step(client)
            finally:
                await client.close()

        return asyncio.run(run())

    def room(self, *invite: str, direct: bool = False, encrypted: bool = False) -> str:
        state = [{"type": "m.room.encryption", "state_key": "", "content": ENCRYPTION}]

        async def step(client: AsyncClient) -> str:
            found = await client.room_create(
                invite=list(invite), is_direct=direct, initial_state=state if encrypted else ()
            )
            assert isinstance(found, RoomCreateResponse), found
            return found.room_id

        return str(self._run(step))

    def join(self, room: str) -> None:
        self.server.call("POST", f"/_matrix/client/v3/join/{room}", {}, self.user.token)

    def invite(self, room: str, user_id: str) -> None:
        body = {"user_id": user_id}
        self.server.call("POST", f"/_matrix/client/v3/rooms/{room}/invite", body, self.user.token)

    def say(self, room: str, text: str, *, kind: str = "m.room.message", **extra: Any) -> str:
        async def step(client: AsyncClient) -> str:
            content = {"msgtype": "m.text", "body": text, **extra}
            found = await client.room_send(room, kind, content)
            assert isinstance(found, RoomSendResponse), found
            return found.event_id

        return str(self._run(step))

    def events(self, room: str) -> list[dict[str, Any]]:
        """The room's messages, oldest first."""

        async def step(client: AsyncClient) -> list[dict[str, Any]]:
            found = await client.room_messages(room, limit=500)
            assert isinstance(found, RoomMessagesResponse), found
            return [e.source for e in reversed(found.chunk)]

        return list(self._run(step))

    def joined(self, room: str) -> list[str]:
        path = f"/_matrix/client/v3/rooms/{room}/joined_members"
        return list(self.server.call("GET", path, token=self.user.token)["joined"])


def shown(events: list[dict[str, Any]], sender: str) -> list[dict[str, Any]]:
    """`sender`'s messages as a client shows them: each original event's content as its last
    edit (m.new_content) left it; the edits themselves are not messages."""
    originals: dict[str, dict[str, Any]] = {}
    for event in events:
        if event.get("sender") != sender or event.get("type") != "m.room.message":
            continue
        content = event.get("content", {})
        relates = content.get("m.relates_to") or {}
        if relates.get("rel_type") == "m.replace":
            if relates.get("event_id") in originals:
                originals[relates["event_id"]] = content.get("m.new_content", {})
        else:
            originals[event["event_id"]] = content
    return list(originals.values())


def bodies(events: list[dict[str, Any]], sender: str) -> list[str]:
    return [str(c.get("body", "")) for c in shown(events, sender)]


class SendGate:
    """A loopback gate between the bot and Synapse: every request goes through as it is, but
    the next `times` message sends are answered as Synapse's rate limiter answers one (429,
    M_LIMIT_EXCEEDED with retry_after_ms): exactly as many as asked, which Synapse's own
    limiter cannot be made to do. On its own event loop in a daemon thread."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream.rstrip("/")
        self.url = ""
        self._lock = threading.Lock()
        self._refusals = 0
        self._retry_ms = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None

    def start(self) -> SendGate:
        loop = self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=loop.run_forever, name="send-gate", daemon=True)
        self._thread.start()
        port = asyncio.run_coroutine_threadsafe(self._serve(), loop).result(timeout=10)
        self.url = f"http://127.0.0.1:{port}"
        return self

    def stop(self) -> None:
        if (loop := self._loop) is None or self._thread is None:
            return
        asyncio.run_coroutine_threadsafe(self._shutdown(), loop).result(timeout=10)
        loop.call_soon_threadsafe(loop.stop)
        self._thread.join(timeout=10)
        loop.close()
        self._loop = None

    def refuse_sends(self, times: int, seconds: float) -> None:
        with self._lock:
            self._refusals, self._retry_ms = times, int(seconds * 1000)

    async def _serve(self) -> int:
        self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None))
        app = web.Application(client_max_size=128 * 1024 * 1024)
        app.router.add_route("*", "/{path:.*}", self._forward)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        return int(self._runner.addresses[0][1])

    async def _shutdown(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
        if self._session is not None:
            await self._session.close()

    def _refused(self, request: web.Request) -> int | None:
        """The wait to ask for, when this request is a message send to refuse."""
        if request.method != "PUT" or "/send/m.room.message/" not in request.path:
            return None
        with self._lock:
            if self._refusals <= 0:
                return None
            self._refusals -= 1
            return self._retry_ms

    async def _forward(self, request: web.Request) -> web.Response:
        if (wait := self._refused(request)) is not None:
            body = {"errcode": "M_LIMIT_EXCEEDED", "error": "Too Many Requests"}
            return web.json_response(body | {"retry_after_ms": wait}, status=429)
        assert self._session is not None
        skip = {"host", "content-length", "transfer-encoding", "connection"}
        headers = {k: v for k, v in request.headers.items() if k.lower() not in skip}
        async with self._session.request(
            request.method, self.upstream + request.path_qs, data=await request.read(),
            headers=headers,
        ) as answer:  # fmt: skip
            kind = answer.headers.get("Content-Type", "application/json")
            return web.Response(body=await answer.read(), status=answer.status,
                                headers={"Content-Type": kind})  # fmt: skip


class EncryptedPerson:
    """A person whose client encrypts, as Element does: matrix-nio with end-to-end encryption
    on, a device of their own (a password login) and its keys in its own store, on one event
    loop for the person's life. What the bot wrote is read as that client decrypts it."""

    def __init__(self, server: Synapse, user: User, store: Path) -> None:
        self.server, self.user = server, user
        self.loop = asyncio.new_event_loop()
        config = AsyncClientConfig(encryption_enabled=True, store_sync_tokens=True)
        store.mkdir(parents=True, exist_ok=True)
        self.client = AsyncClient(server.url, user.user_id, store_path=str(store), config=config)
        self.seen: dict[str, list[dict[str, Any]]] = {}  # room → its events, decrypted
        found = self._run(self.client.login(user.password, "person"))
        assert isinstance(found, LoginResponse), found
        self.sync()

    def _run(self, step: Awaitable[Any]) -> Any:
        return self.loop.run_until_complete(step)

    def close(self) -> None:
        self._run(self.client.close())
        self.loop.close()

    def sync(self) -> None:
        """One sync, and the keys it calls for exchanged (what nio's sync_forever does)."""

        async def step() -> None:
            found = await self.client.sync(500, full_state=not self.seen)
            assert isinstance(found, SyncResponse), found
            for room, info in found.rooms.join.items():
                self.seen.setdefault(room, []).extend(e.source for e in info.timeline.events)
            if self.client.should_upload_keys:
                await self.client.keys_upload()
            if self.client.should_query_keys:
                await self.client.keys_query()
            if self.client.should_claim_keys:
                await self.client.keys_claim(self.client.get_users_for_key_claiming())
            await self.client.send_to_device_messages()

        self._run(step())

    def room(self, *invite: str, direct: bool = False, encrypted: bool = True) -> str:
        state = [{"type": "m.room.encryption", "state_key": "", "content": ENCRYPTION}]
        found = self._run(
            self.client.room_create(
                invite=list(invite), is_direct=direct, initial_state=state if encrypted else ()
            )
        )
        assert isinstance(found, RoomCreateResponse), found
        self.sync()
        return str(found.room_id)

    def encrypt(self, room: str) -> None:
        """Turn encryption on in a room that had it off (for good, as Matrix has it)."""
        path = f"/_matrix/client/v3/rooms/{room}/state/m.room.encryption"
        self.server.call("PUT", path, ENCRYPTION, self.user.token)
        self.sync()

    def say(self, room: str, text: str) -> str:
        self.sync()
        content = {"msgtype": "m.text", "body": text}
        found = self._run(
            self.client.room_send(room, "m.room.message", content, ignore_unverified_devices=True)
        )
        assert isinstance(found, RoomSendResponse), found
        return str(found.event_id)

    def send_file(self, room: str, name: str, data: bytes) -> None:
        """A file as Element sends one in an encrypted room: encrypted, then uploaded, its key
        in the encrypted message's `file`."""
        self.sync()

        async def step() -> None:
            found, keys = await self.client.upload(
                io.BytesIO(data), "text/plain", name, encrypt=True, filesize=len(data)
            )
            assert isinstance(found, UploadResponse) and keys, found
            content = {
                "msgtype": "m.file",
                "body": name,
                "file": {**keys, "url": found.content_uri},
                "info": {"size": len(data), "mimetype": "text/plain"},
            }
            sent = await self.client.room_send(
                room, "m.room.message", content, ignore_unverified_devices=True
            )
            assert isinstance(sent, RoomSendResponse), sent

        self._run(step())

    def file_of(self, content: dict[str, Any]) -> bytes:
        """An encrypted attachment the bot sent, downloaded and decrypted."""
        file = content["file"]
        found = self._run(self.client.download(mxc=file["url"]))
        assert isinstance(found, DownloadResponse), found
        key, sha256, iv = file["key"]["k"], file["hashes"]["sha256"], file["iv"]
        return bytes(decrypt_attachment(found.body, key, sha256, iv))

    def events(self, room: str) -> list[dict[str, Any]]:
        """The room's events as this client decrypted them, oldest first (one sync more)."""
        self.sync()
        return list(self.seen.get(room, []))

    def joined(self, room: str) -> list[str]:
        path = f"/_matrix/client/v3/rooms/{room}/joined_members"
        return list(self.server.call("GET", path, token=self.user.token)["joined"])

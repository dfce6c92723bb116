"""Loopback fake of Slack for end-to-end tests: the Web API at `base_url` and Socket Mode's
websocket, spoken as Slack speaks them, so slack-sdk's AsyncWebClient (`base_url=`) and its
Socket Mode client (through `apps.connections.open`) run unmodified against it.

The server runs its own asyncio loop in a daemon thread (as tests/fakes/telegram_server.py
does), so a sync test driving a `nanomem gateway` subprocess can use it; every public method
is thread-safe. A test injects envelopes (`send_message`, `command`, `press`), and reads what
the app posted (`posted`), edited (`updates`), whispered (`ephemerals`), uploaded (`uploads`)
and when it acknowledged each envelope (`acks`).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import hmac
import itertools
import json
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Self

from aiohttp import WSMsgType, web

JSONDict = dict[str, Any]
BOT_TOKEN = "xoxb-1111-2222-fake-bot-token"
APP_TOKEN = "xapp-1-A111-fake-app-token"
SIGNING_SECRET = "fake-signing-secret-0123456789"
BOT_USER, BOT_ID, TEAM, APP_ID = "UBOT00001", "BBOT00001", "T0000TEAM", "A0000APP1"
_JSON_FIELDS = ("blocks", "files", "attachments", "metadata")
TEXT_LIMIT = 40_000  # Slack truncates a message's text beyond this; the fake refuses it


def signed(secret: str, body: bytes, timestamp: int | None = None) -> dict[str, str]:
    """Headers Slack's Events API sends with `body`: the v0 signature over `v0:ts:body`."""
    stamp = str(int(time.time()) if timestamp is None else timestamp)
    base = b"v0:" + stamp.encode() + b":" + body
    digest = hmac.new(secret.encode(), base, hashlib.sha256).hexdigest()
    return {
        "X-Slack-Request-Timestamp": stamp,
        "X-Slack-Signature": f"v0={digest}",
        "Content-Type": "application/json",
    }


@dataclass
class Envelope:
    """One Socket Mode envelope: what was sent, when, and when (if ever) it was acked."""

    envelope_id: str
    kind: str
    payload: JSONDict
    sent_at: list[float] = field(default_factory=list)
    acked_at: float | None = None
    attempts: int = 0

    def wire(self) -> str:
        body: JSONDict = {
            "envelope_id": self.envelope_id,
            "type": self.kind,
            "payload": self.payload,
            "accepts_response_payload": self.kind != "events_api",
        }
        if self.kind == "events_api":
            body["retry_attempt"] = self.attempts
            body["retry_reason"] = "timeout" if self.attempts else ""
        return json.dumps(body)

    @property
    def ack_s(self) -> float | None:
        """Seconds from its last sending to its ack."""
        return None if self.acked_at is None else self.acked_at - self.sent_at[-1]


@dataclass
class _Fault:
    error: str
    times: int
    status: int = 200
    retry_after: int | None = None
    after: int = 0  # calls answered before the fault begins


class FakeSlack:
    """In-process Slack bound to 127.0.0.1 on a random port."""

    def __init__(self) -> None:
        self.port, self.base_url = 0, ""
        self.calls: list[tuple[str, JSONDict]] = []
        self.posted: list[JSONDict] = []  # chat.postMessage, in order (edits applied)
        self.updates: list[JSONDict] = []  # every chat.update, with its time
        self.ephemerals: list[JSONDict] = []
        self.uploads: list[JSONDict] = []  # completed uploads: channel, thread_ts, name, data
        self.envelopes: list[Envelope] = []
        self.connections_opened = 0
        self.api_connections: set[tuple[Any, ...]] = set()  # the Web API's clients' (host, port)
        # The most a history page holds, whatever `limit` asks: Slack may return fewer items
        # than asked even before the end, and says where to go on (`next_cursor`).
        self.page_max = 1000
        self.users: dict[str, JSONDict] = {}
        self.conversations: dict[str, JSONDict] = {}
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)  # a message was posted
        self._faults: dict[str, list[_Fault]] = {}
        self._slow: dict[str, float] = {}  # method → seconds its answer waits (after it acts)
        self._ts = itertools.count(1)
        self._ids = itertools.count(1)
        self._files: dict[str, JSONDict] = {}  # id → file (its bytes under "data")
        self._sockets: list[web.WebSocketResponse] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None

    # Lifecycle.

    def start(self) -> Self:
        loop = self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=loop.run_forever, name="fake-slack", daemon=True)
        self._thread.start()
        self.port = asyncio.run_coroutine_threadsafe(self._serve(), loop).result(timeout=10)
        self.base_url = f"http://127.0.0.1:{self.port}/api/"
        return self

    def stop(self) -> None:
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(self._shutdown(), loop).result(timeout=10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
        loop.close()
        self._loop = self._thread = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()

    async def _serve(self) -> int:
        self._stopping = asyncio.Event()
        app = web.Application(client_max_size=64 * 2**20)
        app.router.add_route("*", "/api/{method}", self._method)
        app.router.add_get("/socket", self._socket)
        app.router.add_post("/upload/{file_id}", self._upload)
        app.router.add_get("/files/{file_id}/{name}", self._download)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        return int(self._runner.addresses[0][1])

    async def _shutdown(self) -> None:
        self._stopping.set()
        for ws in list(self._sockets):
            await ws.close()
        if self._runner is not None:
            await self._runner.cleanup()

    def _run(self, coro: Any) -> Any:
        assert self._loop is not None
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout=10)

    # The people and conversations it knows.

    def add_user(self, user_id: str, name: str, *, bot: bool = False) -> None:
        with self._lock:
            self.users[user_id] = {"id": user_id, "name": name, "real_name": name, "is_bot": bot}

    def add_conversation(self, channel: str, kind: str, user: str = "", name: str = "") -> None:
        """`kind`: "im" (a DM with `user`), "mpim", "channel" or "group" (a private channel);
        `name`: a channel's, as anyone who makes one may choose it."""
        with self._lock:
            self.conversations[channel] = {
                "id": channel,
                **({"name": name} if name and kind != "im" else {}),
                "is_im": kind == "im",
                "is_mpim": kind == "mpim",
                "is_channel": kind == "channel",
                "is_group": kind == "group",
                "is_private": kind in ("group", "im", "mpim"),
                **({"user": user} if user else {}),
            }

    def add_file(
        self, name: str, data: bytes, mimetype: str = "application/octet-stream"
    ) -> JSONDict:
        """A file someone shared: what a message event's `files` lists."""
        with self._lock:
            file_id = f"F{next(self._ids):08d}"
            url = f"http://127.0.0.1:{self.port}/files/{file_id}/{name}"
            shown = {"id": file_id, "name": name, "size": len(data), "mimetype": mimetype}
            shown |= {"url_private": url, "url_private_download": url}
            self._files[file_id] = shown | {"data": data}
            return shown

    # Faults.

    def fail(
        self,
        method: str,
        error: str,
        *,
        times: int = 1,
        status: int = 200,
        retry_after: int | None = None,
        after: int = 0,
    ) -> None:
        """The next `times` calls of `method` (after the next `after`, answered as usual) fail:
        `ok: false` with `error`, or HTTP 429 with Retry-After when `status` is 429."""
        with self._lock:
            fault = _Fault(error, times, status, retry_after, after)
            self._faults.setdefault(method, []).append(fault)

    def clear_faults(self) -> None:
        with self._lock:
            self._faults.clear()
            self._slow.clear()

    def slow(self, method: str, seconds: float) -> None:
        """`method` does its work at once but answers only after `seconds`."""
        with self._lock:
            self._slow[method] = seconds

    def _fault(self, method: str) -> web.Response | None:
        faults = self._faults.get(method)
        if not faults:
            return None
        fault = faults[0]
        if fault.after > 0:
            fault.after -= 1
            return None
        fault.times -= 1
        if fault.times <= 0:
            faults.pop(0)
        headers = {"Retry-After": str(fault.retry_after)} if fault.retry_after is not None else {}
        body = {"ok": False, "error": fault.error}
        return web.json_response(body, status=fault.status, headers=headers)

    # The Web API.

    async def _method(self, request: web.Request) -> web.Response:
        method = request.match_info["method"]
        peer = request.transport.get_extra_info("peername") if request.transport else None
        with self._lock:
            self.api_connections.add(tuple(peer) if peer else ())
        params: JSONDict = dict(request.query)
        if request.can_read_body:
            if request.content_type == "application/json":
                params |= await request.json()
            else:
                params |= dict(await request.post())
        for key in _JSON_FIELDS:
            if isinstance(params.get(key), str):
                params[key] = json.loads(params[key])
        auth = request.headers.get("Authorization", "")
        token = auth.removeprefix("Bearer ") if auth.startswith("Bearer ") else params.get("token")
        with self._lock:
            self.calls.append((method, params))
            wanted = APP_TOKEN if method == "apps.connections.open" else BOT_TOKEN
            if token != wanted:
                return web.json_response({"ok": False, "error": "invalid_auth"})
            if (faulted := self._fault(method)) is not None:
                return faulted
            handler = getattr(self, "_api_" + method.replace(".", "_"), None)
            if handler is None:
                return web.json_response({"ok": False, "error": "unknown_method"})
            try:
                result = handler(params)
            except _Refused as exc:
                return web.json_response({"ok": False, "error": str(exc)})
            slow = self._slow.get(method, 0.0)
        if slow:  # cut short when the fake stops: nothing left pending at its loop's end
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), slow)
        return web.json_response({"ok": True, **result})

    def _api_auth_test(self, _: JSONDict) -> JSONDict:
        return {
            "url": "https://fake.slack.com/",
            "team": "Fake",
            "user": "nanomem",
            "team_id": TEAM,
            "user_id": BOT_USER,
            "bot_id": BOT_ID,
            "is_enterprise_install": False,
        }

    def _api_apps_connections_open(self, _: JSONDict) -> JSONDict:
        self.connections_opened += 1
        return {"url": f"ws://127.0.0.1:{self.port}/socket?ticket={self.connections_opened}"}

    def _api_chat_postMessage(self, params: JSONDict) -> JSONDict:
        channel, text = str(params.get("channel", "")), params.get("text")
        if not channel:
            raise _Refused("channel_not_found")
        if not text and not params.get("blocks"):
            raise _Refused("no_text")
        if len(str(text or "")) > TEXT_LIMIT:
            raise _Refused("msg_too_long")
        ts = self._new_ts()
        message = {"channel": channel, "ts": ts, "text": text or "", "blocks": params.get("blocks")}
        message |= {"thread_ts": params.get("thread_ts"), "at": time.monotonic()}
        message["metadata"] = _metadata(params.get("metadata"))
        self.posted.append(message)
        self._changed.notify_all()
        return {"channel": channel, "ts": ts, "message": {"text": text, "ts": ts}}

    def _api_chat_update(self, params: JSONDict) -> JSONDict:
        found = self._find(str(params.get("channel", "")), str(params.get("ts", "")))
        if len(str(params.get("text") or "")) > TEXT_LIMIT:
            raise _Refused("msg_too_long")
        found["text"] = params.get("text", found["text"])
        found["blocks"] = params.get("blocks")
        if "metadata" in params:  # as Slack: kept unless the update brings its own
            found["metadata"] = _metadata(params.get("metadata"))
        self.updates.append({**params, "at": time.monotonic()})
        return {"channel": found["channel"], "ts": found["ts"], "text": found["text"]}

    def _api_chat_postEphemeral(self, params: JSONDict) -> JSONDict:
        self.ephemerals.append(dict(params))
        return {"message_ts": self._new_ts()}

    def _api_conversations_info(self, params: JSONDict) -> JSONDict:
        found = self.conversations.get(str(params.get("channel", "")))
        if found is None:
            raise _Refused("channel_not_found")
        return {"channel": found}

    def _api_conversations_history(self, params: JSONDict) -> JSONDict:
        return self._page(params, self._history(params, None))

    def _api_conversations_replies(self, params: JSONDict) -> JSONDict:
        return self._page(params, self._history(params, str(params.get("ts", ""))))

    def _page(self, params: JSONDict, found: list[JSONDict]) -> JSONDict:
        """One page from the `cursor` on (an opaque string, as Slack's), `limit` long at most."""
        cursor = str(params.get("cursor") or "")
        start = int(base64.b64decode(cursor).decode().removeprefix("next:")) if cursor else 0
        end = start + min(int(params.get("limit") or 100), self.page_max)
        more = end < len(found)
        after = base64.b64encode(f"next:{end}".encode()).decode() if more else ""
        meta = {"next_cursor": after}
        return {"messages": found[start:end], "has_more": more, "response_metadata": meta}

    def _history(self, params: JSONDict, thread: str | None) -> list[JSONDict]:
        """What the app posted in a conversation (a thread) after `oldest`, newest first."""
        channel, oldest = str(params.get("channel", "")), float(params.get("oldest") or 0)
        with_metadata = str(params.get("include_all_metadata", "")).lower() in ("true", "1")
        if channel not in self.conversations:
            raise _Refused("channel_not_found")
        found = [
            {
                "type": "message",
                "user": BOT_USER,
                "bot_id": BOT_ID,
                "ts": m["ts"],
                "text": m["text"],
            }
            | ({"metadata": m["metadata"]} if m.get("metadata") and with_metadata else {})
            for m in self.posted
            if m["channel"] == channel and float(m["ts"]) > oldest and m["thread_ts"] == thread
        ]
        return found[::-1]

    def _api_conversations_open(self, params: JSONDict) -> JSONDict:
        user = str(params.get("users", ""))
        for channel in self.conversations.values():
            if channel["is_im"] and channel.get("user") == user:
                return {"channel": {"id": channel["id"]}}
        raise _Refused("user_not_found")

    def _api_users_info(self, params: JSONDict) -> JSONDict:
        found = self.users.get(str(params.get("user", "")))
        if found is None:
            raise _Refused("user_not_found")
        return {"user": found}

    def _api_files_getUploadURLExternal(self, params: JSONDict) -> JSONDict:
        file_id = f"F{next(self._ids):08d}"
        self._files[file_id] = {"id": file_id, "name": params.get("filename"), "data": None}
        url = f"http://127.0.0.1:{self.port}/upload/{file_id}"
        return {"upload_url": url, "file_id": file_id}

    def _api_files_completeUploadExternal(self, params: JSONDict) -> JSONDict:
        done = []
        for item in params.get("files") or []:
            file = self._files.get(item.get("id", ""))
            if file is None or file["data"] is None:
                raise _Refused("file_not_found")
            self.uploads.append(
                {
                    "channel": params.get("channel_id"),
                    "thread_ts": params.get("thread_ts"),
                    "comment": params.get("initial_comment"),
                    "name": file["name"],
                    "data": file["data"],
                }
            )
            done.append({"id": file["id"], "title": item.get("title")})
        return {"files": done}

    async def _upload(self, request: web.Request) -> web.Response:
        data = await request.read()
        with self._lock:
            file = self._files.get(request.match_info["file_id"])
            if file is None:
                return web.Response(status=404)
            file["data"] = data
        return web.Response(text=f"OK - {len(data)}")

    async def _download(self, request: web.Request) -> web.Response:
        """A shared file, only with the bot token (Slack answers a login page otherwise)."""
        with self._lock:
            file = self._files.get(request.match_info["file_id"])
        if request.headers.get("Authorization") != f"Bearer {BOT_TOKEN}":
            return web.Response(text="<html>sign in</html>", content_type="text/html")
        if file is None or file["data"] is None:
            return web.Response(status=404)
        return web.Response(body=file["data"], content_type="application/octet-stream")

    def _new_ts(self) -> str:
        return f"{int(time.time())}.{next(self._ts):06d}"

    def _find(self, channel: str, ts: str) -> JSONDict:
        for message in self.posted:
            if message["channel"] == channel and message["ts"] == ts:
                return message
        raise _Refused("message_not_found")

    # Socket Mode.

    async def _socket(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse(autoping=True)
        await ws.prepare(request)
        hello = {"type": "hello", "num_connections": 1, "connection_info": {"app_id": APP_ID}}
        await ws.send_str(json.dumps(hello | {"debug_info": {"host": "fake"}}))
        with self._lock:
            self._sockets.append(ws)
            # Slack sends again, to a new connection, what the last one never acked.
            waiting = [e for e in self.envelopes if e.acked_at is None]
        for envelope in waiting:
            await self._deliver(envelope, retry=True)
        try:
            async for message in ws:
                if message.type != WSMsgType.TEXT:
                    continue
                with contextlib.suppress(ValueError, AttributeError):
                    envelope_id = json.loads(message.data).get("envelope_id")
                    with self._lock:
                        for envelope in self.envelopes:
                            if envelope.envelope_id == envelope_id and envelope.acked_at is None:
                                envelope.acked_at = time.monotonic()
        finally:
            with self._lock:
                if ws in self._sockets:
                    self._sockets.remove(ws)
        return ws

    async def _deliver(self, envelope: Envelope, *, retry: bool = False) -> None:
        with self._lock:
            ws = self._sockets[-1] if self._sockets else None
            if ws is None:
                return  # sent when a connection comes
            if retry:
                envelope.attempts += 1
            envelope.sent_at.append(time.monotonic())
        await ws.send_str(envelope.wire())

    def connected(self) -> bool:
        with self._lock:
            return bool(self._sockets)

    def envelope(self, kind: str, payload: JSONDict) -> Envelope:
        """Send an envelope to the app's connection (or to the next one, if none is open)."""
        with self._lock:
            envelope = Envelope(f"env-{next(self._ids)}", kind, payload)
            self.envelopes.append(envelope)
        self._run(self._deliver(envelope))
        return envelope

    def redeliver(self, envelope: Envelope) -> None:
        """Slack's retry of an envelope it holds unacknowledged (retry_attempt counts up)."""
        self._run(self._deliver(envelope, retry=True))

    def disconnect(self, reason: str = "refresh_requested") -> None:
        """Slack's `disconnect` message: the app opens a new connection."""

        async def tell() -> None:
            for ws in list(self._sockets):
                await ws.send_str(json.dumps({"type": "disconnect", "reason": reason}))

        self._run(tell())

    def drop(self) -> None:
        """Close every Socket Mode connection (Slack gone, or a network fault)."""

        async def close() -> None:
            for ws in list(self._sockets):
                await ws.close()

        self._run(close())

    # What people do.

    def event_payload(self, event: JSONDict, event_id: str | None = None) -> JSONDict:
        return {
            "token": "verification-token",
            "team_id": TEAM,
            "api_app_id": APP_ID,
            "event": event,
            "type": "event_callback",
            "event_id": event_id or f"Ev{next(self._ids):08d}",
            "event_time": int(time.time()),
            "authorizations": [{"team_id": TEAM, "user_id": BOT_USER, "is_bot": True}],
        }

    def message_event(
        self, channel: str, user: str, text: str, *, thread_ts: str | None = None, **extra: Any
    ) -> JSONDict:
        """A `message` event as Slack makes it (`channel_type` from the conversation)."""
        kind = self.conversations.get(channel, {})
        channel_type = next(
            (t for t in ("im", "mpim", "channel", "group") if kind.get(f"is_{t}")), "channel"
        )
        event = {"type": "message", "channel": channel, "user": user, "text": text}
        event |= {"ts": self._new_ts(), "channel_type": channel_type, "team": TEAM}
        if thread_ts is not None:
            event["thread_ts"] = thread_ts
        return event | extra

    def send_message(
        self, channel: str, user: str, text: str, *, thread_ts: str | None = None, **extra: Any
    ) -> Envelope:
        event = self.message_event(channel, user, text, thread_ts=thread_ts, **extra)
        return self.envelope("events_api", self.event_payload(event))

    def mention(self, channel: str, user: str, text: str, ts: str | None = None) -> Envelope:
        """An `app_mention` event (no channel_type: Slack sends none with it)."""
        event = {"type": "app_mention", "channel": channel, "user": user, "text": text}
        event |= {"ts": ts or self._new_ts(), "team": TEAM}
        return self.envelope("events_api", self.event_payload(event))

    def command(self, channel: str, user: str, text: str, command: str = "/nanomem") -> Envelope:
        payload = {
            "token": "verification-token",
            "team_id": TEAM,
            "channel_id": channel,
            "channel_name": self._channel_name(channel),
            "user_id": user,
            "user_name": self.users.get(user, {}).get("name", user),
            "command": command,
            "text": text,
            "api_app_id": APP_ID,
            "response_url": f"http://127.0.0.1:{self.port}/respond",
            "trigger_id": f"trigger-{next(self._ids)}",
        }
        return self.envelope("slash_commands", payload)

    def press(
        self, message: JSONDict, label: str, user: str, *, value: str | None = None
    ) -> Envelope:
        """A block_actions payload: `user` pressed the button `label` under `message` (one
        the app posted); `value` forges what the button sends."""
        button = next(
            element
            for block in message.get("blocks") or []
            if block.get("type") == "actions"
            for element in block.get("elements", [])
            if element.get("text", {}).get("text") == label
        )
        container = {
            "type": "message",
            "message_ts": message["ts"],
            "channel_id": message["channel"],
        }
        shown = {"ts": message["ts"], "text": message["text"], "blocks": message["blocks"]}
        if message.get("thread_ts"):
            container["thread_ts"] = shown["thread_ts"] = message["thread_ts"]
        payload = {
            "type": "block_actions",
            "user": {"id": user, "username": self.users.get(user, {}).get("name", user)},
            "api_app_id": APP_ID,
            "token": "verification-token",
            "team": {"id": TEAM},
            "container": container,
            "trigger_id": f"trigger-{next(self._ids)}",
            "channel": {"id": message["channel"], "name": self._channel_name(message["channel"])},
            "message": shown,
            "actions": [
                {
                    "action_id": button["action_id"],
                    "block_id": "b",
                    "type": "button",
                    "value": button["value"] if value is None else value,
                    "action_ts": self._new_ts(),
                }
            ],
        }
        return self.envelope("interactive", payload)

    def _channel_name(self, channel: str) -> str:
        """What Slack names a conversation in a command or press: a DM is "directmessage"."""
        with self._lock:
            found = self.conversations.get(channel, {})
            return "directmessage" if found.get("is_im") else str(found.get("name", "general"))

    # What the app did.

    def messages_in(self, channel: str, thread_ts: str | None = None) -> list[JSONDict]:
        with self._lock:
            return [
                dict(m)
                for m in self.posted
                if m["channel"] == channel and (thread_ts is None or m["thread_ts"] == thread_ts)
            ]

    def wait_posted(self, count: int, timeout: float) -> int:
        """Wait (woken by each post, not by polling) until `count` messages were posted."""
        with self._changed:
            self._changed.wait_for(lambda: len(self.posted) >= count, timeout)
            return len(self.posted)

    def acked(self, envelope: Envelope) -> bool:
        with self._lock:
            return envelope.acked_at is not None


class _Refused(Exception):
    """A Web API call Slack answers with `ok: false` and this error."""


def _metadata(given: Any) -> JSONDict | None:
    """Message metadata as Slack keeps it: an event type and a JSON object, or nothing."""
    if not isinstance(given, dict) or not isinstance(given.get("event_type"), str):
        return None
    payload = given.get("event_payload")
    return {
        "event_type": given["event_type"],
        "event_payload": payload if isinstance(payload, dict) else {},
    }

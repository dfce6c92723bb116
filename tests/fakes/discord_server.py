"""Loopback fake of Discord for end-to-end tests: its REST API under `/api/v10` and its
gateway websocket (HELLO, IDENTIFY → READY and GUILD_CREATE, heartbeats, RESUME, sequence
numbers), faithful enough that discord.py runs unmodified against it.

The server runs its own asyncio loop in a daemon thread (like tests/fakes/telegram_server.py),
so a sync test driving a `nanomem gateway` subprocess can use it. Every public method is
thread-safe. The world it keeps: one guild with text channels and threads, DM channels, every
message (ours and the people's), the interactions and how each was answered.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import re
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Self

from aiohttp import WSMsgType, web

JSONDict = dict[str, Any]

TOKEN = "fake-discord-bot-token-0123456789abcdef"
BOT_ID, APP_ID, GUILD_ID = "1100000000000000001", "1100000000000000002", "1100000000000000003"
GENERAL = "1100000000000000010"  # the guild's text channel
DM, GUILD_TEXT, PUBLIC_THREAD, GROUP_DM = 1, 0, 11, 3
GUILDS, GUILD_MESSAGES, DIRECT_MESSAGES, MESSAGE_CONTENT = 1 << 0, 1 << 9, 1 << 12, 1 << 15
TEXT_LIMIT = 2000
EPHEMERAL = 64
_COMMAND_NAME = re.compile(r"^[-_\w]{1,32}$")
_HEARTBEAT_MS = 41_250


@dataclass
class _Session:
    """A gateway session: what it was sent, so a RESUME can replay what the client missed."""

    id: str
    intents: int
    events: list[JSONDict] = field(default_factory=list)
    ws: web.WebSocketResponse | None = None


@dataclass
class _Interaction:
    id: str
    token: str
    channel_id: str
    created: float
    responses: list[JSONDict] = field(default_factory=list)  # every callback, with its time
    original: str | None = None  # the message id of the deferred response, once edited
    ephemeral: list[JSONDict] = field(default_factory=list)  # what only the presser saw
    message_id: str = ""  # a press's: the message whose button it was


class NotOffered(Exception):
    """Discord offers no such slash command where it was asked for."""


@dataclass
class _Fault:
    what: str  # "create", "edit" or "callback"
    times: int
    retry_after: float


class FakeDiscord:
    """In-process Discord bound to 127.0.0.1 on a random port."""

    def __init__(
        self, token: str = TOKEN, *, interaction_expiry_s: float = 3.0, content_intent: bool = True
    ) -> None:
        self.token, self.interaction_expiry_s = token, interaction_expiry_s
        self.history_s = 0.0  # how long a channel's history takes to answer (a slow catch-up)
        # Whether the Message Content intent is turned on for the bot in the Developer Portal:
        # without it, an IDENTIFY asking for it is closed with 4014, as Discord does.
        self.content_intent = content_intent
        self.port, self.api_base = 0, ""
        self.bot: JSONDict = _user(BOT_ID, "nanomem", bot=True)
        self.commands: list[JSONDict] = []
        self.requests: list[tuple[str, str, JSONDict]] = []  # (method, path, body) of each
        self.typing: list[tuple[str, float]] = []
        self.identifies: list[JSONDict] = []
        self.resumes = 0
        self.limited = 0  # requests answered 429
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._ids = itertools.count(int(time.time() * 1000) << 22)
        self._sessions: dict[str, _Session] = {}
        self._channels: dict[str, JSONDict] = {
            GENERAL: {
                "id": GENERAL,
                "type": GUILD_TEXT,
                "guild_id": GUILD_ID,
                "name": "general",
                "position": 0,
                "permission_overwrites": [],
            },
        }
        self._messages: dict[str, list[JSONDict]] = {}
        self._interactions: dict[str, _Interaction] = {}
        self._nonces: dict[tuple[str, str], JSONDict] = {}
        self._faults: list[_Fault] = []
        self._files: dict[str, bytes] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._thread: threading.Thread | None = None

    # Lifecycle.

    def __enter__(self) -> Self:
        ready = threading.Event()
        self._thread = threading.Thread(target=self._serve, args=(ready,), daemon=True)
        self._thread.start()
        if not ready.wait(10):
            raise RuntimeError("the fake Discord did not start")
        return self

    def __exit__(self, *_: object) -> None:
        loop = self._loop
        if loop is not None and self._runner is not None:
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), loop).result(10)
            loop.call_soon_threadsafe(loop.stop)
        if self._thread is not None:
            self._thread.join(10)

    def _serve(self, ready: threading.Event) -> None:
        self._loop = loop = asyncio.new_event_loop()
        app = web.Application(client_max_size=64 * 2**20)
        app.router.add_get("/gateway", self._gateway)
        app.router.add_get("/attachments/{id}/{name}", self._attachment)
        app.router.add_route("*", "/api/v10/{path:.*}", self._rest)
        self._runner = web.AppRunner(app)
        loop.run_until_complete(self._runner.setup())
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        loop.run_until_complete(site.start())
        self.port = self._runner.addresses[0][1]
        self.api_base = f"http://127.0.0.1:{self.port}/api/v10"
        ready.set()
        loop.run_forever()

    # What a test does: people write, press, use slash commands; faults on demand.

    def dm(self, user: str, text: str, **more: Any) -> JSONDict:
        """`user` writes to the bot in their DM (the DM channel is made on first use)."""
        channel = self.dm_channel(user)
        return self._post_from(user, channel, text, **more)

    def say(
        self,
        channel: str,
        user: str,
        text: str,
        *,
        mention: bool = False,
        reply_to: str | None = None,
        **more: Any,
    ) -> JSONDict:
        """`user` writes in a guild channel or thread; `mention` names the bot (<@id>)."""
        if mention:
            text = f"<@{BOT_ID}> {text}"
        return self._post_from(user, channel, text, reply_to=reply_to, **more)

    def thread(self, parent: str = GENERAL, name: str = "a thread") -> str:
        """A public thread under `parent` (THREAD_CREATE dispatched); its channel id."""
        with self._lock:
            tid = self._next_id()
            thread = {
                "id": tid,
                "type": PUBLIC_THREAD,
                "guild_id": GUILD_ID,
                "name": name,
                "parent_id": parent,
                "owner_id": "1",
                "message_count": 0,
                "member_count": 1,
                "thread_metadata": {
                    "archived": False,
                    "auto_archive_duration": 1440,
                    "locked": False,
                    "archive_timestamp": _iso(time.time()),
                },
            }
            self._channels[tid] = thread
        self._dispatch("THREAD_CREATE", thread | {"newly_created": True}, GUILDS)
        return tid

    def group_dm(self, *users: str) -> str:
        """A group DM of `users` (the bot is in it when a user added the app there)."""
        with self._lock:
            cid = self._next_id()
            recipients = [_user(u, f"u{u}") for u in users]
            self._channels[cid] = {"id": cid, "type": GROUP_DM, "recipients": recipients}
            return cid

    def dm_channel(self, user: str) -> str:
        with self._lock:
            return self._dm_channel(user)

    def _dm_channel(self, user: str) -> str:
        for cid, channel in self._channels.items():
            if channel["type"] == DM and channel["recipients"][0]["id"] == user:
                return cid
        cid = self._next_id()
        self._channels[cid] = {
            "id": cid,
            "type": DM,
            "recipients": [_user(user, f"u{user}")],
            "last_message_id": None,
        }
        return cid

    def attach(self, name: str, data: bytes) -> JSONDict:
        """An attachment for a person's message (`attachments=[...]`), served by the fake."""
        with self._lock:
            return self._keep_file(name, data)

    def file(self, attachment: JSONDict) -> bytes:
        """The bytes of an attachment (one the bot uploaded, say)."""
        with self._lock:
            return self._files[attachment["id"]]

    def _keep_file(self, name: str, data: bytes) -> JSONDict:
        aid = self._next_id()
        self._files[aid] = data
        url = f"http://127.0.0.1:{self.port}/attachments/{aid}/{name}"
        return {
            "id": aid,
            "filename": name,
            "size": len(data),
            "url": url,
            "proxy_url": url,
            "content_type": "application/octet-stream",
        }

    def slash(self, channel: str, user: str, name: str, value: str = "") -> str:
        """`user` runs `/name value` in `channel`; the interaction's id. As Discord, only where
        the command was registered for (`contexts`, all three when not given): elsewhere
        Discord does not offer it (NotOffered)."""
        with self._lock:
            kind = self._channels[channel]["type"]
            context = 2 if kind == GROUP_DM else 1 if kind == DM else 0
            command = next((c for c in self.commands if c["name"] == name), {})
        if context not in (command.get("contexts") or (0, 1, 2)):
            raise NotOffered(f"/{name} is not offered in a channel of type {kind}")
        options = [{"name": "text", "type": 3, "value": value}] if value else []
        data = {"id": self._command_id(name), "name": name, "type": 1, "options": options}
        return self._interact(channel, user, 2, data)

    def press(self, channel: str, user: str, message_id: str, custom_id: str) -> str:
        """`user` presses the button `custom_id` under message `message_id`."""
        with self._lock:
            message = next(m for m in self._messages.get(channel, []) if m["id"] == message_id)
        data = {"custom_id": custom_id, "component_type": 2}
        return self._interact(channel, user, 3, data, message=message)

    def rate_limit(self, what: str = "create", times: int = 1, retry_after: float = 1.0) -> None:
        """The next `times` message creations ("create"), edits ("edit"), interaction
        callbacks ("callback") or edits of an interaction's answer ("webhook") are answered
        429 with `retry_after`."""
        with self._lock:
            self._faults.append(_Fault(what, times, retry_after))

    def dispatch_raw(self, event: str, data: Any) -> None:
        """Any event, as given (a malformed one, say), to every connected session."""
        self._dispatch(event, data, 0)

    def drop_connections(self) -> None:
        """Close every gateway websocket (as Discord does now and then): the client resumes."""
        with self._lock:
            sockets = [s.ws for s in self._sessions.values() if s.ws is not None]
        for ws in sockets:
            self._call(ws.close(code=4000))

    # What a test reads.

    def messages(self, channel: str) -> list[JSONDict]:
        with self._lock:
            return [dict(m) for m in self._messages.get(channel, [])]

    def message(self, channel: str, message_id: str) -> JSONDict:
        return next(m for m in self.messages(channel) if m["id"] == message_id)

    def sent(self, channel: str) -> list[JSONDict]:
        """The bot's messages in `channel`, as they read now (after edits)."""
        return [m for m in self.messages(channel) if m["author"]["id"] == BOT_ID]

    def responses(self, interaction: str) -> list[JSONDict]:
        """Every callback to the interaction, with the time it came (`at`, monotonic)."""
        with self._lock:
            return list(self._interactions[interaction].responses)

    def token_of(self, interaction: str) -> str:
        with self._lock:
            return self._interactions[interaction].token

    def original(self, interaction: str) -> str | None:
        """The id of the message an interaction's response shows (None: "thinking…" still)."""
        with self._lock:
            return self._interactions[interaction].original

    def ephemeral(self, interaction: str) -> list[str]:
        """What only the interaction's user was shown."""
        with self._lock:
            return [m["content"] for m in self._interactions[interaction].ephemeral]

    def connected(self) -> bool:
        with self._lock:
            return any(s.ws is not None and not s.ws.closed for s in self._sessions.values())

    def wait(self, predicate: Any, timeout: float = 30.0) -> Any:
        """The first truthy value of `predicate()`, checked whenever the world changes."""
        deadline = time.monotonic() + timeout
        while not (found := predicate()):  # called unlocked: it may read the world
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError("the fake Discord never got there")
            with self._changed:
                self._changed.wait(min(left, 0.2))
        return found

    # Inside: messages and interactions made by people.

    def _post_from(
        self,
        user: str,
        channel: str,
        text: str,
        *,
        reply_to: str | None = None,
        attachments: list[JSONDict] | None = None,
    ) -> JSONDict:
        with self._changed:
            message = self._message(channel, _user(user, f"u{user}"), text)
            message["attachments"] = attachments or []
            if reply_to is not None:
                quoted = next(m for m in self._messages[channel] if m["id"] == reply_to)
                message["message_reference"] = {"message_id": reply_to, "channel_id": channel}
                message["referenced_message"] = quoted
            self._changed.notify_all()
        self._dispatch("MESSAGE_CREATE", message, self._needs(channel))
        return message

    def _needs(self, channel: str) -> int:
        return DIRECT_MESSAGES if self._channels[channel]["type"] == DM else GUILD_MESSAGES

    def _message(self, channel: str, author: JSONDict, content: str) -> JSONDict:
        """A new message in `channel`, kept (the caller holds the lock)."""
        found = self._channels.get(channel)
        if found is None:
            raise _Refused(404, 10003, "Unknown Channel")
        mentions = [_user(BOT_ID, "nanomem", bot=True)] if f"<@{BOT_ID}>" in content else []
        message: JSONDict = {
            "id": self._next_id(),
            "channel_id": channel,
            "author": author,
            "content": content,
            "timestamp": _iso(time.time()),
            "edited_timestamp": None,
            "tts": False,
            "mention_everyone": False,
            "mentions": mentions,
            "mention_roles": [],
            "attachments": [],
            "embeds": [],
            "pinned": False,
            "type": 0,
            "components": [],
        }
        if "guild_id" in found:
            message["guild_id"] = found["guild_id"]
        self._messages.setdefault(channel, []).append(message)
        return message

    def _interact(
        self, channel: str, user: str, kind: int, data: JSONDict, message: JSONDict | None = None
    ) -> str:
        with self._lock:
            iid, token = self._next_id(), f"itoken-{self._next_id()}"
            pressed = message["id"] if message is not None else ""
            self._interactions[iid] = _Interaction(
                iid, token, channel, time.monotonic(), message_id=pressed
            )
            where = self._channels[channel]
        person = _user(user, f"u{user}")
        payload: JSONDict = {
            "id": iid,
            "application_id": APP_ID,
            "type": kind,
            "data": data,
            "channel_id": channel,
            "token": token,
            "version": 1,
            "channel": where,
            "locale": "en-US",
            "entitlements": [],
            "attachment_size_limit": 10 * 2**20,
            "authorizing_integration_owners": {},
        }
        if "guild_id" in where:
            payload |= {
                "guild_id": where["guild_id"],
                "member": {
                    "user": person,
                    "roles": [],
                    "joined_at": _iso(time.time()),
                    "deaf": False,
                    "mute": False,
                    "permissions": "0",
                    "flags": 0,
                },
            }
        else:
            payload["user"] = person
        if message is not None:
            payload["message"] = message
        self._dispatch("INTERACTION_CREATE", payload, 0)
        return iid

    def _command_id(self, name: str) -> str:
        with self._lock:
            return next((c["id"] for c in self.commands if c["name"] == name), "0")

    def _next_id(self) -> str:
        return str(next(self._ids))

    # The gateway websocket.

    def _dispatch(self, event: str, data: Any, intent: int) -> None:
        """Sent to every identified session whose intents take it (kept for a RESUME); with
        no session connected, it is lost, as on Discord."""
        with self._lock:
            sessions = list(self._sessions.values())
        for session in sessions:
            if intent and not session.intents & intent:
                continue
            shown = data
            if event == "MESSAGE_CREATE" and not session.intents & MESSAGE_CONTENT:
                addressed = data.get("mentions") or "guild_id" not in data
                shown = data if addressed else data | {"content": "", "attachments": []}
            self._call(self._send_event(session, event, shown))

    def _call(self, coro: Any) -> None:
        """Run `coro` on the server's loop (every public method is called from other threads)."""
        assert self._loop is not None
        asyncio.run_coroutine_threadsafe(coro, self._loop).result(10)

    async def _send_event(self, session: _Session, event: str, data: Any) -> None:
        frame = {"op": 0, "t": event, "s": len(session.events) + 1, "d": data}
        session.events.append(frame)
        if session.ws is not None and not session.ws.closed:
            with contextlib.suppress(ConnectionError):  # gone: a RESUME replays it
                await session.ws.send_str(json.dumps(frame))

    async def _gateway(self, request: web.Request) -> web.StreamResponse:
        ws = web.WebSocketResponse(heartbeat=None)
        await ws.prepare(request)
        await ws.send_json(
            {"op": 10, "d": {"heartbeat_interval": _HEARTBEAT_MS}, "s": None, "t": None}
        )
        session: _Session | None = None
        async for frame in ws:
            if frame.type != WSMsgType.TEXT:
                break
            payload = json.loads(frame.data)
            op, data = payload.get("op"), payload.get("d")
            if op == 1:  # HEARTBEAT
                await ws.send_json({"op": 11, "d": None, "s": None, "t": None})
            elif op == 2:  # IDENTIFY
                if data.get("token") not in (self.token, f"Bot {self.token}"):
                    await ws.close(code=4004, message=b"Authentication failed.")
                    break
                if int(data.get("intents", 0)) & MESSAGE_CONTENT and not self.content_intent:
                    await ws.close(code=4014, message=b"Disallowed intent(s).")
                    break
                session = await self._identify(ws, data)
            elif op == 6:  # RESUME
                session = await self._resume(ws, data)
                if session is None:
                    break
        if session is not None and session.ws is ws:
            session.ws = None
        return ws

    async def _identify(self, ws: web.WebSocketResponse, data: JSONDict) -> _Session:
        with self._changed:
            self.identifies.append(data)
            session = _Session(f"session-{self._next_id()}", int(data.get("intents", 0)))
            session.ws = ws
            self._sessions[session.id] = session
            self._changed.notify_all()
        ready = {
            "v": 10,
            "user": self.bot,
            "session_id": session.id,
            "guilds": [{"id": GUILD_ID, "unavailable": True}],
            "resume_gateway_url": f"ws://127.0.0.1:{self.port}/gateway",
            "application": {"id": APP_ID, "flags": 0},
            "private_channels": [],
            "relationships": [],
            "shard": [0, 1],
        }
        await self._send_event(session, "READY", ready)
        await self._send_event(session, "GUILD_CREATE", self._guild())
        return session

    async def _resume(self, ws: web.WebSocketResponse, data: JSONDict) -> _Session | None:
        session = self._sessions.get(str(data.get("session_id")))
        if session is None or data.get("token") not in (self.token, f"Bot {self.token}"):
            await ws.send_json({"op": 9, "d": False, "s": None, "t": None})  # invalid session
            await ws.close(code=4009)
            return None
        self.resumes += 1
        session.ws = ws
        for frame in session.events[int(data.get("seq") or 0) :]:
            await ws.send_str(json.dumps(frame))
        await self._send_event(session, "RESUMED", {})
        return session

    def _guild(self) -> JSONDict:
        with self._lock:
            channels = [c for c in self._channels.values() if c["type"] == GUILD_TEXT]
            threads = [c for c in self._channels.values() if c["type"] == PUBLIC_THREAD]
        return {
            "id": GUILD_ID,
            "name": "Test Guild",
            "owner_id": "1",
            "unavailable": False,
            "member_count": 3,
            "large": False,
            "roles": [],
            "emojis": [],
            "stickers": [],
            "features": [],
            "members": [],
            "channels": channels,
            "threads": threads,
            "voice_states": [],
            "presences": [],
            "stage_instances": [],
            "guild_scheduled_events": [],
            "soundboard_sounds": [],
            "joined_at": _iso(time.time()),
            "verification_level": 0,
            "default_message_notifications": 0,
            "explicit_content_filter": 0,
            "mfa_level": 0,
            "premium_tier": 0,
            "preferred_locale": "en-US",
            "nsfw_level": 0,
            "system_channel_flags": 0,
        }

    async def _attachment(self, request: web.Request) -> web.Response:
        data = self._files.get(request.match_info["id"])
        return web.Response(body=data) if data is not None else web.Response(status=404)

    # The REST API.

    async def _rest(self, request: web.Request) -> web.Response:
        path, method = "/" + request.match_info["path"], request.method
        try:
            body, files = await _read_body(request)
            with self._changed:
                self.requests.append((method, path, body))
                self._changed.notify_all()
            open_route = path.startswith(("/interactions/", "/webhooks/"))
            if not open_route and request.headers.get("Authorization") != f"Bot {self.token}":
                raise _Refused(401, 0, "401: Unauthorized")
            answer = await self._route(method, path, body, files, request.query)
        except _Refused as refused:
            return refused.response()
        if answer is None:
            return web.Response(status=204)
        with self._changed:
            self._changed.notify_all()
        return _json(answer)

    async def _route(
        self, method: str, path: str, body: JSONDict, files: list[JSONDict], query: Any
    ) -> Any:
        parts = path.strip("/").split("/")
        match method, parts:
            case "GET", ["gateway", "bot"]:
                return {
                    "url": f"ws://127.0.0.1:{self.port}/gateway",
                    "shards": 1,
                    "session_start_limit": {
                        "total": 1000,
                        "remaining": 999,
                        "reset_after": 0,
                        "max_concurrency": 1,
                    },
                }
            case "GET", ["users", "@me"]:
                return self.bot
            case "GET", ["applications" | "oauth2", "@me"] | ["oauth2", "applications", "@me"]:
                return {
                    "id": APP_ID,
                    "name": "nanomem",
                    "icon": None,
                    "description": "",
                    "bot_public": False,
                    "bot_require_code_grant": False,
                    "verify_key": "0" * 64,
                    "flags": 0,
                    "bot": self.bot,
                    "owner": _user("1", "owner"),
                }
            case "PUT", ["applications", app, "commands"]:
                return self._overwrite_commands(app, body)
            case "POST", ["users", "@me", "channels"]:
                with self._lock:
                    return self._channels[self._dm_channel(str(body["recipient_id"]))]
            case "GET", ["channels", channel]:
                with self._lock:
                    if channel not in self._channels:
                        raise _Refused(404, 10003, "Unknown Channel")
                    return self._channels[channel]
            case "GET", ["channels", channel, "messages"]:
                await asyncio.sleep(self.history_s)
                return self._history(channel, query)
            case "POST", ["channels", channel, "messages"]:
                self._fault("create")
                with self._lock:
                    return self._create(channel, body, files)
            case "PATCH", ["channels", channel, "messages", message]:
                self._fault("edit")
                with self._lock:
                    return self._edit(channel, message, body)
            case "POST", ["channels", channel, "typing"]:
                with self._lock:
                    self.typing.append((channel, time.monotonic()))
                return None
            case "POST", ["interactions", iid, token, "callback"]:
                self._fault("callback")
                answer = self._callback(iid, token, body, files)
                return answer if query.get("with_response") in ("1", "true") else None
            case "POST", ["webhooks", app, token]:
                with self._lock:
                    found = self._by_token(app, token)
                    return self._create(found.channel_id, body, files, webhook=True)
            case "PATCH", ["webhooks", app, token, "messages", "@original"]:
                self._fault("webhook")
                with self._lock:
                    found = self._by_token(app, token)
                    if found.original is None:
                        made = self._create(found.channel_id, body, files, webhook=True)
                        found.original = made["id"]
                        return made
                    return self._edit(found.channel_id, found.original, body)
        raise _Refused(404, 0, f"404: Not Found ({method} {path})")

    def _fault(self, what: str) -> None:
        with self._lock:
            fault = next((f for f in self._faults if f.what == what and f.times > 0), None)
            if fault is not None:
                fault.times -= 1
        if fault is not None:
            with self._lock:
                self.limited += 1
            raise _Refused(429, 0, "You are being rate limited.", fault.retry_after)

    def _overwrite_commands(self, app: str, body: Any) -> list[JSONDict]:
        if app != APP_ID or not isinstance(body, list):
            raise _Refused(400, 50035, "Invalid Form Body")
        for command in body:
            name, about = command.get("name", ""), command.get("description", "")
            if not _COMMAND_NAME.match(name) or name != name.lower() or not 1 <= len(about) <= 100:
                raise _Refused(400, 50035, f"Invalid Form Body: command {name!r}")
            contexts, installs = command.get("contexts"), command.get("integration_types")
            if contexts is not None and not set(contexts) <= {0, 1, 2}:
                raise _Refused(400, 50035, f"Invalid Form Body: contexts of {name!r}")
            if installs is not None and not set(installs) <= {0, 1}:
                raise _Refused(400, 50035, f"Invalid Form Body: integration_types of {name!r}")
        with self._lock:
            self.commands = [c | {"id": self._next_id(), "application_id": APP_ID} for c in body]
            return self.commands

    def _history(self, channel: str, query: Any) -> list[JSONDict]:
        """Newest first, as Discord answers; `after` and `limit` (1–100) honoured."""
        after, limit = int(query.get("after", 0)), int(query.get("limit", 50))
        if not 1 <= limit <= 100:
            raise _Refused(400, 50035, "Invalid Form Body: limit")
        with self._lock:
            found = [m for m in self._messages.get(channel, []) if int(m["id"]) > after]
        found = found[:limit] if after else found[-limit:]
        return [{k: v for k, v in m.items() if k != "guild_id"} for m in reversed(found)]

    def _create(
        self, channel: str, body: JSONDict, files: list[JSONDict], *, webhook: bool = False
    ) -> JSONDict:
        """A message from the bot (the caller holds the lock)."""
        content = str(body.get("content") or "")
        if len(content) > TEXT_LIMIT:
            raise _Refused(
                400, 50035, "Invalid Form Body: content: Must be 2000 or fewer in length."
            )
        if not content and not files and not body.get("components"):
            raise _Refused(400, 50006, "Cannot send an empty message")
        nonce = str(body.get("nonce") or "")
        if nonce and body.get("enforce_nonce") and (channel, nonce) in self._nonces:
            return self._nonces[(channel, nonce)]  # a repeat: the first one, not a second post
        message = self._message(channel, self.bot, content)
        message |= {
            "components": body.get("components") or [],
            "nonce": nonce or None,
            "allowed_mentions": body.get("allowed_mentions"),
            "flags": int(body.get("flags") or 0),
            "webhook": webhook,
            "mention_everyone": _pings_everyone(content, body.get("allowed_mentions")),
            "attachments": [self._keep_file(f["filename"], f["data"]) for f in files],
        }
        if body.get("message_reference"):
            message["message_reference"] = body["message_reference"]
        if nonce:
            self._nonces[(channel, nonce)] = message
        return message

    def _edit(self, channel: str, message_id: str, body: JSONDict) -> JSONDict:
        message = next((m for m in self._messages.get(channel, []) if m["id"] == message_id), None)
        if message is None or message["author"]["id"] != BOT_ID:
            raise _Refused(404, 10008, "Unknown Message")
        if "content" in body:
            if len(str(body["content"] or "")) > TEXT_LIMIT:
                raise _Refused(400, 50035, "Invalid Form Body: content")
            message["content"] = str(body["content"] or "")
            message["mention_everyone"] = _pings_everyone(
                message["content"], body.get("allowed_mentions")
            )
        if "components" in body:
            message["components"] = body["components"] or []
        message["edited_timestamp"] = _iso(time.time())
        message.setdefault("edits", []).append(time.monotonic())
        return message

    def _callback(self, iid: str, token: str, body: JSONDict, files: list[JSONDict]) -> JSONDict:
        with self._lock:
            found = self._interactions.get(iid)
            if found is None or found.token != token:
                raise _Refused(404, 10062, "Unknown interaction")
            if found.responses:
                raise _Refused(400, 40060, "Interaction has already been acknowledged.")
            if time.monotonic() - found.created > self.interaction_expiry_s:
                raise _Refused(404, 10062, "Unknown interaction")  # not answered within 3 s
            found.responses.append(body | {"at": time.monotonic()})
            data, kind = body.get("data") or {}, body.get("type")
            flags = int(data.get("flags") or 0)
            said: JSONDict = {
                "id": iid,
                "type": 2,
                "response_message_loading": kind == 5,
                "response_message_ephemeral": bool(flags & EPHEMERAL),
            }
            answer: JSONDict = {"interaction": said, "resource": {"type": kind}}
            if kind == 7:  # the pressed message itself changes
                self._edit(found.channel_id, found.message_id, data)
            if kind == 4:
                message = self._create(found.channel_id, data, files, webhook=True)
                said["response_message_id"] = message["id"]
                answer["resource"]["message"] = message
                if flags & EPHEMERAL:  # seen by the presser alone: not in the channel
                    self._messages[found.channel_id].remove(message)
                    found.ephemeral.append(message)
                else:
                    found.original = message["id"]
        return answer

    def _by_token(self, app: str, token: str) -> _Interaction:
        found = next((i for i in self._interactions.values() if i.token == token), None)
        if app != APP_ID or found is None or not found.responses:
            raise _Refused(404, 10015, "Unknown Webhook")
        return found


class _Refused(Exception):
    """A REST failure, answered as Discord does: JSON with `code` and `message`."""

    def __init__(self, status: int, code: int, message: str, retry_after: float = 0.0) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.retry_after = status, code, message, retry_after

    def response(self) -> web.Response:
        if self.status == 429:
            body = {"message": self.message, "retry_after": self.retry_after, "global": False}
            headers = {
                "Retry-After": str(self.retry_after),
                "Via": "1.1 google",
                "X-RateLimit-Scope": "user",
            }
            return _json(body, 429, headers)
        return _json({"message": self.message, "code": self.code}, self.status)


async def _read_body(request: web.Request) -> tuple[JSONDict, list[JSONDict]]:
    """The JSON body, or a multipart body's `payload_json` and its files."""
    if not request.can_read_body:
        return {}, []
    if request.content_type.startswith("multipart/"):
        body: JSONDict = {}
        files: list[JSONDict] = []
        async for part in await request.multipart():
            data = await part.read()  # type: ignore[union-attr]
            if part.name == "payload_json":  # type: ignore[union-attr]
                body = json.loads(data)
            else:
                files.append({"filename": part.filename, "data": bytes(data)})  # type: ignore[union-attr]
        return body, files
    text = await request.text()
    try:
        return (json.loads(text) if text.strip() else {}), []
    except ValueError:
        raise _Refused(400, 50109, "The request body contains invalid JSON.") from None


def _json(value: Any, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    """JSON as Discord sends it: discord.py reads a body as JSON only when its content type is
    exactly `application/json` (aiohttp's json_response adds a charset)."""
    headers = (headers or {}) | {"Content-Type": "application/json"}
    return web.Response(body=json.dumps(value).encode(), status=status, headers=headers)


def _pings_everyone(content: str, allowed: Any) -> bool:
    """Whether Discord would notify everyone: `@everyone` in the text, and allowed_mentions
    absent (everything parsed) or naming "everyone"."""
    if "@everyone" not in content and "@here" not in content:
        return False
    return allowed is None or "everyone" in (allowed.get("parse") or [])


def _user(uid: str, name: str, *, bot: bool = False) -> JSONDict:
    return {
        "id": uid,
        "username": name,
        "discriminator": "0",
        "global_name": name,
        "avatar": None,
        "bot": bot,
    }


def _iso(moment: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime(moment))

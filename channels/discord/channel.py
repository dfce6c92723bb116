"""The Discord channel: discord.py's gateway connection, our own intake (stored before
anything acknowledges it), slash commands and buttons acknowledged at receipt."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import re
import time
from collections import OrderedDict
from collections.abc import Awaitable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from loguru import logger

from channels.discord.client import NO_INTENT, TOKEN_REJECTED, Gateway, SendError, point_at
from channels.discord.delivery import NOBODY, Asked, Delivery
from channels.discord.incoming import (
    Incoming,
    as_payload,
    fair_press,
    from_payload,
    is_allowed,
    read_interaction,
    read_message,
    sender_of,
    slash_commands,
)
from nanomem.agent import (
    BaseChannel,
    Capabilities,
    ChannelDown,
    Command,
    InboundMessage,
    Mention,
    MessageBus,
    OutboundMessage,
    Pending,
    Received,
    Strangers,
    addressed,
    hand_in_each,
    left_over,
    prepared,
    receive_until_stored,
    too_big,
    vouched_again,
)
from nanomem.audience import Sender
from nanomem.config import ConfigError, DiscordSettings
from nanomem.log import register_secrets
from nanomem.text.discord_markdown import discord_length
from nanomem.text.masking import shown_url
from nanomem.text.plural import plural

if TYPE_CHECKING:
    from nanomem.app import App

LAST = "discord.last"  # the inbox's record: each channel's newest stored message id
CHANNELS_KEPT = 200  # channels whose last stored message is remembered (for the catch-up)
CATCH_UP_CHANNELS = 50  # at start, the most recent channels looked at for what came meanwhile
CATCH_UP_MESSAGES = 100  # and at most this many messages of each (one page of history)
# Gateway events waiting for the intake. Past this a flood's events are dropped: discord.py
# reads the socket whatever its handlers do (each event its own task), so there is no pushing
# back, and Discord re-sends nothing; what a dropped message said is read back from its
# channel's history (as at a new session) once the intake has caught up.
EVENTS_KEPT = 1000
NO_TOKEN = "discord.token is not set: create a bot in Discord's Developer Portal, then set it"
REFUSED = "Only the people this bot serves can use it."
NOT_YOURS = "Only the person who was asked can answer this."
NO_DOWNLOAD = "I could not download that file; please send it again."
UNSUPPORTED = "I can read text and files, not this kind of message."
DEFERRED, UPDATED, ANSWERED, EPHEMERAL = 5, 7, 4, 64  # interaction callback types, a flag


class DiscordChannel(BaseChannel):
    """Discord's gateway does not redeliver what came while we were away, and nothing there is
    acknowledged: each message is stored at receipt, with the channel's newest stored message
    id, and at each new session the channels' history since then is read (bounded)."""

    name = "discord"

    def __init__(
        self,
        settings: DiscordSettings,
        *,
        workspace: Path,
        commands: list[Command],
        stream_every_s: float = 1.2,
        typing_delay_s: float = 1.0,
        events_kept: int = EVENTS_KEPT,
    ) -> None:
        token = settings.token.get_secret_value() if settings.token else ""
        if not token:
            raise ConfigError(NO_TOKEN)
        register_secrets([token])
        self.settings, self.workspace, self._token = settings, workspace, token
        self._commands = commands
        self.stream_every_s, self.typing_delay_s = stream_every_s, typing_delay_s
        self.capabilities = Capabilities(
            streams=settings.stream or settings.stream_groups,
            edits=True,
            buttons=True,
            files=True,
            max_chars=2000,  # Discord's limit, of the rendered content
            measure=discord_length,
            markup="markdown",  # rendered as Discord's Markdown (nanomem/text/discord_markdown.py)
            pushes=True,
            reaches_owner=settings.owner is not None,
            turns=True,
        )
        self._bus: MessageBus | None = None
        self._client: Gateway | None = None
        self.delivery: Delivery | None = None
        self._events: asyncio.Queue[tuple[str, dict[str, Any]]] = asyncio.Queue(events_kept)
        # Since events were dropped: each channel's id just before its first dropped message
        # (None: a READY was dropped, every channel is read again).
        self._missed: dict[str, str] | None = {}
        self._overflowed = False
        self._tasks: list[asyncio.Task[None]] = []
        self._pressing: set[asyncio.Task[None]] = set()  # interactions being taken
        self._last: OrderedDict[str, str] = OrderedDict()  # channel → newest stored message id
        self._bot_id = ""
        self._mention: Mention | None = None  # <@bot id>, once signed in
        self._our_commands = {c.name for c in commands}
        self._owner_dm: str | None = None
        self._strangers = Strangers("Discord", "discord.allow_from")
        self._replayed = False

    @classmethod
    def from_app(cls, app: App) -> DiscordChannel:
        return cls(app.settings.discord, workspace=app.workspace, commands=app.loop.commands.all())

    def listens(self, server: str) -> str:
        return f"the Discord gateway, through {shown_url(self.settings.api_base)}"

    # Lifecycle.

    async def start(self, bus: MessageBus) -> None:
        self._bus = bus
        if not self.settings.allow_from and self.settings.owner is None:
            logger.warning(
                "discord.allow_from is empty and discord.owner is not set: every message is "
                "refused, and the log names each refused user id to add"
            )
        point_at(self.settings.api_base)
        client = self._client = await self._signed_in()
        self.delivery = Delivery(
            client,
            workspace=self.workspace,
            owner=self.settings.owner,
            stream_dms=self.settings.stream,
            stream_guilds=self.settings.stream_groups,
            stream_every_s=self.stream_every_s,
            max_file_mb=self.settings.max_file_mb,
            typing_delay_s=self.typing_delay_s,
        )
        await self.delivery.load(bus)
        await self._register_commands(client)
        await self._open_owner_dm(client)
        if (stored := await bus.position(LAST)) is not None:
            self._last = OrderedDict(json.loads(stored))
        if not self._replayed:  # what an earlier run left goes first, in arrival order
            await self._replay()
            self._replayed = True
        self._tasks = [
            asyncio.create_task(self._intake(), name="discord-intake"),
            asyncio.create_task(self._keep_connected(), name="discord-gateway"),
        ]
        logger.info("discord: connected as {} ({})", client.user, self._bot_id)

    async def _signed_in(self) -> Gateway:
        client = Gateway(self._arrived)
        try:
            self._bot_id = await client.sign_in(self._token)
            self._mention = Mention(re.compile(rf"<@!?{self._bot_id}>"))
        except BaseException:
            await client.close()
            raise
        return client

    async def _keep_connected(self) -> None:
        """discord.py resumes and reconnects by itself, but an event it cannot read ends its
        connection for good (and closes the client): a new client connects, after a pause
        that doubles while it keeps failing. A rejected token or a missing intent stays the
        problem /health shows until the settings change."""
        delay = 1.0
        while True:
            assert self._client is not None and self.delivery is not None
            await self._client.run_connection()
            if self._client.problem in (TOKEN_REJECTED, NO_INTENT):
                return
            await asyncio.sleep(delay)
            delay = min(delay * 2, 300.0)
            try:
                client = await self._signed_in()
            except ChannelDown as exc:
                self._client.problem = str(exc)
                continue
            with contextlib.suppress(Exception):
                await self._client.close()
            self._client = self.delivery.client = client
            logger.info("discord: connected again")

    async def _register_commands(self, client: Gateway) -> None:
        """Our commands as slash commands (one bulk overwrite: Discord keeps the list)."""
        path = "/applications/{app}/commands"
        try:
            await client.call("PUT", path, slash_commands(self._commands), app=client.app_id)
        except SendError as exc:
            logger.warning("discord: could not register the slash commands: {}", exc)

    async def _open_owner_dm(self, client: Gateway) -> None:
        """The owner's DM channel, where Dream reviews and notices go."""
        if self.settings.owner is None or self._owner_dm is not None:
            return
        try:
            found = await client.call(
                "POST", "/users/@me/channels", {"recipient_id": self.settings.owner}
            )
            self._owner_dm = str(found["id"])
        except (SendError, KeyError, TypeError) as exc:
            logger.warning("discord: could not open a DM with the owner: {}", exc)

    async def stop_receiving(self) -> None:
        """Take nothing more in: what came and was not stored is read again from the history
        at the next start."""
        taking = [*self._tasks[:1], *self._pressing]
        for task in taking:
            task.cancel()
        await asyncio.gather(*taking, return_exceptions=True)

    async def stop(self) -> None:
        await self.stop_receiving()
        if self.delivery is not None:
            await self.delivery.close()
        if self._client is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._client.close(), 10.0)
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def problem(self) -> str | None:
        return self._client.problem if self._client is not None else None

    def owner_chat(self) -> str | None:
        return self._owner_dm

    def admits(self, chat: str, sender: str) -> bool:
        return is_allowed(self.settings.allow_from, sender, self.settings.owner)

    # Intake: messages in one task, in the order Discord sent them; each interaction at once
    # in its own, never behind the READY catch-up's history reads (Discord allows it 3 s).

    def _arrived(self, event: str, data: dict[str, Any]) -> None:
        if event != "INTERACTION_CREATE":
            try:
                self._events.put_nowait((event, data))
            except asyncio.QueueFull:
                self._dropped(event, data)
            return
        task = asyncio.create_task(self._interaction(data), name="discord-interaction")
        self._pressing.add(task)
        task.add_done_callback(self._pressing.discard)

    def _dropped(self, event: str, data: dict[str, Any]) -> None:
        """An event past EVENTS_KEPT: logged once while they keep coming, and noted where
        its message was, for the catch-up."""
        if not self._overflowed:
            logger.warning(
                "discord: more than {} events wait to be read: later ones are read back from "
                "their channels' history once these are ({} messages in {} channels at most)",
                self._events.maxsize,
                CATCH_UP_MESSAGES,
                CATCH_UP_CHANNELS,
            )
        self._overflowed = True
        chat, message = str(data.get("channel_id", "")), str(data.get("id", ""))
        if event == "READY":
            self._missed = None
        elif self._missed is not None and chat.isdigit() and message.isdigit():
            room = chat in self._missed or len(self._missed) < CATCH_UP_CHANNELS
            if room:  # the first one dropped there: the page starts before it
                self._missed.setdefault(chat, str(int(message) - 1))

    async def _intake(self) -> None:
        while True:
            if self._overflowed and self._events.empty():  # what was dropped, read back
                missed, self._missed, self._overflowed = self._missed, {}, False
                await self._safely("what a flood dropped", self._catch_up(missed))
            event, data = await self._events.get()
            await self._safely(f"a {event} event", self._take_event(event, data))

    async def _take_event(self, event: str, data: dict[str, Any]) -> None:
        if event == "READY":
            await self._catch_up()
        else:
            await self._take_message(read_message(data, self._bot_id))

    async def _safely(self, what: str, taking: Awaitable[None]) -> None:
        try:
            await taking
        except asyncio.CancelledError:
            raise
        except Exception:
            logger.exception("discord: could not take {}", what)

    async def _interaction(self, data: dict[str, Any]) -> None:
        try:
            await self._take_interaction(read_interaction(data))
        except Exception:
            logger.exception("discord: could not take an interaction")

    async def _take_message(self, found: Incoming | None) -> None:
        if found is None or not self._admitted(found):
            return
        if int(found.message_id) <= int(self._last.get(found.chat, "0")):
            return  # stored already (a resumed session, or the catch-up read it)
        if found.guild and self.settings.group_policy == "mention" and not self._for_us(found):
            return
        seq = await self._store(found, advance=True)
        await self._publish(found, seq, sender_of(found, self.settings.owner))

    def _for_us(self, found: Incoming) -> bool:
        """In a server channel that wants a mention: a mention or reply (Discord's facts), or
        one of our commands typed as a message."""
        return addressed(
            found.text,
            mention=self._mention,
            replied_to_us=found.addressed,
            commands=self._our_commands,
        )

    async def _take_interaction(self, found: Incoming | None) -> None:
        """Stored, then acknowledged at once (Discord allows 3 s), never behind a chat's turn;
        a press from anyone but who was asked is refused in a note only they see."""
        if found is None:
            return
        if not self._admitted(found):
            await self._callback(found, ANSWERED, {"content": REFUSED, "flags": EPHEMERAL})
            return
        assert self.delivery is not None
        fair = fair_press(found) and self.delivery.may_press(found.message_id, found.user)
        if found.kind == "press" and not fair:
            logger.warning("discord: refused a press by user {} in {}", found.user, found.chat)
            await self._callback(found, ANSWERED, {"content": NOT_YOURS, "flags": EPHEMERAL})
            return
        found = replace(found, at=time.monotonic())
        seq = await self._store(found, advance=False)
        if found.kind == "press":  # its buttons go at once, so nobody presses them twice
            await self._callback(found, UPDATED, {"components": []})
        else:  # "thinking…" until the answer replaces it, after a crash too
            if seq is not None:
                await self.delivery.deferring(InboundMessage.inbox_id(seq), found.token)
            await self._callback(found, DEFERRED, None)
        await self._publish(found, seq, sender_of(found, self.settings.owner))

    async def _callback(self, found: Incoming, kind: int, data: dict[str, Any] | None) -> None:
        assert self._client is not None
        body: dict[str, Any] = {"type": kind}
        if data is not None:
            body["data"] = data | {"allowed_mentions": NOBODY}
        path = "/interactions/{interaction}/{token}/callback"
        try:
            await self._client.call(
                "POST", path, body, interaction=found.interaction, token=found.token
            )
        except SendError as exc:
            logger.warning("discord: could not answer an interaction in {}: {}", found.chat, exc)

    def _admitted(self, found: Incoming) -> bool:
        """The owner and discord.allow_from; strangers are refused silently, logged once."""
        if is_allowed(self.settings.allow_from, found.user, self.settings.owner):
            return True
        self._strangers.refuse(found.user, found.name)
        return False

    async def _store(self, found: Incoming, *, advance: bool) -> int | None:
        """Its inbox row, with the channel's newest stored message id when `advance` (an
        interaction, taken beside the message intake, leaves the positions to it); a full disk
        is waited out and tried again, never a reason to drop what nothing else keeps."""
        assert self._bus is not None
        item = (found.chat, as_payload(found), sender_of(found, self.settings.owner))
        what = f"a message from {found.chat}"
        if not advance:
            (seq,) = await receive_until_stored(self._bus, self.name, [item], what)
            return seq
        last = OrderedDict(self._last)
        last[found.chat] = found.message_id
        last.move_to_end(found.chat)
        while len(last) > CHANNELS_KEPT:
            last.popitem(last=False)
        (seq,) = await receive_until_stored(
            self._bus, self.name, [item], what, (LAST, json.dumps(last))
        )
        self._last = last
        return seq

    async def _catch_up(self, dropped: dict[str, str] | None = None) -> None:
        """What came while we were away (or was dropped in a flood: `dropped`), from the
        history of the channels we last heard from (bounded: the most recent channels, one
        page each), stored and answered in order."""
        assert self._client is not None
        if self._owner_dm is None:
            await self._open_owner_dm(self._client)
        recent = dict(list(self._last.items())[-CATCH_UP_CHANNELS:])
        chats = recent if dropped is None else {c: self._last.get(c, a) for c, a in dropped.items()}
        for chat, after in chats.items():
            try:
                about = await self._client.call("GET", "/channels/{c}", c=chat)
                path = "/channels/{c}/messages?after={after}&limit={limit}"
                page = await self._client.call(
                    "GET", path, c=chat, after=after, limit=CATCH_UP_MESSAGES
                )
            except SendError as exc:
                logger.warning("discord: could not read what came meanwhile in {}: {}", chat, exc)
                continue
            page = [m for m in page if isinstance(m, dict)] if isinstance(page, list) else []
            guild = isinstance(about, dict) and about.get("guild_id") is not None
            read = [read_message(m, self._bot_id, guild) for m in page]
            missed = sorted((m for m in read if m is not None), key=lambda m: int(m.message_id))
            if missed:
                logger.info(
                    "discord: {} came in {} meanwhile", plural(len(missed), "message"), chat
                )
            for message in missed:
                await self._take_message(message)
            await self._seen_up_to(chat, page)

    async def _seen_up_to(self, chat: str, page: list[dict[str, Any]]) -> None:
        """Past what the catch-up read and left (the bot's own, or not addressed to it): the
        next one starts after it, not at the same page again."""
        assert self._bus is not None
        ids = [int(m["id"]) for m in page if str(m.get("id", "")).isdigit()]
        if not ids or max(ids) <= int(self._last.get(chat, "0")):
            return
        last = OrderedDict(self._last)
        last[chat] = str(max(ids))
        await receive_until_stored(self._bus, self.name, [], "a position", (LAST, json.dumps(last)))
        self._last = last
        self._last = last

    async def _publish(
        self,
        found: Incoming,
        seq: int | None,
        sender: Sender,
        *,
        replayed: bool = False,
        retry: bool = False,
    ) -> None:
        assert self._bus is not None
        text = found.text
        if found.guild and found.kind == "message" and self._mention is not None:
            text = self._mention.stripped(text)
        prepare = functools.partial(self._prepare, found, retry)
        inbound = InboundMessage(self.name, found.chat, text, sender, (), found.kind == "press")
        inbound = replace(inbound, prepare=prepare, seq=seq, replayed=replayed)
        if seq is not None:  # the same id whenever it is replayed
            inbound = replace(inbound, id=InboundMessage.inbox_id(seq))
        await self._bus.publish_inbound(inbound)

    async def _replay(self) -> None:
        """Messages an earlier run stored but did not answer, handed in again in order."""
        assert self._bus is not None
        hand_in = functools.partial(self._hand_in, retry=False)
        left = await left_over(self._bus, self.name)
        await hand_in_each(self._bus, self.name, left, hand_in, _stored_text)

    async def readmit(self, pending: Pending) -> bool:
        if self._client is None or self._bus is None:
            return False
        await self._hand_in(pending, retry=True)
        return True

    async def _hand_in(self, pending: Pending, *, retry: bool) -> None:
        assert self._bus is not None
        found = from_payload(pending.payload)
        allowed = is_allowed(self.settings.allow_from, found.user, self.settings.owner)
        derived = sender_of(found, self.settings.owner) if allowed else None
        if (sender := await vouched_again(self._bus, pending, derived)) is None:
            return  # no longer allowed: forgotten
        await self._publish(found, pending.seq, sender, replayed=True, retry=retry)

    # In the chat's order, just before the turn.

    async def _prepare(
        self, found: Incoming, retry: bool, msg: InboundMessage
    ) -> InboundMessage | None:
        assert self._bus is not None
        return await prepared(self._bus, msg, self._inbound(found, retry, msg))

    async def _inbound(
        self, found: Incoming, retry: bool, msg: InboundMessage
    ) -> InboundMessage | str | None:
        assert self._bus is not None and self._client is not None and self.delivery is not None
        limit = self.settings.max_file_mb * 2**20
        sizes = [a.size for a in found.attachments]
        if (
            refusal := too_big(sizes, self.settings.max_file_mb, "discord.max_file_mb")
        ) is not None:
            return refusal
        files = Received(self.workspace, f"{self.name}:{found.chat}", room=found.guild)
        for number, item in enumerate(found.attachments):
            try:
                data = await self._client.download(item.url, limit)
            except SendError as exc:
                logger.warning(
                    "discord: downloading {} in {} failed: {}", item.name, found.chat, exc
                )
                return NO_DOWNLOAD
            name = f"{time.strftime('%Y-%m-%d')}-{found.message_id}-{number}-{_safe(item.name)}"
            await files.save(name, data, "file", item.name)
        ready = files.into(msg, msg.content)
        if not ready.content:
            if found.guild:  # a sticker, say: in a guild nobody asked us
                await self._bus.forget(msg.seq)
                return None
            return UNSUPPORTED
        token = found.token if not msg.replayed else ""  # a replayed one's token is stale
        asked = Asked(found.message_id, found.user, found.guild, token, found.at)
        self.delivery.accepted(msg.id, asked)
        return ready

    # Outbound: one chat at a time, in order, from the core.

    async def send(self, msg: OutboundMessage) -> None:
        if self.delivery is None:
            from nanomem.agent import DeliveryLater

            raise DeliveryLater("the Discord channel is not running")
        await self.delivery.send(msg)


def _stored_text(payload: dict[str, Any]) -> str:
    """A stored message's words, for `nanomem inbox`, when it cannot be read otherwise."""
    text = payload.get("text")
    return text if isinstance(text, str) else ""


def _safe(name: str) -> str:
    """A file name to save under: its last part, in plain characters."""
    kept = "".join(c if c.isalnum() or c in "._-" else "_" for c in Path(name).name)
    return kept.strip("._")[:80] or "file"

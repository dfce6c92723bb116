"""The Matrix channel: a sync loop whose every batch is stored in the inbox with its sync token
before the next sync confirms it, invites taken only from the owner and allow_from, and
replies as HTML with a plain body (channels/matrix/delivery.py). With matrix.e2e and the e2e
extra, encrypted rooms too: nio decrypts each sync, and what it decrypted is taken like any
other message."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import secrets
import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from loguru import logger
from nio import AsyncClient, SyncResponse

from channels.matrix import client as hs
from channels.matrix.delivery import Delivery
from channels.matrix.events import (
    BANG,
    ENCRYPTED,
    FILE_TYPES,
    MEMBER,
    SYNC_FILTER,
    Said,
    inviter,
    names_us,
    said,
    without_mention,
)
from nanomem.agent import (
    BaseChannel,
    Capabilities,
    ChannelDown,
    Command,
    InboundMessage,
    MessageBus,
    OutboundMessage,
    Pending,
    Strangers,
    Text,
    prepared,
    receive_until_stored,
    save_media,
)
from nanomem.audience import Sender
from nanomem.config import ConfigError, MatrixSettings
from nanomem.log import register_secrets
from nanomem.text.masking import shown_url
from nanomem.text.plural import plural

if TYPE_CHECKING:
    from nanomem.app import App

SINCE = "matrix.since"  # the inbox's record of the sync token that confirms what it holds
DEVICE = "matrix.device"  # the device a password login made, kept for the next login
OWNER_ROOM = "matrix.owner_room"  # the owner's DM, where notices for the owner go
TXN_MARK = "matrix.txn_mark"  # this inbox's mark in every transaction id
# When this home first ran the channel (ms): what rooms said before is history, not for us,
# however a sync brings it (a room the homeserver shows as newly joined comes with its past).
BORN = "matrix.born"
NO_LOGIN = (
    "matrix.homeserver, matrix.user_id and matrix.access_token (or matrix.password) must be "
    "set: see docs/matrix.md"
)
NO_E2E = (
    "matrix.e2e is set, but the e2e extra is not installed (pip install 'nanomem[e2e]'): "
    "encrypted rooms are not read, each gets one note saying so"
)
ENCRYPTED_ROOM = (
    "This room is end-to-end encrypted and I cannot read encrypted messages here; talk to me "
    "in a room without encryption."
)
UNDECRYPTABLE = (
    "I could not decrypt a message here: its room key has not reached me. I have asked your "
    "devices for it; if this stays, please send the message again."
)
KEYS_REFUSED = (
    "the homeserver refused device {device}'s keys ({error}): its keys in the crypto store "
    "(<home>/matrix/store) are not the ones it has. Was the store lost, or is the access token "
    "another client's? Log the bot in as a new device (a new access token, or matrix.password "
    "with matrix.device_id unset); encrypted rooms cannot be read until then"
)
STORE = "matrix/store"  # in the home: the crypto store, one SQLite file per user and device
TOO_BIG = "That file is {size:.1f} MB; I accept up to {limit} MB (matrix.max_file_mb)."
NO_DOWNLOAD = "I could not download that file; please send it again."
STEP_S = 10.0


class MatrixChannel(BaseChannel):
    name = "matrix"

    def __init__(
        self,
        settings: MatrixSettings,
        *,
        workspace: Path,
        commands: list[Command],
        sync_timeout_ms: int = 30_000,
        stream_every_s: float = 1.5,
        store: Path | None = None,
    ) -> None:
        token = settings.access_token.get_secret_value() if settings.access_token else ""
        password = settings.password.get_secret_value() if settings.password else ""
        if not (settings.homeserver and settings.user_id and (token or password)):
            raise ConfigError(NO_LOGIN)
        register_secrets([s for s in (token, password) if s])
        self.settings, self.workspace = settings, workspace
        self._token, self._password = token, password
        self.command_names = {c.name for c in commands}
        self.sync_timeout_ms = sync_timeout_ms
        self.client: AsyncClient | None = None
        self._bus: MessageBus | None = None
        self._since: str | None = None
        self._syncing: asyncio.Task[None] | None = None
        self._problem: str | None = None  # a sync failing: cleared by the next that works
        self._lasting: str | None = None  # what holds for the whole run (encryption's state)
        self._display = ""
        self._sizes: dict[str, int] = {}  # room → joined members, until its membership changes
        self._groups: dict[str, bool] = {}  # room → a group, as its last message was taken
        self._strangers = Strangers("Matrix", "matrix.allow_from")
        self._told_encrypted: set[str] = set()
        # matrix.e2e with the extra installed: nio decrypts and encrypts (its store in the home).
        self.e2e = settings.e2e and hs.crypto_installed()
        self.store = store
        self._replayed = False
        self._born = 0
        self.delivery = Delivery(self, stream_every_s=stream_every_s)
        self.capabilities = Capabilities(
            streams=settings.stream or settings.stream_groups,
            edits=True,
            files=True,
            # Renders its HTML and splits a reply itself (max_chars 0: the core passes it
            # whole), by the event's bytes: each part's transaction id is its number.
            markup="html",
            measure=self.delivery.measure,
            pushes=True,
            reaches_owner=settings.owner is not None,
            turns=True,
        )

    @classmethod
    def from_app(cls, app: App) -> MatrixChannel:
        return cls(
            app.settings.matrix,
            workspace=app.workspace,
            commands=app.loop.commands.all(),
            store=app.home.root / STORE,
        )

    def listens(self, server: str) -> str:
        return f"syncing with {shown_url(self.settings.homeserver)} as {self.settings.user_id}"

    # Lifecycle.

    async def start(self, bus: MessageBus) -> None:
        self._bus = bus
        if not self.settings.allow_from and self.settings.owner is None:
            logger.warning(
                "matrix.allow_from is empty and matrix.owner is not set: every message and "
                "invite is refused, and the log names each refused user id to add"
            )
        if self.settings.e2e and not self.e2e:
            self._lasting = NO_E2E
            logger.warning("matrix: {}", NO_E2E)
        logging.getLogger("nio").setLevel(logging.WARNING)  # it logs every event at INFO
        self.client = await self._connected()
        self._display = await hs.display_name(self.client, self.settings.user_id)
        self.delivery.owner_room = await bus.position(OWNER_ROOM)
        if (mark := await bus.position(TXN_MARK)) is None:  # this home's first start
            mark = secrets.token_hex(4)
            await bus.receive(self.name, [], (BORN, str(int(time.time() * 1000))))
            await bus.receive(self.name, [], (TXN_MARK, mark))
        self.delivery.home = mark
        self._born = int(await bus.position(BORN) or 0)
        if not self._replayed:  # what an earlier run left goes first, in arrival order
            await self._replay()
            self._replayed = True
        self._syncing = asyncio.create_task(self._sync_forever(), name="matrix-sync")
        logger.info("matrix: running as {}", self.settings.user_id)

    async def _connected(self) -> AsyncClient:
        """A client logged in as the bot; ChannelDown when the homeserver cannot be used."""
        assert self._bus is not None
        s = self.settings
        device = s.device_id or await self._bus.position(DEVICE) or ""
        store = self.store if self.e2e and self.store is not None else None
        client = hs.client_for(s.homeserver, s.user_id, device, store)
        try:
            if self._token:
                client.access_token = self._token
                user, device = await asyncio.wait_for(hs.whoami(client), STEP_S)
                if user != s.user_id:
                    raise ConfigError(f"matrix.access_token belongs to {user}, not {s.user_id}")
                if store is not None:  # the token's device: its keys are in its store
                    hs.restored(client, user, device, self._token)
            else:
                token, device = await asyncio.wait_for(
                    hs.login(client, self._password, device), STEP_S
                )
                register_secrets([token])
                await self._bus.receive(self.name, [], (DEVICE, device))
            client.user_id, client.device_id = s.user_id, device
            if store is not None:  # others can encrypt for this device from now on
                await self._keys_up(client, device)
        except (hs.MatrixError, OSError, TimeoutError) as exc:
            await client.close()
            raise ChannelDown(f"matrix: the homeserver refused the login: {exc}") from None
        except BaseException:
            await client.close()
            raise
        return client

    async def _keys_up(self, client: AsyncClient, device: str) -> None:
        """The device's keys uploaded. Refused, the store is not this device's (lost, or the
        token is another client's): plain rooms still work, and the fix is said."""
        try:
            await asyncio.wait_for(hs.keys_kept(client), STEP_S)
        except hs.MatrixError as exc:
            self._lasting = KEYS_REFUSED.format(device=device, error=exc)
            logger.error("matrix: {}", self._lasting)
            return
        logger.info("matrix: end-to-end encryption on, device {}", device)

    async def stop_receiving(self) -> None:
        if (syncing := self._syncing) is not None:
            syncing.cancel()
            await asyncio.gather(syncing, return_exceptions=True)

    async def stop(self) -> None:
        await self.stop_receiving()
        await self.delivery.close()
        if self.client is not None:
            await self.client.close()

    def problem(self) -> str | None:
        return self._problem or self._lasting

    def owner_chat(self) -> str | None:
        """The owner's DM: the last room of two where they wrote (kept across restarts)."""
        return self.delivery.owner_room

    def known_group(self, room: str) -> bool:
        """Whether a room was a group when a message from it was last taken (unknown: one)."""
        return self._groups.get(room, True)

    def allowed(self, user: str) -> bool:
        allow = self.settings.allow_from
        return user == self.settings.owner or "*" in allow or user in allow

    def admits(self, chat: str, sender: str) -> bool:
        return self.allowed(sender)

    # Inbound.

    async def _sync_forever(self) -> None:
        assert self._bus is not None and self.client is not None
        if self._since is None:
            self._since = await self._bus.position(SINCE)
        failures = 0
        while True:
            try:
                found = await hs.sync(self.client, self._since, self.sync_timeout_ms, SYNC_FILTER)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the homeserver away: tried again, said in /health
                failures += 1
                self._problem = f"matrix: sync failed: {exc}"
                logger.warning("matrix: sync failed ({}): {}", failures, exc)
                await asyncio.sleep(min(30.0, 2.0**failures))
                continue
            failures = 0
            self._problem = None
            await self._take(found)
            if self.e2e:  # the keys this sync showed a need for, before the next one
                try:
                    await hs.keys_kept(self.client)
                except Exception as exc:  # tried again after the next sync
                    logger.warning("matrix: keys not exchanged now: {}", exc)

    async def _take(self, found: SyncResponse) -> None:
        """Invites first (a joined room's messages arrive in a later sync), then this batch's
        messages, stored with the token that confirms them before anything is answered. The
        first sync of a new bot only marks where it starts: old history is not answered."""
        assert self._bus is not None
        first = self._since is None
        for room_id, info in found.rooms.invite.items():
            await self._invited(room_id, info.invite_state)
        items: list[tuple[str, dict[str, Any], Sender]] = []
        for room_id, info in found.rooms.join.items():
            events = [e.source for e in info.timeline.events if isinstance(e.source, dict)]
            if _members_changed(events, info):
                self._sizes.pop(room_id, None)  # somebody came or went: ask again
            if (joined := getattr(info.summary, "joined_member_count", None)) is not None:
                self._sizes[room_id] = joined  # the homeserver said it unasked
            events = _since_our_join(events, self.settings.user_id)
            if first:
                continue
            for event in events:
                if (kept := await self._admit(room_id, event)) is not None:
                    items.append(kept)
        what = plural(len(items), "message")
        seqs = await receive_until_stored(
            self._bus, self.name, items, what, (SINCE, found.next_batch)
        )
        self._since = found.next_batch
        if self.delivery.first_seq is None and (new := [q for q in seqs if q is not None]):
            self.delivery.first_seq = min(new)
        for (room, payload, sender), seq in zip(items, seqs, strict=True):
            await self._bus.publish_inbound(self._message(room, payload, sender, seq))

    async def _invited(self, room_id: str, invite_state: list[Any]) -> None:
        """Join a room the owner or allow_from invited us to; a stranger's invite is ignored."""
        assert self.client is not None
        who = inviter(invite_state, self.settings.user_id)
        if not self.allowed(who):
            self._refuse(who or "an unknown user", "an invite")
            return
        try:
            hs.checked(await self.client.join(room_id), "join")
            logger.info("matrix: joined {} (invited by {})", room_id, who)
        except hs.MatrixError as exc:
            logger.warning("matrix: could not join {}: {}", room_id, exc)

    async def _admit(
        self, room_id: str, event: dict[str, Any]
    ) -> tuple[str, dict[str, Any], Sender] | None:
        """A message we answer, as an inbox item; strangers are refused silently and logged."""
        sender = event.get("sender")
        if not isinstance(sender, str) or sender == self.settings.user_id:
            return None
        if event.get("type") == ENCRYPTED:  # nio could not decrypt it, or we do not
            if self.allowed(sender):
                await self._encrypted(room_id, event)
            return None
        message = said(event)
        if message is None or _sent_at(event) < self._born:
            return None
        if not self.allowed(sender):
            self._refuse(sender, "a message")
            return None
        group = await self._is_group(room_id)
        if (
            group
            and self.settings.group_policy == "mention"
            and not await self._addressed(room_id, message)
        ):
            return None
        self._groups[room_id] = group
        if not group and sender == self.settings.owner and self.delivery.owner_room != room_id:
            self.delivery.owner_room = room_id  # where Dream reviews go, kept for restarts
            assert self._bus is not None
            await self._bus.receive(self.name, [], (OWNER_ROOM, room_id))
        who = Sender(
            sender,
            sender,
            is_owner=sender == self.settings.owner,
            can_answer=True,
            shared_room=group,
        )
        return room_id, {"room": room_id, "event": event, "group": group}, who

    async def _is_group(self, room_id: str) -> bool:
        """More than two joined members, as the homeserver says (nio forgets rooms across
        restarts): asked once per room until its membership changes."""
        assert self.client is not None
        if room_id not in self._sizes:
            try:
                self._sizes[room_id] = await hs.members(self.client, room_id)
            except hs.MatrixError as exc:
                logger.warning("matrix: members of {} unknown ({}): taken as a group", room_id, exc)
                return True  # unknown: never shown personal memory
        return self._sizes[room_id] > 2

    async def _addressed(self, room_id: str, message: Said) -> bool:
        """Mentioned, commanded (`!help`), or answered: a reply to one of our messages."""
        assert self.client is not None
        if names_us(message, self.settings.user_id, self._display):
            return True
        if BANG.inbound(message.body, self.command_names) != message.body:
            return True
        if message.reply_to:
            return (
                await hs.sender_of(self.client, room_id, message.reply_to) == self.settings.user_id
            )
        return False

    def _refuse(self, who: str, what: str) -> None:
        self._strangers.refuse(who, what)

    async def _encrypted(self, room_id: str, event: dict[str, Any]) -> None:
        """A message we cannot read. Without encryption on: one plain note per room and run.
        With it, nio had no room key for it: the sender's devices are asked for it, and the
        room is told once per run (the message itself is not answered)."""
        assert self._bus is not None and self.client is not None
        if self.e2e:
            with contextlib.suppress(Exception):  # best effort: the note says what to do
                await hs.ask_for_key(self.client, event, room_id)
        if room_id in self._told_encrypted:
            return
        self._told_encrypted.add(room_id)
        note = UNDECRYPTABLE if self.e2e else ENCRYPTED_ROOM
        logger.warning("matrix: a message in {} cannot be decrypted here", room_id)
        await self._bus.publish_outbound(OutboundMessage(self.name, room_id, Text(note, "error")))

    def _message(
        self, room: str, payload: dict[str, Any], sender: Sender, seq: int | None
    ) -> InboundMessage:
        event = payload["event"]
        message = said(event)
        text = message.body if message is not None else ""
        if payload.get("group"):
            text = without_mention(text, self.settings.user_id, self._display)
        text = BANG.inbound(text.strip(), self.command_names)
        inbound = InboundMessage(self.name, room, text, sender)
        prepare = functools.partial(self._prepare, payload)
        inbound = replace(inbound, prepare=prepare)
        if seq is not None:
            inbound = replace(inbound, id=InboundMessage.inbox_id(seq), seq=seq)
        return inbound

    async def _replay(self) -> None:
        """Messages an earlier run stored but did not answer, handed in again in order."""
        assert self._bus is not None
        left = await self._bus.unfinished(self.name)
        if left:
            logger.info(
                "matrix: {} from before the restart answered now", plural(len(left), "message")
            )
        for pending in left:
            await self._hand_in(pending)

    async def readmit(self, pending: Pending) -> bool:
        if self.client is None or self._bus is None:
            return False
        await self._hand_in(pending)
        return True

    async def _hand_in(self, pending: Pending) -> None:
        """A stored message, admitted again under today's config, from whom it was then."""
        assert self._bus is not None
        payload = pending.payload
        found = payload.get("event")
        event: dict[str, Any] = found if isinstance(found, dict) else {}
        who = str(event.get("sender") or "")
        if not self.allowed(who) or said(event) is None:
            await self._bus.forget(pending.seq)
            return
        derived = Sender(
            who,
            who,
            is_owner=who == self.settings.owner,
            can_answer=True,
            shared_room=payload.get("group") is not False,
        )
        sender = pending.vouched(derived)
        self._groups[pending.chat] = sender.shared_room
        msg = self._message(pending.chat, payload, sender, pending.seq)
        await self._bus.publish_inbound(replace(msg, replayed=True))

    async def _prepare(self, payload: dict[str, Any], msg: InboundMessage) -> InboundMessage | None:
        """Run by the core in the chat's order just before the turn: a file is fetched here."""
        assert self._bus is not None
        return await prepared(self._bus, msg, self._fetched(payload, msg))

    async def _fetched(self, payload: dict[str, Any], msg: InboundMessage) -> InboundMessage | str:
        """The message with its file saved; the note to answer it with when it is refused. A
        failure to fetch it raises: kept and tried again, never dropped."""
        message = said(payload["event"])
        if message is None or message.msgtype not in FILE_TYPES:
            return msg
        limit = self.settings.max_file_mb * 2**20
        if message.size is not None and message.size > limit:
            size = message.size / 2**20
            return TOO_BIG.format(size=size, limit=self.settings.max_file_mb)
        try:
            data = await hs.download(self.settings.homeserver, self._access(), message.url, limit)
            if message.file is not None:  # an encrypted room's attachment
                data = await asyncio.to_thread(hs.decrypted_file, data, message.file)
        except ValueError as exc:
            logger.warning("matrix: a file in {} refused: {}", msg.chat_id, exc)
            return NO_DOWNLOAD
        name = message.file_name or FILE_TYPES[message.msgtype]
        room = msg.sender.shared_room
        saved = await asyncio.to_thread(
            save_media, self.workspace, msg.session_key, name, data, room
        )
        label = f"[{FILE_TYPES[message.msgtype]}: {message.file_name}]"
        return replace(msg, content=label, media=(saved,))

    def _access(self) -> str:
        assert self.client is not None
        return self.client.access_token

    # Outbound: one chat at a time, in order, from the core (delivery.py).

    async def send(self, msg: OutboundMessage) -> None:
        await self.delivery.send(msg)


def _sent_at(event: dict[str, Any]) -> int:
    stamp = event.get("origin_server_ts")
    return stamp if type(stamp) is int else 0


def _since_our_join(events: list[dict[str, Any]], user_id: str) -> list[dict[str, Any]]:
    """A room's events after our own join in this batch: what was said before we came in is
    history, not something to answer."""
    for at in range(len(events) - 1, -1, -1):
        event = events[at]
        if (
            event.get("type") == MEMBER
            and event.get("state_key") == user_id
            and isinstance(event.get("content"), dict)
            and event["content"].get("membership") == "join"
        ):
            return events[at + 1 :]
    return events


def _members_changed(events: list[dict[str, Any]], info: Any) -> bool:
    """Whether somebody came or went in this batch: a membership event in the timeline, or in
    the state of a batch whose timeline skipped some (a gap). The state of a whole timeline only
    restates the senders' membership (lazy loading), which changes nobody's: asking the
    homeserver again for it cost a request per message."""
    if any(e.get("type") == MEMBER for e in events):
        return True
    gap = bool(getattr(info.timeline, "limited", True))
    return gap and any(getattr(e, "source", {}).get("type") == MEMBER for e in info.state)

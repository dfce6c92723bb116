"""The Telegram channel: python-telegram-bot long polling in our own loop, or a webhook on the
gateway's server (with channels/telegram/transport.py, the only importer of PTB)."""

from __future__ import annotations

import asyncio
import functools
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from loguru import logger
from telegram import Bot, Message, Update, User
from telegram.constants import ChatAction, ChatType, ParseMode
from telegram.error import InvalidToken, TelegramError
from telegram.request import BaseRequest

from channels.telegram import albums, transport
from channels.telegram.delivery import (
    Delivery,
    PollWatch,
    SendError,
    command_menu,
    is_allowed,
    target,
)
from channels.telegram.incoming import (
    GREETING,
    NO_DOWNLOAD,
    REFUSED_PRESS,
    SPELLING,
    UNSUPPORTED,
    Incoming,
    as_payload,
    attachment,
    chat_key,
    download,
    fair_press,
    is_addressed,
    next_offset,
    oversized,
    park_unreadable,
    stored_text,
    unknown_chat,
)
from channels.telegram.transport import (
    call_api,
    channel_down,
    poll,
    quietly,
    read_update,
    register_commands,
    requests_for,
    send_message,
)
from channels.telegram.webhook import made_webhook, unhook
from nanomem.agent import (
    BaseChannel,
    Button,
    Capabilities,
    Command,
    InboundMessage,
    Mention,
    MessageBus,
    OutboundMessage,
    Pending,
    Received,
    Strangers,
    Text,
    hand_in_each,
    left_over,
    parse_command,
    prepared,
    receive_until_stored,
    vouched_again,
)
from nanomem.audience import Sender
from nanomem.config import ConfigError, TelegramSettings
from nanomem.log import register_secrets
from nanomem.text.masking import shown_url
from nanomem.text.plural import plural
from nanomem.text.utf8 import clean_text

if TYPE_CHECKING:
    from nanomem.app import App

OFFSET = "telegram.offset"  # the inbox's record of what Telegram may forget
NO_TOKEN = "telegram.token is not set: create a bot with @BotFather, then set telegram.token"
STEP_S = 10.0  # the longest any one start or stop step may take
OWNER_ASSUMED = (
    "telegram.owner is not set: assuming the owner is user {owner}, the first user id in "
    "telegram.allow_from (only the owner runs owner commands and approvals); set "
    "telegram.owner = {owner} in config.toml (or NANOMEM_TELEGRAM__OWNER) to say so"
)


class TelegramChannel(BaseChannel):
    """Long polling is ours, not python-telegram-bot's Updater: PTB confirms updates to Telegram
    before any handler runs, so a crash would lose them. Here each batch of updates is stored
    in the inbox, with the new offset, before the next getUpdates confirms it (by webhook:
    before the post is answered, webhook.py)."""

    name = "telegram"

    def __init__(
        self,
        settings: TelegramSettings,
        *,
        workspace: Path,
        commands: list[Command],
        poll_timeout_s: float = 30.0,
        typing_every_s: float = 4.0,
        typing_delay_s: float = 1.0,
        status_every_s: float = 3.0,
        watch_every_s: float = 1.0,
        stream_every_s: float = 1.0,
        webhook_files: tuple[Path, Path] | None = None,  # its secret, Telegram's word on it
    ) -> None:
        token = settings.token.get_secret_value() if settings.token else ""
        if not token:
            raise ConfigError(NO_TOKEN)
        register_secrets([token])  # PTB errors and file URLs carry the token
        self._hook = made_webhook(settings, webhook_files) if settings.mode == "webhook" else None
        self.settings, self.workspace, self._token = settings, workspace, token
        self._commands, self._our_commands = commands, {c.name for c in commands} | {"start"}
        self.poll_timeout_s, self.watch_every_s = poll_timeout_s, watch_every_s
        # A poll lasts its own timeout plus the read timeout; allow some slack on top.
        self._poll = PollWatch(stall_after_s=poll_timeout_s + 35.0)
        self._poll_request = requests_for(settings.proxy, self._poll)
        self._request: BaseRequest | None = None  # the other calls', made with each bot
        self._bot: Bot | None = None
        self._polling: asyncio.Task[None] | None = None
        self._offset: int | None = None
        self._bus: MessageBus | None = None
        self._watchdog: asyncio.Task[None] | None = None
        self._replayed = False
        self.delivery = Delivery(
            self,
            workspace=workspace,
            typing_every_s=typing_every_s,
            typing_delay_s=typing_delay_s,
            status_every_s=status_every_s,
            stream=settings.stream,
            stream_groups=settings.stream_groups,
            stream_every_s=stream_every_s,  # Telegram allows about one edit a second per chat
        )
        self._strangers = Strangers("Telegram", "telegram.allow_from")
        self._owner_noted = False
        self.capabilities = Capabilities(
            streams=settings.stream,
            edits=True,
            drafts=settings.stream,
            buttons=True,
            files=True,
            markup="html",  # renders and splits itself: 4096 counts the rendered text
            pushes=True,
            reaches_owner=True,
            turns=True,  # typing and growing replies follow each turn's life
        )
        self._refusals: set[asyncio.Task[Any]] = set()
        wait = settings.album_wait_s  # after an album's last part; 10 s at most after its first
        self._albums: albums.Albums[Incoming] = albums.Albums(
            self._album_done, self._publish, quiet_s=wait, longest_s=max(10.0, wait)
        )

    bot_username = staticmethod(transport.bot_username)  # which bot a token is (onboarding)

    @classmethod
    def from_app(cls, app: App) -> TelegramChannel:
        settings, commands, home = app.settings.telegram, app.loop.commands.all(), app.home
        files = (home.telegram_webhook_secret, home.telegram_webhook)
        return cls(settings, workspace=app.workspace, commands=commands, webhook_files=files)

    def listens(self, server: str) -> str:
        polling = f"polling getUpdates from {shown_url(self.settings.base_url)} (no webhook)"
        return self._hook.listens(server) if self._hook is not None else polling

    def routes(self, web_app: Any) -> None:
        if self._hook is not None:
            self._hook.routes(web_app)

    # Lifecycle.

    async def start(self, bus: MessageBus) -> None:
        self._bus = bus
        await self.delivery.load(bus)  # before the replay: where its replies grew
        if not self.settings.allow_from and self.settings.owner is None:
            logger.warning(
                "telegram.allow_from is empty and telegram.owner is not set: every message is "
                "refused, and the log names each refused user id to add"
            )
        if (assumed := self.settings.assumed_owner) is not None and not self._owner_noted:
            self._owner_noted = True  # once per run: restarts of the channel stay quiet
            logger.info(OWNER_ASSUMED, owner=assumed)
        await self._launch()
        every = self.watch_every_s  # a webhook's watch asks Telegram, so 60 times less often
        hook = self._hook.watch(lambda: self._bot, every * 60) if self._hook else None
        watch = hook or self._poll.run(self._relaunch, every)
        self._watchdog = asyncio.create_task(watch, name="telegram-watchdog")

    async def _launch(self) -> None:
        """A fresh Bot, polling; ChannelDown when the Bot API cannot be used."""
        bot = self._build()
        try:
            await asyncio.wait_for(bot.initialize(), STEP_S)
            await register_commands(bot, command_menu(self._commands), STEP_S)
            # Before the replay: what Telegram posts meanwhile comes again (503) after it.
            hooked = self._hook.set(bot) if self._hook is not None else unhook(bot)
            await asyncio.wait_for(hooked, STEP_S)
        except BaseException as exc:
            await quietly(bot.shutdown(), "shut down")
            if (down := channel_down(exc)) is not None:
                raise down from None
            raise
        self._bot, self._poll.problem = bot, None
        if not self._replayed:  # what an earlier run left goes first, in arrival order
            await self._replay(bot)
            self._replayed = True
        if self._hook is not None:
            await self._hook.open(functools.partial(self._store, bot), self._bus)
        else:
            self._poll.reset()
            self._polling = asyncio.create_task(self._poll_updates(bot), name="telegram-poll")
        logger.info("telegram: {} as @{}", "webhook" if self._hook else "polling", bot.username)

    async def _relaunch(self) -> None:
        await self._halt()
        await self._launch()

    async def _halt(self) -> None:
        """Stop polling and drop the Bot (updates not stored yet are simply fetched again)."""
        polling, self._polling = self._polling, None
        if polling is not None:
            polling.cancel()
            await asyncio.gather(polling, return_exceptions=True)
        bot, self._bot = self._bot, None
        if bot is not None:
            await quietly(bot.shutdown(), "shut down")

    def _build(self) -> Bot:
        self._request = requests_for(self.settings.proxy)
        return Bot(
            self._token,
            base_url=self.settings.base_url,
            base_file_url=self.settings.base_file_url,
            request=self._request,
            get_updates_request=self._poll_request,
        )

    async def stop_receiving(self) -> None:
        """Stop polling and drop intake in progress: what was stored stays in the inbox."""
        tasks = [task for task in (self._watchdog, self._polling) if task is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self._hook is not None:  # posts being stored finish; later ones are refused (503)
            await self._hook.close()
        await self._albums.stop()

    async def stop(self) -> None:
        await self.stop_receiving()
        await self.delivery.close()
        await self._halt()

    def problem(self) -> str | None:
        return self._poll.problem if self._hook is None else self._hook.problem

    def owner_chat(self) -> str | None:
        """The owner's private chat: a private chat's id is its person's user id."""
        owner = self.settings.owner_id
        return None if owner is None else str(owner)

    def admits(self, chat: str, sender: str) -> bool:
        """Would `sender`'s message in this chat be answered now? (Before a scheduled turn: one
        made by someone since removed from telegram.allow_from must not reach them.)"""
        chat_id, _ = target(chat)
        user_id = int(sender) if sender.lstrip("-").isdigit() else chat_id  # a private chat's
        return is_allowed(self.settings.allow_from, user_id, chat_id, self.settings.owner)

    # Inbound: stored first, then handed to the core, which runs `_prepare` in the chat's order.

    async def _poll_updates(self, bot: Bot) -> None:
        assert self._bus is not None
        if self._offset is None and (stored := await self._bus.position(OFFSET)) is not None:
            self._offset = int(stored)
        take, offset = functools.partial(self._polled, bot), lambda: self._offset
        await poll(bot, self._poll_request, self.poll_timeout_s, self._poll, offset, take)

    async def _polled(self, bot: Bot, items: list[Any]) -> None:
        """A batch stored with the offset that confirms it."""
        offset = next_offset(items, self._offset)
        await self._store(bot, items, (OFFSET, str(offset)) if offset is not None else None)
        self._offset = offset

    async def _store(self, bot: Bot, items: list[Any], position: tuple[str, str] | None) -> None:
        """Keep what we answer, durably, with the channel's position in its source (one
        step); an update that cannot be read is kept too, and parked (`nanomem inbox`)."""
        assert self._bus is not None
        admitted: list[tuple[Incoming, dict[str, Any]]] = []
        unreadable: list[tuple[dict[str, Any], Exception]] = []
        for item in items:
            try:
                found = self._admit(read_update(item, bot))
            except Exception as exc:  # one such update must not hold up every chat
                unreadable.append((as_payload(item), exc))
                continue
            if found is not None:
                admitted.append((found, item))
        kept = [(found.key, payload, found.sender) for found, payload in admitted]
        kept += [(unknown_chat(payload), payload, Sender()) for payload, _ in unreadable]
        # Nothing is confirmed until they are stored: a full disk is retried, never dropped.
        what = plural(len(kept), "update")
        seqs = await receive_until_stored(self._bus, self.name, kept, what, position)
        for (payload, error), seq in zip(unreadable, seqs[len(admitted) :], strict=True):
            if seq is not None:
                await park_unreadable(self._bus, seq, payload, error, self.name)
        for (found, payload), seq in zip(admitted, seqs[: len(admitted)], strict=True):
            await self._take(replace(found, seq=seq), payload)

    async def _take(self, found: Incoming, payload: dict[str, Any]) -> None:
        """Hand a stored update in; an album's part waits for the rest of it (albums.py)."""
        if found.press is None and (group := albums.group_of(payload)) is not None:
            self._albums.add(found.key, group, albums.Part(found.seq, payload, found))
        elif self._albums.waiting(found.key):  # after the album, as it was sent
            self._albums.behind(found.key, self._message(found))
        else:
            await self._publish(self._message(found))

    async def _publish(self, msg: InboundMessage) -> None:
        assert self._bus is not None
        await self._bus.publish_inbound(msg)

    async def _album_done(self, parts: list[albums.Part[Incoming]]) -> None:
        """A whole album: stored as one row before its parts' rows go, then handed in as one
        message. Admitted as a whole: in a group that wants a mention, any part's caption may
        carry it."""
        assert self._bus is not None
        lead = parts[0].item
        bot = lead.message.get_bot().bot
        if lead.group and self.settings.group_policy == "mention":
            wanted = any(is_addressed(p.item.message, bot, self._our_commands) for p in parts)
            if not wanted:
                for part in parts:
                    await self._bus.forget(part.seq)
                return
        seq = await albums.store_whole(self._bus, self.name, lead.key, lead.sender, parts)
        rest = tuple(part.item.message for part in parts[1:])
        await self._publish(self._message(replace(lead, seq=seq, rest=rest)))

    async def _replay(self, bot: Bot) -> None:
        """Messages an earlier run stored but did not answer, handed in again in order."""
        assert self._bus is not None
        replay, held = albums.replay_order(await left_over(self._bus, self.name))
        for pending in held:  # already in an album row stored before the restart
            await self._bus.forget(pending.seq)
        # In order: what came after a loose part waits behind its album.
        hand_in = functools.partial(self._hand_in, bot, retry=False)
        await hand_in_each(self._bus, self.name, replay, hand_in, stored_text)

    async def readmit(self, pending: Pending) -> bool:
        """Take a stored message whose handling failed once more (agent/retries.py); False
        while the channel is not running."""
        if self._bot is None or self._bus is None:
            return False
        await self._hand_in(self._bot, pending, retry=True)
        return True

    async def _hand_in(self, bot: Bot, pending: Pending, *, retry: bool) -> None:
        assert self._bus is not None
        lead, *rest = [Update.de_json(part, bot) for part in albums.parts_of(pending.payload)]
        found = self._admit(lead)
        sender = await vouched_again(self._bus, pending, None if found is None else found.sender)
        if found is None or sender is None:  # no longer allowed, say: forgotten
            return
        incoming = replace(found, sender=sender, seq=pending.seq, replayed=True, retry=retry)
        if albums.ALBUM in pending.payload:
            incoming = replace(incoming, rest=tuple(u.message for u in rest if u.message))
        await self._take(incoming, pending.payload)

    def _admit(self, update: Update | None) -> Incoming | None:
        """An update we answer, with its chat key; strangers are refused silently and logged
        (a stranger's button press gets a short refusal: Telegram shows a spinner otherwise)."""
        press = update.callback_query if update is not None else None
        message = update.message if update is not None else None
        if press is not None and isinstance(press.message, Message):
            message = press.message
        # For a press, the presser (callback_query.from): never whoever the message names.
        user = press.from_user if press is not None else update.effective_user if update else None
        if update is None or message is None or user is None or user.is_bot:
            return None
        if press is not None and not fair_press(press.data, user.id, message):
            self._refuse_press(press.id)
            return None
        if not is_allowed(self.settings.allow_from, user.id, message.chat_id, self.settings.owner):
            if press is not None:
                self._refuse_press(press.id)
            self._strangers.refuse(
                user.id, f"@{user.username}" if user.username else user.full_name
            )
            return None
        group = message.chat.type in (ChatType.GROUP, ChatType.SUPERGROUP)
        sender = self._sender(user, group)
        key = chat_key(message)
        if press is not None:
            data = press.data or ""
            return Incoming(message, user, key, group, sender, press=data, press_id=press.id)
        # An album's part: the album is admitted as a whole once it is complete.
        mention_only = group and self.settings.group_policy == "mention"
        mention_only = mention_only and not message.media_group_id
        if mention_only and not is_addressed(message, message.get_bot().bot, self._our_commands):
            return None
        return Incoming(message, user, key, group, sender)

    def _sender(self, user: User, group: bool) -> Sender:
        """Who wrote, from Telegram's facts: a person is there to answer a question (a shell
        command to approve, say), and only telegram.owner is the owner, in any chat."""
        handle = f" (@{user.username})" if user.username else ""
        return Sender(
            str(user.id),
            f"{user.full_name}{handle}",
            is_owner=user.id == self.settings.owner_id,
            can_answer=True,
            shared_room=group,
        )

    def _refuse_press(self, press_id: str) -> None:
        task = asyncio.create_task(self.answer_press(press_id, REFUSED_PRESS))
        self._refusals.add(task)
        task.add_done_callback(self._refusals.discard)

    def _message(self, incoming: Incoming) -> InboundMessage:
        """The message for the core now; its own work on it (`_prepare`) runs in chat order."""
        message = incoming.message
        if incoming.press is not None:  # what the button sends, as if the presser typed it
            text = clean_text(incoming.press)
        else:  # an album's captions joined (lone surrogates stop here)
            said = [clean_text(m.text or m.caption or "") for m in incoming.parts]
            text = "\n\n".join(filter(None, said))
            mention = Mention.of_handle(message.get_bot().username or "")
            if incoming.group and mention is not None:
                text = mention.stripped(text)
        prepare = functools.partial(self._prepare, incoming)
        pressed = incoming.press is not None
        inbound = InboundMessage(self.name, incoming.key, text, incoming.sender, (), pressed)
        inbound = replace(inbound, prepare=prepare)
        if (seq := incoming.seq) is not None:
            inbound = replace(
                inbound, id=InboundMessage.inbox_id(seq), seq=seq, replayed=incoming.replayed
            )
        return inbound

    async def _prepare(self, incoming: Incoming, msg: InboundMessage) -> InboundMessage | None:
        """Run by the core in the chat's order, just before the turn: the message as the turn
        gets it, or None when the channel answered it itself or it failed (kept for a retry)."""
        assert self._bus is not None
        return await prepared(self._bus, msg, self._inbound(incoming, msg))

    async def _inbound(
        self, incoming: Incoming, msg: InboundMessage
    ) -> InboundMessage | str | None:
        """The message for the core; or the note to answer it with, when it is not for the
        model (a /start, a file too big, ...); None when it is for nobody."""
        message, user, key, group = incoming.message, incoming.user, incoming.key, incoming.group
        assert self._bus is not None
        text = msg.content
        if incoming.press is not None:
            await self.answer_press(incoming.press_id)
            if not group:  # in a group the press may be refused: the asker still needs them
                await self._clear_buttons(key, message.message_id)
        parsed = parse_command(text)
        command = parsed[0] if parsed else None
        if command == "start":
            return GREETING.format(name=user.first_name)
        found = [] if incoming.press is not None else map(attachment, incoming.parts)
        files = [file for file in found if file is not None]
        if (refusal := oversized(files, self.settings.max_file_mb)) is not None:
            return refusal  # before any is saved: an album is taken whole or not at all
        # A group's files go to its own folder, by the channel's word (the sender's shared_room).
        room = incoming.sender.shared_room
        received = Received(self.workspace, f"{self.name}:{key}", room)
        for kind, item, suffix, file_name in files:
            try:
                await download(received, kind, item, suffix, file_name)
            except (TelegramError, OSError) as exc:
                logger.warning("telegram: downloading a {} from {} failed: {}", kind, key, exc)
                return NO_DOWNLOAD
        if not files and not text:
            if group:  # stickers and the like; in a group nobody asked us
                await self._bus.forget(incoming.seq)
                return None
            return UNSUPPORTED
        self.delivery.accepted(key, msg.id, message.message_id, group=group, late=incoming.retry)
        return received.into(msg, text)

    # Outbound: one chat at a time, in order, from the core; Delivery reaches the Bot API here.

    async def send(self, msg: OutboundMessage) -> None:
        part = msg.part
        if isinstance(part, Text) and part.command:  # /help and the like: as the menu names them
            spelled = SPELLING.outbound(part.text, [c.name for c in self._commands])
            msg = replace(msg, part=replace(part, text=spelled))
        await self.delivery.send(msg)

    async def send_file(
        self, key: str, kind: str, name: str, data: bytes, *, caption: str, html: bool
    ) -> int:
        return await transport.upload(self._active_bot(), key, kind, name, data, caption, html)

    def _active_bot(self) -> Bot:
        if self._bot is None:
            raise SendError("the Telegram channel is not running", transient=True)
        return self._bot

    async def send_text(
        self,
        key: str,
        text: str,
        *,
        html: bool,
        reply_to: int | None = None,
        quiet: bool = False,
        buttons: tuple[Button, ...] = (),
    ) -> int:
        url = f"{self._active_bot().base_url}/sendMessage"
        assert self._request is not None  # made with the bot
        sending = send_message(self._request, url, key, text, reply_to, quiet, html, buttons)
        return await sending

    async def edit_text(self, key: str, message_id: int, text: str, *, html: bool = False) -> None:
        mode = ParseMode.HTML if html else None
        bot = self._active_bot()
        await call_api(bot.edit_message_text(text, target(key)[0], message_id, parse_mode=mode))

    async def delete(self, key: str, message_id: int) -> None:
        await call_api(self._active_bot().delete_message(target(key)[0], message_id))

    async def send_draft(self, key: str, draft_id: int, text: str, *, html: bool) -> None:
        chat_id, thread = target(key)
        mode = ParseMode.HTML if html else None
        call = self._active_bot().send_message_draft(chat_id, draft_id, text, thread, mode)
        try:
            await call_api(call)
        except SendError as exc:
            # A Bot API server older than 9.3 answers 404, which PTB reports as a bad token.
            if isinstance(exc.__cause__, InvalidToken) and "not found" in str(exc).lower():
                raise SendError(str(exc), unsupported=True) from exc
            raise

    async def answer_press(self, press_id: str, text: str | None = None) -> None:
        """Answer a callback query at once (the person's app shows a spinner until then); an
        old one, replayed after a restart, may be refused: that is fine."""
        if self._bot is not None and press_id:
            await quietly(self._bot.answer_callback_query(press_id, text), "answer a press")

    async def _clear_buttons(self, key: str, message_id: int) -> None:
        """A choice was made: its buttons go, so nobody presses them twice."""
        if self._bot is not None:
            edit = self._bot.edit_message_reply_markup(target(key)[0], message_id)
            await quietly(edit, "remove the buttons")

    async def typing(self, key: str) -> None:
        chat_id, thread = target(key)
        await call_api(self._active_bot().send_chat_action(chat_id, ChatAction.TYPING, thread))

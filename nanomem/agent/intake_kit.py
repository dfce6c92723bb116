"""The intake kit: what every channel that receives needs, written once (docs/channels.md).

Storing a batch until it is stored, handing in again what an earlier run left, mention-only in
groups, a channel's spelling of our commands, files received, strangers refused. A channel's own
folder keeps only what is true of its platform alone: how to read its messages and files.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable, Collection, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from loguru import logger

from nanomem.agent.bus import InboundMessage, MessageBus
from nanomem.agent.channel import save_media
from nanomem.agent.outbound import OutboundMessage, Text
from nanomem.agent.retries import keep_for_retry, record_failure
from nanomem.audience import Sender
from nanomem.text.plural import plural

if TYPE_CHECKING:
    from nanomem.agent.inbox import Pending

STORE_RETRY_S = 1.0
TOO_BIG = "That file is {size:.1f} MB; I accept up to {limit} MB ({setting})."
MAX_STRANGERS = 10_000  # remembered to log each once; a flood of strangers must not grow memory
Item = tuple[str, dict[str, Any], Sender]  # (chat, the channel's own form, who sent it)


# Storing and handing in again.


async def receive_until_stored(
    bus: MessageBus,
    channel: str,
    items: list[Item],
    what: str,
    position: tuple[str, str] | None = None,
) -> list[int | None]:
    """Their inbox rows (`bus.receive`, with the channel's new `position` in its source, in one
    step), however long storing takes: a full disk is waited out and tried again, never a reason
    to drop what nothing else keeps yet. Acknowledge to the source only after this returns."""
    while True:
        try:
            return await bus.receive(channel, items, position)
        except Exception:
            logger.exception("{}: could not store {}; retrying", channel, what)
            await asyncio.sleep(STORE_RETRY_S)


async def left_over(bus: MessageBus, channel: str) -> list[Pending]:
    """What an earlier run stored and did not answer, oldest first (`bus.unfinished`: replies
    it made are queued for delivery by the core); for `hand_in_each` at start."""
    left = await bus.unfinished(channel)
    if left:
        logger.info(
            "{}: {} from before the restart answered now", channel, plural(len(left), "message")
        )
    return left


async def hand_in_each(
    bus: MessageBus,
    channel: str,
    pending: Iterable[Pending],
    hand_in: Callable[[Pending], Awaitable[None]],
    text_of: Callable[[dict[str, Any]], str],
) -> None:
    """Hand stored messages in again, in order; one that cannot be read is recorded as failed
    (`text_of` finds its words in the payload, for `nanomem inbox`) and never keeps the rest
    back."""
    for one in pending:
        try:
            await hand_in(one)
        except Exception as exc:
            logger.exception("{}: could not read stored message {}", channel, one.seq)
            where = f"{channel}:{one.chat}"
            await record_failure(bus, one.seq, exc, text_of(one.payload), where)


async def vouched_again(bus: MessageBus, pending: Pending, derived: Sender | None) -> Sender | None:
    """Who a stored message is handed in again as (at start, or by `readmit`): admitted again
    under the config of now (`derived`, the sender the channel reads from the payload today;
    None when it no longer admits it: the row is forgotten), and the same person, owner or not,
    in a room or not, as the channel vouched at receipt (`pending.vouched`)."""
    if derived is None:
        await bus.forget(pending.seq)
        return None
    return pending.vouched(derived)


async def prepared(
    bus: MessageBus, msg: InboundMessage, work: Awaitable[InboundMessage | str | None]
) -> InboundMessage | None:
    """What a channel's `prepare` returns the core, from its own `work` on a message (the
    message for the turn; a note to answer it with, say a file too big; None for nobody): a
    note is answered and kept until delivered; a failure (its own fault) is kept for a retry
    and told once, never dropped."""
    try:
        ready = await work
    except Exception as exc:
        logger.exception("{}: could not take a message in {}", msg.channel, msg.chat_id)
        if msg.seq is not None and (note := await keep_for_retry(bus, msg, exc)) is not None:
            await bus.publish_outbound(note)
        return None
    if isinstance(ready, str):
        await answer_itself(bus, msg, ready)
        return None
    return ready


async def answer_itself(bus: MessageBus, msg: InboundMessage, note: str) -> None:
    """The channel's own answer to a stored message, kept in the inbox until delivered, in
    order with the chat's replies."""
    answer = OutboundMessage.answering(msg, Text(note, "error"))
    await bus.answer_for(msg.seq, answer)
    await bus.publish_outbound(answer)


# Mention-only in groups, and a channel's spelling of our commands.


@dataclass(frozen=True)
class Spelling:
    """How a channel writes our commands: its `prefix` (`/`; `!` where the person's client takes
    `/` for itself, as Element does) and whether a hyphen is written `_` (Telegram's menu
    allows no hyphen: `/dream_log` for `/dream-log`)."""

    prefix: str = "/"
    underscores: bool = False

    def name(self, command: str) -> str:
        """A command's name as the channel writes it (for a menu or native command)."""
        return command.replace("-", "_") if self.underscores else command

    def command(self, text: str) -> tuple[str, str] | None:
        """(our name, addressee) of a message that starts with a command in this spelling
        (`/dream_log@bot`: `dream-log`, `bot`); None otherwise."""
        found = re.match(rf"{re.escape(self.prefix)}([A-Za-z0-9_-]+)(?:@(\w+))?", text)
        if found is None:
            return None
        return found.group(1).lower().replace("_", "-"), (found.group(2) or "").lower()

    def inbound(self, text: str, commands: Collection[str]) -> str:
        """A message as the core reads commands (`/name`): one of ours in the channel's prefix
        becomes ours; anything else (`!important`) stays the person's words."""
        if self.prefix == "/" or (found := self.command(text)) is None or found[0] not in commands:
            return text
        return "/" + text[len(self.prefix) :]

    def outbound(self, text: str, commands: Collection[str]) -> str:
        """Our own text (`/help`'s list, a command's reply) naming commands as the channel's
        person types them: `/dream_restore` on Telegram (tappable), `!dream-restore` on Matrix."""
        if self.prefix == "/" and not self.underscores:
            return text
        for name in sorted(commands, key=len, reverse=True):
            if (spelled := f"{self.prefix}{self.name(name)}") == f"/{name}":
                continue
            text = re.sub(rf"(?<![\w/])/{re.escape(name)}(?![\w-])", spelled, text)
        return text


SLASH = Spelling()


@dataclass(frozen=True)
class Mention:
    """How a message names the bot in its text: `pattern` (`@nanomem_bot` on Telegram; a user
    id or display name elsewhere), and `handle`, the name a command may be addressed to
    (`/help@nanomem_bot`; "" where there is none)."""

    pattern: re.Pattern[str]
    handle: str = ""

    @classmethod
    def of_handle(cls, handle: str, sign: str = "@") -> Mention | None:
        """Mentioned as `@handle` (case-insensitive); None when the bot has no handle."""
        if not handle:
            return None
        found = re.compile(rf"(?<![\w@/]){re.escape(sign + handle)}\b", re.IGNORECASE)
        return cls(found, handle.lower())

    def found_in(self, text: str) -> bool:
        return self.pattern.search(text) is not None

    def stripped(self, text: str) -> str:
        """The message without the mention; one that is only the mention stays as it is."""
        spaced = re.compile(rf"(?:{self.pattern.pattern})[ \t]*", self.pattern.flags)
        return spaced.sub("", text).strip() or text


def addressed(
    text: str,
    *,
    mention: Mention | None,
    replied_to_us: bool,
    commands: Collection[str],
    spelling: Spelling = SLASH,
) -> bool:
    """Whether a group message is for us (mention-only groups): a reply to one of our
    messages, a mention of the bot, or one of our commands (a command addressed to another bot,
    `/help@other_bot`, is not; one addressed to us is, whatever its name)."""
    if replied_to_us or (mention is not None and mention.found_in(text)):
        return True
    if (found := spelling.command(text)) is None:
        return False
    name, addressee = found
    ours = mention.handle if mention is not None else ""
    return (bool(addressee) and addressee == ours) or (not addressee and name in commands)


# Files received.


def too_big(sizes: Iterable[int | None], max_mb: int, setting: str) -> str | None:
    """The note refusing a message whose file (any one, an album's too) is over the limit,
    before any is saved: a message is taken whole or not at all. `setting` names the limit
    (`telegram.max_file_mb`); a size the platform does not tell is judged when it is read."""
    for size in sizes:
        if size is not None and size > max_mb * 2**20:
            return TOO_BIG.format(size=size / 2**20, limit=max_mb, setting=setting)
    return None


def label(kind: str, name: str = "") -> str:
    """What the turn reads in place of a file: `[photo]`, `[document: plan.pdf]`."""
    return f"[{kind}: {name}]" if name else f"[{kind}]"


@dataclass
class Received:
    """The files of one message, saved into its chat's media folder (a room's own folder in a
    group) as they arrive; `into` makes the message the turn gets."""

    workspace: Path
    session: str  # `channel:chat`
    room: bool  # the channel's word: a group's files go to its own folder
    media: list[str] = field(default_factory=list)
    lengths: dict[str, float] = field(default_factory=dict)
    labels: list[str] = field(default_factory=list)

    async def save(
        self, name: str, data: bytes, kind: str, shown: str = "", length_s: float | None = None
    ) -> str:
        """Save one (`name`: the file's new name, dated and unique; `shown`: its original
        name, for the label; `length_s`: how long the platform says it plays). OSError when it
        cannot be written: nothing of it is kept."""
        args = (self.workspace, self.session, name, data, self.room)
        saved = await asyncio.to_thread(save_media, *args)
        self.media.append(saved)
        if length_s is not None:
            self.lengths[saved] = length_s
        self.labels.append(label(kind, shown))
        return saved

    def into(self, msg: InboundMessage, text: str) -> InboundMessage:
        """The message with its files: their labels before the person's words."""
        if self.labels:
            text = "\n".join(filter(None, [*self.labels, text]))
        return replace(msg, content=text, media=tuple(self.media), lengths=dict(self.lengths))


# Strangers.


class Strangers:
    """Who is refused: silently (no reply, typing or reaction tells them a bot is here), and
    logged once each, naming the setting that would let them in."""

    def __init__(self, platform: str, setting: str, limit: int = MAX_STRANGERS) -> None:
        self.platform, self.setting, self.limit = platform, setting, limit
        self._seen: set[str] = set()

    def refuse(self, user: str | int, name: str) -> None:
        if str(user) in self._seen:
            return
        if len(self._seen) >= self.limit:
            self._seen.clear()
        self._seen.add(str(user))
        logger.warning(
            "refused {} user {} ({}); add it to {}", self.platform, user, name, self.setting
        )

"""Who a turn speaks to: the owner in a personal chat, or a shared room (a group chat).

A group chat is a shared room: its prompt, its tools and Dream never bring the owner's personal
memory (USER.md, memory/MEMORY.md, other chats' history) into it, unless
`memory.groups_see_personal` says otherwise. The turn's audience travels in a context variable,
so tools see it without being told (asyncio tasks and worker threads inherit it).
"""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from nanomem.bus import InboundMessage

# Paths inside the workspace that hold the owner's personal memory.
PERSONAL_PATHS = ("USER.md", "memory")


@dataclass(frozen=True)
class Audience:
    session: str  # the session key, `channel:chat`
    personal: bool  # may see the owner's personal memory
    message: InboundMessage | None = None  # what the turn answers: where to ask its sender


def is_shared_room(session: str) -> bool:
    """A group chat: by the convention channels follow (Telegram's own), its chat id is
    negative, so the session key reads `channel:-…`."""
    _, _, chat = session.partition(":")
    return chat.startswith("-")


def audience_of(
    session: str, groups_see_personal: bool = False, message: InboundMessage | None = None
) -> Audience:
    return Audience(session, groups_see_personal or not is_shared_room(session), message)


_current: ContextVar[Audience | None] = ContextVar("audience", default=None)


def current() -> Audience | None:
    """The audience of the turn running now; None outside a turn (Dream, the CLI's own work)."""
    return _current.get()


def enter(audience: Audience) -> None:
    """For the rest of the current task (and what it starts)."""
    _current.set(audience)

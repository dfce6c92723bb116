"""Whom a tool call works for: the turn passes it into every call, explicitly.

A tool that needs it declares a parameter typed `ToolContext` (the registry fills it in and
keeps it out of the schema the model sees); every other tool never sees it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from nanomem.audience import Audience, Sender

# Hands a file (its path relative to the workspace, a caption) to the chat the turn answers,
# while the turn goes on (`send_file`).
Outlet = Callable[[str, str], Awaitable[None]]


@dataclass(frozen=True)
class ToolContext:
    sender: Sender = field(default_factory=Sender)  # who sent the message the turn answers
    audience: Audience | None = None  # the chat and what it may see; None outside any chat
    # Where a file for this chat goes; None where nobody receives one (Dream, a one-shot).
    outlet: Outlet | None = field(default=None, compare=False, repr=False)

    @property
    def session(self) -> str | None:
        """The chat's session key (`channel:chat`); None outside a chat."""
        return self.audience.session if self.audience is not None else None

    @property
    def personal(self) -> bool:
        """May see the owner's personal memory (outside a chat: the owner's own work)."""
        return self.audience is None or self.audience.personal

    @property
    def shared_room(self) -> bool:
        """Works for a group chat (whatever that group may see of personal memory), by its
        channel's word: the sender's, or the chat's as its audience carries it."""
        return self.sender.shared_room or (self.audience is not None and self.audience.room)


# Work no chat asked for: Dream, the Consolidator, the owner at the shell (`nanomem memory`).
OUTSIDE = ToolContext()

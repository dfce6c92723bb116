"""/dream-approve and /dream-reject: the owner's decision on a Dream change that waits
(dream.review = "ask"), and the review part of /dream-log."""

from __future__ import annotations

import asyncio
from typing import Any

from nanomem.agent import Command, InboundMessage, fenced
from nanomem.features.dream.dream import Dream, DreamBusy
from nanomem.features.dream.review import ReviewError
from nanomem.locks import to_thread_to_the_end

BUSY = "Dream is running; try again when it has finished."
OWNER_ONLY = "Memory changes are decided by the owner, in a private chat."


def owner_in_private(msg: InboundMessage) -> bool:
    """Where the owner's memory may be changed from: the owner, outside a group."""
    return msg.sender.is_owner and not msg.sender.shared_room


class ReviewCommands:
    def __init__(self, dream: Dream) -> None:
        self.dream = dream

    def commands(self) -> list[Command]:
        # Immediate: deciding never waits behind the chat's running turn.
        return [
            Command(
                "dream-approve",
                "keep the memory change Dream prepared",
                self._approve,
                usage="[id]",
                immediate=True,
                owner_only=True,
            ),
            Command(
                "dream-reject",
                "drop the memory change Dream prepared, and say why",
                self._reject,
                usage="[id] [reason]",
                immediate=True,
                owner_only=True,
            ),
        ]

    async def _approve(self, msg: InboundMessage, args: str) -> str:
        if not owner_in_private(msg):
            return OWNER_ONLY
        try:
            pending, version = await to_thread_to_the_end(self.decide, "approve", args, "")
        except ReviewError as exc:
            return str(exc)
        except DreamBusy:
            return BUSY
        if version is None:
            return f"Approved `{pending.id}`; the memory files already held it."
        return f"Approved `{pending.id}`: saved as version `{version.short}` ({pending.summary})."

    async def _reject(self, msg: InboundMessage, args: str) -> str:
        if not owner_in_private(msg):
            return OWNER_ONLY
        wanted, reason = await asyncio.to_thread(self._id_and_reason, args)  # reads a file
        try:
            pending, _ = await to_thread_to_the_end(self.decide, "reject", wanted, reason)
        except ReviewError as exc:
            return str(exc)
        except DreamBusy:
            return BUSY
        note = f" Noted why: {reason}" if reason else ""
        return (
            f"Rejected `{pending.id}`: memory stays as it was, and Dream will not propose "
            f"it again.{note}"
        )

    def _id_and_reason(self, args: str) -> tuple[str, str]:
        """Blocking. `/dream-reject [id] [reason]`: the first word is an id only when it names the
        waiting change (a button sends it); otherwise all of it is the reason."""
        first, _, rest = args.partition(" ")
        pending = self.dream.review.peek()
        if first and pending is not None and len(first) >= 4 and pending.id.startswith(first):
            return first, rest.strip()
        if first and len(first) == 8 and all(c in "0123456789abcdef" for c in first):
            return first, rest.strip()  # an old button's id: refused as no longer waiting
        return "", args.strip()

    def decide(self, what: str, wanted: str, reason: str) -> tuple[Any, Any]:
        """Blocking, under the Dream lock (DreamBusy while a run goes on)."""
        with self.dream.exclusive():
            if what == "approve":
                return self.dream.review.approve(wanted)
            return self.dream.review.reject(wanted, reason), None

    def log_text(self, wanted: str = "") -> str | None:
        """The review part of /dream-log: the change waiting and the latest decisions; with an
        id, that change (None when the id is not a review's: a memory version, then)."""
        review = self.dream.review
        pending = review.peek()
        if wanted:
            if pending is not None and pending.id.startswith(wanted.lower()):
                return pending.describe(max_diff_chars=None)
            for record in review.decisions(limit=200):
                if str(record.get("id", "")).startswith(wanted.lower()):
                    lines = "\n".join(record.get("lines") or [])
                    return f"{_decision_row(record)}\n\n{fenced(lines, 'diff')}"
            return None
        rows = []
        if pending is not None:
            when = pending.created[:16].replace("T", " ")
            rows.append(
                f"Waiting for your decision: `{pending.id}` {when} · {pending.summary} "
                "(/dream-approve, /dream-reject [reason])"
            )
        decided = review.decisions(limit=5)
        if decided:
            rows.append("Latest decisions:")
            rows += [f"- {_decision_row(record)}" for record in decided]
        return "\n".join(rows) if rows else None


def _decision_row(record: dict[str, Any]) -> str:
    when = str(record.get("at", ""))[:16].replace("T", " ")
    row = f"{record.get('status')} `{record.get('id')}` {when} · {record.get('summary')}"
    if record.get("version"):
        row += f" → version `{str(record['version'])[:8]}`"
    if record.get("reason"):
        row += f" · reason: {record['reason']}"
    return row

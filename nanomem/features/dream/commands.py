"""/dream, /dream-log and /dream-restore: the same texts serve the chat and the shell, each
in its own wording (the chat's commands and Markdown, or `nanomem memory ...` in plain text)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import TYPE_CHECKING

from nanomem.agent import Answer, Command, InboundMessage, fenced
from nanomem.audience import audience_of
from nanomem.features.dream.dream import Dream, DreamBusy
from nanomem.features.dream.review_commands import ReviewCommands, owner_in_private
from nanomem.memory import GitStore, GitStoreError, Version

if TYPE_CHECKING:
    from nanomem.memory import Restored

CHAT_DIFF_CHARS = 3000
DREAM_IS_RUNNING = "Dream is running; try again when it has finished. Nothing was restored."
# A change waiting for review, asked for where its diff (the owner's memory) must not show.
TOLD_THE_OWNER = "Dream prepared a memory change; it waits for the owner's decision."
PRIVATE_ONLY = "Memory versions are shown in private chats only."
OWNER_ONLY = "Memory is restored by the owner, in a private chat."


@dataclass(frozen=True)
class Wording:
    restore: str  # the command that undoes a version, before its id
    markdown: bool  # ids as code, diffs fenced (a chat renders them); else plain text

    def code(self, text: str) -> str:
        return f"`{text}`" if self.markdown else text


CHAT = Wording(restore="/dream-restore", markdown=True)
SHELL = Wording(restore="nanomem memory restore", markdown=False)


class MemoryCommands:
    def __init__(self, dream: Dream, git: GitStore, wording: Wording = CHAT) -> None:
        self.dream = dream
        self.git = git
        self.wording = wording
        self.reviews = ReviewCommands(dream)

    def commands(self) -> list[Command]:
        # Immediate: they never touch the chat's session, so a long Dream must not block it.
        return [
            Command(
                "dream",
                "learn from recent conversations now",
                self._dream,
                immediate=True,
                owner_only=True,
            ),
            Command(
                "dream-log",
                "show the latest memory change, or the one with that id",
                self._log,
                usage="[id]",
                immediate=True,
                owner_only=True,
            ),
            Command(
                "dream-restore",
                "list memory versions, or undo the one with that id",
                self._restore,
                usage="[id]",
                immediate=True,
                owner_only=True,
            ),
            *self.reviews.commands(),
        ]

    async def _dream(self, msg: InboundMessage, args: str) -> str | Answer:
        if args:
            return "/dream takes no arguments."
        return await self.run_dream(shown_here=owner_in_private(msg))

    async def _log(self, msg: InboundMessage, args: str) -> str:
        room, groups_see_personal = msg.sender.shared_room, self.dream.groups_see_personal
        if not audience_of(msg.session_key, room, groups_see_personal).personal:
            return PRIVATE_ONLY  # the diffs are of USER.md and MEMORY.md
        reviews = await asyncio.to_thread(self.reviews.log_text, args)
        if args and reviews is not None:  # the id of a reviewed change, not of a version
            return reviews
        try:
            text = await asyncio.to_thread(self.log_text, args, CHAT_DIFF_CHARS)
        except GitStoreError as exc:
            return f"{str(exc)[:1].upper()}{str(exc)[1:]}."
        return f"{reviews}\n\nLatest memory version:\n{text}" if reviews else text

    async def _restore(self, msg: InboundMessage, args: str) -> str:
        if not args:
            return await asyncio.to_thread(self.versions_text)
        if not owner_in_private(msg):
            return OWNER_ONLY
        try:
            return await asyncio.to_thread(self.restore_text, args)
        except GitStoreError as exc:
            return f"Nothing restored: {exc}."
        except DreamBusy:
            return DREAM_IS_RUNNING

    async def run_dream(self, shown_here: bool = True) -> str | Answer:
        """`shown_here`: the owner asked in a private chat, so a change to review is shown in
        the reply; otherwise the owner is told in their own chat, as after a scheduled run."""
        try:
            result = await self.dream.run("manual" if shown_here else "chat")
        except DreamBusy:
            return "Dream is already running."
        if result.pending is not None and not shown_here:
            return TOLD_THE_OWNER
        if result.pending is not None:  # dream.review = "ask": the owner decides here
            return Answer(result.describe(), result.pending.buttons())
        return result.describe()

    def log_text(self, sha: str = "", max_diff_chars: int | None = None) -> str:
        full = self.git.resolve(sha) if sha else self.git.log(limit=1)[0].sha
        version, diff = self.git.shown(full)
        note = ""
        if max_diff_chars is not None and len(diff) > max_diff_chars:
            cut = diff[:max_diff_chars].rsplit("\n", 1)[0]
            note = (
                f"\n(diff cut at {max_diff_chars} characters; "
                f"`nanomem memory log {version.short}` shows all of it)"
            )
            diff = cut
        if self.wording.markdown:
            diff = fenced(diff.rstrip(), "diff")
        return f"{self._row(version)}\n\n{diff.rstrip()}{note}"

    def versions_text(self, limit: int = 15) -> str:
        versions = self.git.log(limit=limit)
        rows = "\n".join(self._row(v) for v in versions)
        return f"Memory versions, newest first:\n{rows}\n\n{self.wording.restore} <id> undoes one."

    def restore(self, sha: str) -> Restored:
        """Blocking. A restore never overlaps a Dream run (in any process): DreamBusy."""
        with self.dream.exclusive():
            return self.git.restore(sha)

    def restore_text(self, sha: str) -> str:
        restored = self.restore(sha)
        undone = restored.undone
        files = ", ".join(sorted(undone.files))
        lines = [
            f"Restored {files} to before {undone.short} ({undone.summary}).",
            f"Saved as a new version, {restored.version.short}: "
            f"{self.wording.restore} {restored.version.short} undoes this restore.",
        ]
        if restored.overwritten_later:
            later = "; ".join(f"{v.short} ({v.summary})" for v in restored.overwritten_later)
            lines.append(f"This also undid later changes to the same files: {later}.")
        return "\n".join([*lines, *restored.notes])

    def _row(self, version: Version) -> str:
        when = version.time.strftime("%Y-%m-%d %H:%M")
        return f"{self.wording.code(version.short)} {when} · {version.summary}"

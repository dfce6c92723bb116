"""/why: where a remembered line came from. The line that best matches the words is followed by
blame to the version that wrote it; a Dream version's trailers (features/dream/evidence.py)
name the history entries it learned from, and the archive gives their chat, date and words.

A group chat asks only about what it may see (audience.py): not USER.md or memory/ unless
`memory.groups_see_personal`, and never another chat's words."""

from __future__ import annotations

import asyncio
import difflib
import re
from dataclasses import dataclass, field
from typing import Literal

from nanomem.agent import Command, InboundMessage
from nanomem.audience import PERSONAL_PATHS, Audience, audience_of
from nanomem.features.dream import evidence
from nanomem.memory import GitStore, GitStoreError, HistoryEntry, HistoryStore, Version
from nanomem.text.plural import plural

USAGE = "Usage: /why <words from a remembered line>, e.g. /why Quito"
MATCH_ENOUGH = 0.5  # resemblance from which a line counts as the one meant
CLOSEST = 3  # lines offered when none matches
QUOTE_CHARS = 160
ASKED_CHARS = 80  # of the words asked, repeated in a "no match" answer
# Of the words asked, the most compared with memory's lines: the comparison reads as strings
# too (difflib, quadratic), and 10 KB of words took 19 s over 600 lines. A line is far shorter.
MAX_ASKED_CHARS = 512
FOLLOW_RESTORES = 5  # restores followed back to where a line first came from
LEGACY_WINDOW = 50  # entries searched before the cursor of a run that recorded no evidence
OriginKind = Literal["dream", "hand", "initial", "uncommitted", "restore"]


@dataclass(frozen=True)
class Line:
    file: str
    number: int  # 1-based, in the live file
    text: str


@dataclass(frozen=True)
class Origin:
    kind: OriginKind
    version: Version | None = None  # the version that wrote the line (None: not committed)
    text: str = ""  # the line as that version wrote it
    restores: list[Version] = field(default_factory=list)  # restores that brought it back


def find(query: str, files: dict[str, str]) -> tuple[Line | None, list[Line]]:
    """The line meant by `query` (a substring first, then the closest by words and spelling),
    or None and the closest lines."""
    lines = [
        Line(rel, number, text)
        for rel, content in files.items()
        for number, text in enumerate(content.splitlines(), start=1)
        if meaningful(text)
    ]
    needle = " ".join(query.casefold().split())
    exact = [line for line in lines if needle in " ".join(line.text.casefold().split())]
    if exact:
        return min(exact, key=lambda line: len(line.text)), []
    scored = sorted(
        ((evidence.resemblance(query, line.text), line) for line in lines),
        key=lambda pair: pair[0],
        reverse=True,
    )
    if scored and scored[0][0] >= MATCH_ENOUGH:
        return scored[0][1], []
    return None, [line for _, line in scored[:CLOSEST]]


def meaningful(text: str) -> bool:
    """A line worth asking about: has words, and is no Markdown heading."""
    stripped = text.strip()
    return any(c.isalnum() for c in stripped) and not stripped.startswith("#")


class Provenance:
    def __init__(
        self, git: GitStore, history: HistoryStore, groups_see_personal: bool = False
    ) -> None:
        self.git, self.history = git, history
        self.groups_see_personal = groups_see_personal
        # One trace at a time: the first blame of a file after a start reads the whole memory
        # history (a second or more after years of Dream runs), and /why skips the chat's
        # queue, so a burst of them would otherwise fill the worker threads every chat's inbox
        # and session writes wait for.
        self._tracing = asyncio.Semaphore(1)

    def commands(self) -> list[Command]:
        # Immediate: it only reads, so it must not wait behind the chat's running turn.
        return [
            Command(
                "why",
                "where a remembered line came from",
                self._why,
                usage="<words>",
                immediate=True,
                # A group sees only SOUL.md's origins, unless groups see personal memory.
                owner_only=self.groups_see_personal,
            )
        ]

    async def _why(self, msg: InboundMessage, args: str) -> str:
        audience = audience_of(msg.session_key, msg.sender.shared_room, self.groups_see_personal)
        try:
            async with self._tracing:
                return await asyncio.to_thread(self.answer, args, audience)
        except GitStoreError as exc:
            return f"Cannot trace it: {exc}."

    def answer(self, words: str, audience: Audience | None = None) -> str:
        """Blocking. `audience` None is the owner at the shell: everything is visible."""
        if not words.strip():
            return USAGE
        cut = ""
        if len(words) > MAX_ASKED_CHARS:
            words = words[:MAX_ASKED_CHARS]
            cut = f"(Only the first {MAX_ASKED_CHARS} characters of the words were looked for.)\n"
        return cut + self._answer(words, audience)

    def _answer(self, words: str, audience: Audience | None) -> str:
        files = self._visible_files(audience)
        line, closest = find(words, files)
        if line is None:
            asked = _clip(words, ASKED_CHARS)
            if not closest:
                return f"Nothing is in memory yet that could match “{asked}”."
            rows = "\n".join(f"- {c.file}: “{_clip(c.text)}”" for c in closest)
            return f"No remembered line matches “{asked}”. The closest:\n{rows}"
        return self.explain(line, files[line.file], audience).text()

    def explain(self, line: Line, live: str, audience: Audience | None = None) -> Why:
        """Blocking. Where `line` of `live` (its file as it was searched) came from."""
        origin = self.origin(line, live)
        notes, sources = self._explain(line, origin, audience)
        return Why(line, notes, sources, origin.version)

    def line_at(self, rel: str, number: int) -> tuple[Line, str] | None:
        """Blocking. Line `number` of memory file `rel` as it is now, and the file; None when
        there is no such line or it is not worth asking about (blank, a heading)."""
        files = self._visible_files(None)
        lines = files.get(rel, "").splitlines()
        if not 1 <= number <= len(lines) or not meaningful(lines[number - 1]):
            return None
        return Line(rel, number, lines[number - 1]), files[rel]

    async def traced(self, line: Line, live: str) -> Why:
        """`explain` in a worker thread, one trace at a time (see __init__)."""
        async with self._tracing:
            return await asyncio.to_thread(self.explain, line, live)

    def _visible_files(self, audience: Audience | None) -> dict[str, str]:
        self.git.ensure()
        files = self.git.read_workspace()
        personal = audience is None or audience.personal
        return {
            rel: content.decode("utf-8", errors="replace")
            for rel, content in files.items()
            if content is not None and (personal or not _is_personal(rel))
        }

    # -- tracing --------------------------------------------------------------------------

    def origin(self, line: Line, live: str) -> Origin:
        """The version that wrote `line` of `live` (its file as it was searched), through any
        restores that put it back."""
        blamed = self._blame(line.file)
        index = _committed_index([text for _, text in blamed], live.splitlines(), line.number - 1)
        if index is None:
            return Origin("uncommitted")
        sha, text = blamed[index]
        restores: list[Version] = []
        for _ in range(FOLLOW_RESTORES):
            version = self.git.version(sha)
            if not version.summary.startswith("restore "):
                break
            earlier = self._before_restore(version, line.file, text)
            if earlier is None:
                return Origin("restore", version, text, restores)
            restores.append(version)
            sha = earlier
        version = self.git.version(sha)
        return Origin(_kind(version), version, text, restores)

    def _before_restore(self, restore: Version, rel: str, text: str) -> str | None:
        """A restore puts files back to their state before the change it undid: the version
        that wrote `text` in that state, if it is there."""
        named = re.match(r"restore ([0-9a-f]{4,40})\b", restore.summary)
        if named is None:
            return None
        try:
            parents = self.git.parents(self.git.resolve(named.group(1)))
        except GitStoreError:
            return None
        if not parents:
            return None
        return next((sha for sha, line in self._blame(rel, parents[0]) if line == text), None)

    def _blame(self, rel: str, at: str | None = None) -> list[tuple[str, str]]:
        version = at or self.git.head_sha()
        return [] if version is None else self.git.blame(rel, version)

    # -- explaining -----------------------------------------------------------------------

    def _explain(
        self, line: Line, origin: Origin, audience: Audience | None
    ) -> tuple[list[str], list[Source]]:
        restored = [
            f"Put back by restore {r.short} on {_when(r)}; before that:" for r in origin.restores
        ]
        version = origin.version
        if origin.kind == "dream" and version is not None:
            notes, sources = self._explain_dream(line.file, origin.text, version, audience)
            return [*restored, *notes], sources
        if version is None:
            said = (
                "Written by hand, outside Dream (by you, or by the assistant in a chat), and not "
                "saved as a version yet: it is saved as a manual edit before the next Dream run."
            )
        elif origin.kind == "initial":
            said = (
                "Not learned by Dream: it has been there since the first memory version "
                f"({version.short}, {_when(version)}), from the workspace template or your own "
                "writing."
            )
        elif origin.kind == "restore":
            said = (
                f"Put back by restore {version.short} on {_when(version)}; where it first came "
                "from is no longer in the memory history."
            )
        elif version.kind == "edit":  # the web app's Memory page: the summary is the person's
            title = version.summary.split(":", 1)[1].strip()
            said = (
                f"Edited by you in the web app: version {version.short} on {_when(version)}, "
                f"“{title}”."
            )
        else:
            said = (
                "Written by hand, outside Dream (by you, or by the assistant in a chat): saved "
                f"as {_kind_name(version)} {version.short} on {_when(version)}."
            )
        return [*restored, said], []

    def _explain_dream(
        self, rel: str, text: str, version: Version, audience: Audience | None
    ) -> tuple[list[str], list[Source]]:
        found = evidence.parse(version.message)
        run = f"Dream run {version.short}"
        head = f"Written {_when(version)} by {run} (/dream-log {version.short})"
        cited = found.cited(rel, text)
        if cited:
            entries = self._entries(cited)
            rows = [self._row(c, entries.get(c), found, text, audience) for c in cited]
            return [f"{head}, from:"], rows
        if found.entries:
            entries = self._entries(tuple(found.entries))
            ranked = _ranked(text, list(entries.values()))[:CLOSEST]
            read = plural(len(found.entries), "history entry", "history entries")
            lead = f"{head}. It read {read} and did not say which one this line came from"
            if not ranked:
                chats = sorted({_chat(ref.session, audience) for ref in found.entries.values()})
                return [f"{lead}; it read conversations in: {', '.join(chats)}."], []
            rows = [self._row(e.cursor, e, found, text, audience) for e in ranked]
            return [f"{lead}; the closest:"], rows
        if found.cursor is not None:  # a run older than the evidence records
            first = max(0, found.cursor - LEGACY_WINDOW)
            near = self.history.read_after(first, found.cursor - first)
            ranked = _ranked(text, near)[:1]
            lead = f"{head}, from history up to entry {found.cursor}"
            if not ranked:
                return [f"{lead}."], []
            row = self._row(ranked[0].cursor, ranked[0], found, text, audience)
            return [f"{lead}; probably:"], [row]
        return [f"{head}."], []

    def _entries(self, cursors: tuple[int, ...]) -> dict[int, HistoryEntry]:
        """The archived entries with these cursors (the archive is append-only: they are
        there unless someone removed them by hand)."""
        if not cursors:
            return {}
        first, last = min(cursors), max(cursors)
        wanted = set(cursors)
        found = self.history.read_after(first - 1, last - first + 1)
        return {e.cursor: e for e in found if e.cursor in wanted}

    def _row(
        self,
        cursor: int,
        entry: HistoryEntry | None,
        found: evidence.Evidence,
        text: str,
        audience: Audience | None,
    ) -> Source:
        ref = found.entries.get(cursor)
        session = entry.session if entry else ref.session if ref else ""
        stamp = entry.timestamp if entry else ref.timestamp if ref else ""
        where = _chat(session, audience) if session else f"history entry {cursor}"
        if not _may_quote(session, audience):
            return Source(cursor, where, stamp[:10])
        if entry is None:
            return Source(cursor, where, stamp[:10], session, missing=True)
        return Source(cursor, where, stamp[:10], session, _clip(_best_line(text, entry.content)))


@dataclass(frozen=True)
class Source:
    """A history entry a line was learned from, as the asker may see it."""

    cursor: int
    where: str  # `telegram chat 42`, `another conversation`, `history entry 12`
    day: str  # YYYY-MM-DD, or ""
    session: str = ""  # the chat's key, when the asker may see that chat
    quote: str = ""  # the entry's words that taught the line (clipped)
    missing: bool = False  # no longer in the archive

    def text(self) -> str:
        day = f", {self.day}" if self.day else ""
        if self.missing:
            return f"- {self.where}{day} (entry {self.cursor} is no longer in the archive)"
        return f"- {self.where}{day}: “{self.quote}”" if self.quote else f"- {self.where}{day}"


@dataclass(frozen=True)
class Why:
    """/why's answer for one line: what is said of its origin, then the entries it came from."""

    line: Line
    notes: list[str]
    sources: list[Source]
    version: Version | None = None  # the version that wrote it (None: not saved as one yet)

    def text(self) -> str:
        said = f"{self.line.file}, line {self.line.number}: “{_clip(self.line.text.strip())}”"
        return "\n".join([said, *self.notes, *(s.text() for s in self.sources)])


def _kind(version: Version) -> OriginKind:
    summary = version.summary
    if summary.startswith("dream"):
        return "dream"
    if summary.startswith("initial memory"):
        return "initial"
    if summary.startswith("restore "):
        return "restore"
    return "hand"


def _kind_name(version: Version) -> str:
    """`manual edit` from `manual edit: USER.md +1 -0`."""
    return version.summary.split(":", 1)[0]


def _committed_index(committed: list[str], live: list[str], index: int) -> int | None:
    """Where line `index` of the live file is in the newest version; None when it was
    written since (a change not committed yet)."""
    if committed == live:
        return index
    matcher = difflib.SequenceMatcher(a=committed, b=live, autojunk=False)
    for block in matcher.get_matching_blocks():
        if block.b <= index < block.b + block.size:
            return block.a + (index - block.b)
    return None


def _ranked(text: str, entries: list[HistoryEntry]) -> list[HistoryEntry]:
    """The entries that share words with `text`, closest first."""
    wanted = evidence.words(text)
    scored = [(evidence.resemblance(text, e.content), e) for e in entries]
    ranked = sorted(scored, key=lambda pair: -pair[0])
    return [e for _, e in ranked if wanted & evidence.words(e.content)]


def _best_line(text: str, content: str) -> str:
    """The line of an entry that supports `text` best (an entry holds several facts)."""
    lines = [line.strip() for line in content.splitlines() if line.strip()] or [content]
    return max(lines, key=lambda line: evidence.resemblance(text, line))


def _may_quote(session: str, audience: Audience | None) -> bool:
    return audience is None or audience.personal or session == audience.session


def _chat(session: str, audience: Audience | None) -> str:
    """`telegram chat 42`, `the chat cli:direct`; in a group, another chat is not named."""
    if not _may_quote(session, audience):
        return "another conversation"
    channel, _, chat = session.partition(":")
    chat, _, topic = chat.partition(":")
    if not chat.lstrip("-").isdigit():  # known by a name (cli:direct): people type its key
        return f"the chat {session}"
    return f"{channel} chat {chat}" + (f" (topic {topic})" if topic else "")


def _is_personal(rel: str) -> bool:
    return any(rel == path or rel.startswith(f"{path}/") for path in PERSONAL_PATHS)


def _when(version: Version) -> str:
    return version.time.strftime("%Y-%m-%d %H:%M")


def _clip(text: str, limit: int = QUOTE_CHARS) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"

"""The evidence a Dream run records in its commit, as git trailers: the history entries it read
and, where its analysis cited them, which entries each new line came from. `/why` reads them
back to trace a memory line to the conversation that taught it.

    Dream-Cursor: 57
    Dream-Read: 41-57
    Dream-Entry: 52 2026-11-22T10:03:00+01:00 telegram:42
    Dream-Source: USER.md 52,53 "- Lives in Quito"

A model that cites nothing still gets the first three: the reader falls back to the run's
entries. Trailers are plain `Key: value` lines, so `git log` and git's trailer tools read them.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from nanomem.features.dream.journal import CURSOR_TRAILER, Edit
from nanomem.memory import HistoryEntry

READ_TRAILER = "Dream-Read"
ENTRY_TRAILER = "Dream-Entry"
SOURCE_TRAILER = "Dream-Source"
MAX_LINE_CHARS = 240  # of a memory line kept in a Dream-Source trailer
CITED_ENOUGH = 0.5  # resemblance from which an edit is taken to implement an analysis item

# "entry 12", "entries 12, 13", "entries 12-14", "[12]", "[#12, #13]", "(12)"
_NUMBERS = r"#?\d+(?:\s*(?:,|and|&|-|–)\s*#?\d+)*"
_CITATIONS = re.compile(
    rf"\bentr(?:y|ies)\s*({_NUMBERS})|[\[(]\s*({_NUMBERS})\s*[\])]", re.IGNORECASE
)
_WORD = re.compile(r"\w+")
# Words that say nothing about which line is meant ("why do you think I live in Quito?").
# fmt: off
_FILLER = frozenset({
    "a", "an", "and", "are", "as", "at", "be", "but", "by", "did", "do", "does", "for", "from",
    "had", "has", "have", "how", "i", "im", "in", "is", "it", "its", "me", "my", "of", "on",
    "or", "so", "that", "the", "their", "them", "they", "think", "this", "to", "was", "we",
    "were", "what", "when", "where", "who", "why", "with", "you", "your", "remember", "know",
    "believe",
})
# fmt: on


@dataclass(frozen=True)
class EntryRef:
    cursor: int
    timestamp: str
    session: str


@dataclass(frozen=True)
class Source:
    file: str
    cursors: tuple[int, ...]
    line: str


@dataclass(frozen=True)
class Evidence:
    """What one commit's trailers say (empty for a commit Dream did not make)."""

    cursor: int | None = None
    read: tuple[int, int] | None = None
    entries: dict[int, EntryRef] = field(default_factory=dict)
    sources: tuple[Source, ...] = ()

    def cited(self, file: str, line: str) -> tuple[int, ...]:
        """The entries the run cited for this line of `file`; () when it cited none."""
        wanted = line.strip()[:MAX_LINE_CHARS]
        for source in self.sources:
            if source.file == file and source.line.strip() == wanted:
                return source.cursors
        return ()


# -- writing (Dream) ----------------------------------------------------------------------


def trailers(
    read: tuple[int, int],
    entries: Sequence[HistoryEntry],
    analysis: str,
    edits: Iterable[Edit],
    final: dict[str, str],
) -> list[str]:
    """The trailer lines for a run that read history `read` (first, last cursor), gave the
    model `entries`, analysed them as `analysis` and made `edits`, leaving the files `final`."""
    lines = [f"{READ_TRAILER}: {read[0]}-{read[1]}"]
    lines += [f"{ENTRY_TRAILER}: {e.cursor} {e.timestamp} {e.session}" for e in entries]
    items = cited_items(analysis, {e.cursor for e in entries})
    seen: set[tuple[str, str]] = set()
    for edit in edits:
        kept = {line.strip() for line in final.get(edit.file, "").splitlines()}
        for line in added_lines(edit):
            text = line.strip()
            if not text or text not in kept or (edit.file, text) in seen:
                continue
            seen.add((edit.file, text))
            cursors = _best_citation(text, items)
            if cursors:
                cited = ",".join(str(c) for c in cursors)
                quoted = json.dumps(text[:MAX_LINE_CHARS], ensure_ascii=False)
                lines.append(f"{SOURCE_TRAILER}: {edit.file} {cited} {quoted}")
    return lines


def cited_items(analysis: str, known: set[int]) -> list[tuple[str, tuple[int, ...]]]:
    """The analysis's lines that cite entries of this run: (the line's words, the cursors)."""
    items = []
    for line in analysis.splitlines():
        cursors: set[int] = set()
        for match in _CITATIONS.finditer(line):
            cursors.update(_numbers(match.group(1) or match.group(2)))
        cursors &= known  # a number that is no entry of this run is no citation
        if cursors:
            items.append((_CITATIONS.sub(" ", line), tuple(sorted(cursors))))
    return items


def _numbers(text: str) -> set[int]:
    found: set[int] = set()
    for part in re.split(r"\s*(?:,|and|&)\s*", text.strip()):
        if single := re.fullmatch(r"#?(\d+)", part):
            found.add(int(single.group(1)))
        elif span := re.fullmatch(r"#?(\d+)\s*[-–]\s*#?(\d+)", part):
            first, last = int(span.group(1)), int(span.group(2))
            if 0 <= last - first <= 100:  # a range such as 12-14 (not a date)
                found.update(range(first, last + 1))
    return found


def added_lines(edit: Edit) -> list[str]:
    """The lines an edit brought in (not those it kept from its old text)."""
    new = edit.new.splitlines()
    if edit.kind == "append":
        return new
    matcher = difflib.SequenceMatcher(a=edit.old.splitlines(), b=new, autojunk=False)
    return [
        line
        for tag, _, _, j1, j2 in matcher.get_opcodes()
        if tag in ("insert", "replace")
        for line in new[j1:j2]
    ]


def _best_citation(line: str, items: list[tuple[str, tuple[int, ...]]]) -> tuple[int, ...]:
    scored = [(resemblance(line, text), cursors) for text, cursors in items]
    best = max(scored, default=(0.0, ()), key=lambda pair: pair[0])
    return best[1] if best[0] >= CITED_ENOUGH else ()


# -- reading (/why) -----------------------------------------------------------------------


def parse(message: str) -> Evidence:
    """The evidence in a commit message's trailer paragraph (its last one)."""
    paragraphs = message.strip().split("\n\n")
    if len(paragraphs) < 2:
        return Evidence()
    cursor, read = None, None
    entries: dict[int, EntryRef] = {}
    sources: list[Source] = []
    for line in paragraphs[-1].splitlines():
        key, sep, value = line.partition(":")
        value = value.strip()
        if not sep:
            continue
        try:
            if key == CURSOR_TRAILER:
                cursor = int(value)
            elif key == READ_TRAILER:
                first, _, last = value.partition("-")
                read = (int(first), int(last))
            elif key == ENTRY_TRAILER:
                number, stamp, session = value.split(" ", 2)
                entries[int(number)] = EntryRef(int(number), stamp, session)
            elif key == SOURCE_TRAILER:
                file, cited, quoted = value.split(" ", 2)
                cursors = tuple(int(n) for n in cited.split(","))
                sources.append(Source(file, cursors, str(json.loads(quoted))))
        except ValueError:  # a trailer someone wrote by hand: not ours to trust
            continue
    return Evidence(cursor, read, entries, tuple(sources))


def words(text: str) -> set[str]:
    """The words that carry meaning, cut to 4 letters (`lives` and `live` are one word)."""
    return {w[:4] for w in _WORD.findall(text.casefold()) if len(w) > 1 and w not in _FILLER}


def resemblance(query: str, text: str) -> float:
    """0..1: how well `text` matches `query`: the share of the query's words it holds, and
    how alike the two read as strings."""
    wanted = words(query)
    if not wanted:
        return 0.0
    held = len(wanted & words(text)) / len(wanted)
    ratio = difflib.SequenceMatcher(a=query.casefold(), b=text.casefold()).ratio()
    return 0.7 * held + 0.3 * ratio

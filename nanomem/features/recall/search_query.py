"""A history search query: the words asked for, as a safe and bounded FTS5 query.

Bounded because a query's cost grows with its terms: 2,500 copies of `a*` once took 47 s over
20,000 entries. The text is cut to MAX_CHARS, the same term counts once, at most MAX_TERMS
words are searched, and a prefix shorter than MIN_PREFIX (`a*` matches nearly everything) is
searched as a whole word. Every cut is said in `notes`, so the model can ask better. The
dates a search is given are read here too.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from datetime import datetime, time, timedelta, tzinfo

from nanomem.tools import ToolError

MAX_CHARS = 512
MAX_TERMS = 32  # words, counting each word of a phrase
MIN_PREFIX = 3
# A query term: a "quoted phrase", or a run of non-space characters (maybe ending in `*`).
_TERM = re.compile(r'"([^"]*)"?|(\S+)')
# What the unicode61 tokenizer keeps as a word: letters and digits (`_` separates words).
_WORD = re.compile(r"[^\W_]+")


@dataclass(frozen=True)
class Query:
    terms: tuple[str, ...]  # each quoted for FTS5, a prefix with `*` after the quotes
    notes: tuple[str, ...] = ()

    def match(self, *, any_word: bool = False) -> str | None:
        """The FTS5 expression on the content column: all terms, or with `any_word` any."""
        if not self.terms:
            return None
        return "content : (" + (" OR " if any_word else " ").join(self.terms) + ")"


def parse_query(text: str) -> Query:
    """Every term quoted (so `AND`, `-`, `:`, `(` mean nothing special), `word*` kept as a
    prefix, "a phrase" kept as a phrase; terms without a letter or digit dropped."""
    notes: list[str] = []
    if len(text) > MAX_CHARS:
        notes.append(f"The query was cut to its first {MAX_CHARS} characters.")
        text = text[:MAX_CHARS]
    text = text.replace("\x00", " ")  # SQLite ends a query string at NUL: "unterminated string"
    terms: list[str] = []
    seen: set[str] = set()
    short: list[str] = []
    budget, dropped = MAX_TERMS, 0
    for found in _TERM.finditer(text):
        phrase, bare = found.group(1), found.group(2)
        raw = phrase if phrase is not None else bare
        prefix = phrase is None and raw.endswith("*")
        words = _WORD.findall(raw)
        if not words:
            continue
        if len(words) > budget:
            dropped += len(words) - budget
            words, prefix = words[:budget], False
            if not words:
                continue
            raw = " ".join(words)
        if prefix and len(words[-1]) < MIN_PREFIX:
            short.append(raw.rstrip("*") + "*")
            prefix = False
        quoted = '"' + (raw.rstrip("*") if phrase is None else raw).replace('"', '""') + '"'
        term = quoted + "*" if prefix else quoted
        if term.lower() in seen:
            continue  # the same term twice finds the same entries, at twice the cost
        seen.add(term.lower())
        terms.append(term)
        budget -= len(words)
    if dropped:
        notes.append(f"Only the first {MAX_TERMS} words were searched ({dropped} more left out).")
    if short:
        listed = ", ".join(dict.fromkeys(short[:5]))
        notes.append(
            f"A prefix needs at least {MIN_PREFIX} letters: {listed} searched as whole words."
        )
    return Query(tuple(terms), tuple(notes))


def marked(snippet: str, query: str) -> list[tuple[str, bool]]:
    """The snippet in pieces, each with whether it is a word the query matched (the web
    app's Recall marks them): words compared as the index's tokenizer does, case and accents
    ignored, `word*` as a prefix."""
    whole: set[str] = set()
    prefixes: list[str] = []
    for term in parse_query(query).terms:
        words = [_folded(w) for w in _WORD.findall(term.rstrip("*")[1:-1].replace('""', '"'))]
        if term.endswith("*") and words:
            prefixes.append(words.pop())
        whole.update(words)
    pieces: list[tuple[str, bool]] = []
    done = 0
    for found in _WORD.finditer(snippet):
        word = _folded(found.group())
        if word in whole or any(word.startswith(p) for p in prefixes):
            if found.start() > done:
                pieces.append((snippet[done : found.start()], False))
            pieces.append((found.group(), True))
            done = found.end()
    if done < len(snippet):
        pieces.append((snippet[done:], False))
    return pieces


def _folded(word: str) -> str:
    """As unicode61 with remove_diacritics compares words: case and accents ignored."""
    decomposed = unicodedata.normalize("NFKD", word.casefold())
    return "".join(c for c in decomposed if not unicodedata.combining(c))


def parse_day(text: str, *, end: bool, zone: tzinfo | None = None) -> float:
    """A date (`2026-11-22`) or ISO 8601 time as epoch seconds; a bare date means its start
    (or, with `end`, the start of the next day); naive times are in `zone` (agent.timezone,
    as schedules read them), or the machine's local time without one."""
    try:
        if len(text.strip()) == 10:
            day = datetime.combine(datetime.fromisoformat(text.strip()).date(), time())
            moment = day + timedelta(days=1) if end else day
        else:
            moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ToolError(f"{text!r} is not a date (YYYY-MM-DD) or an ISO 8601 time") from None
    if moment.tzinfo is None and zone is not None:
        moment = moment.replace(tzinfo=zone)
    try:
        return moment.astimezone().timestamp()
    except (OverflowError, ValueError):  # the years 1 and 9999 shifted by a zone
        raise ToolError(f"{text!r} is out of range: give a date from 0002 to 9998") from None

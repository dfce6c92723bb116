"""A unified diff of the memory files (a version's, or a Dream change waiting for review) as
lines with classes for the page to colour: added, removed, context, hunk headers. A huge diff
is cut with a note; every line stays text (the template escapes it)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal

MAX_LINES = 400  # shown per diff; the rest is counted in a note
MAX_LINE_CHARS = 2_000  # a longer line is cut: one line of a 2 MB file is still one line
HUNK = re.compile(r"@@ -\d+(?:,(\d+))? \+\d+(?:,(\d+))? @@")
Kind = Literal["add", "del", "ctx", "hunk", "meta"]


@dataclass(frozen=True)
class Line:
    kind: Kind
    text: str


@dataclass
class FileDiff:
    path: str
    lines: list[Line] = field(default_factory=list)
    added: int = 0
    removed: int = 0


@dataclass(frozen=True)
class Diff:
    files: list[FileDiff]
    cut: int  # changed or context lines not shown

    @property
    def empty(self) -> bool:
        return not self.files


def parse(diff: str, max_lines: int = MAX_LINES) -> Diff:
    """Both git's (`diff --git` headers) and difflib's (`---`/`+++` only) form. Header lines
    are told from content by the hunks' counts, so a removed line `-- x` is no header."""
    files: list[FileDiff] = []
    current: FileDiff | None = None
    old_left = new_left = 0  # lines of the current hunk still to come
    shown = cut = 0
    headed = False  # a `diff --git` line came, its `+++` not yet
    for raw in diff.splitlines():
        if old_left <= 0 and new_left <= 0:
            if raw.startswith("diff --git "):
                current, headed = FileDiff(raw.split(" b/", 1)[-1]), True
                files.append(current)
                continue
            if raw.startswith("+++ "):
                if not headed:  # difflib's form: no `diff --git` line first
                    path = raw[4:].strip()
                    current = FileDiff(path[2:] if path.startswith("b/") else path)
                    files.append(current)
                headed = False
                continue
            hunk = HUNK.match(raw)
            if current is None or hunk is None:
                continue  # `---`, index and mode lines: the file's name says it all
            old_left = int(hunk.group(1) or 1)
            new_left = int(hunk.group(2) or 1)
            kind: Kind = "hunk"
        elif raw.startswith("+"):
            kind, new_left = "add", new_left - 1
        elif raw.startswith("-"):
            kind, old_left = "del", old_left - 1
        elif raw.startswith("\\"):
            kind = "meta"
        else:
            kind, old_left, new_left = "ctx", old_left - 1, new_left - 1
        if current is None:
            continue
        if kind == "add":
            current.added += 1
        elif kind == "del":
            current.removed += 1
        if shown >= max_lines:
            cut += 1
            continue
        text = raw if len(raw) <= MAX_LINE_CHARS else raw[:MAX_LINE_CHARS] + " …"
        current.lines.append(Line(kind, text))
        shown += 1
    return Diff(files, cut)


def changed_lines(diff: str) -> tuple[list[str], list[str]]:
    """The texts of the added and of the removed lines (without their + or -)."""
    added: list[str] = []
    removed: list[str] = []
    for file in parse(diff, max_lines=10**9).files:
        for line in file.lines:
            if line.kind == "add":
                added.append(line.text[1:])
            elif line.kind == "del":
                removed.append(line.text[1:])
    return added, removed

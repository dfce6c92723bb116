"""A text longer than a channel takes, split into messages where a reader would pause: between
paragraphs, else lines, else words, else anywhere, each piece measured the channel's way
(`Capabilities.measure`). A fenced code block stays whole in one piece when it fits one; when
it cannot, it is cut between its lines, closed at the end of a piece and opened again (same
info string) at the start of the next, so every piece shows code as code."""

from __future__ import annotations

import bisect
import re
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass

from nanomem.text.markdown_plain import plain_text

__all__ = ["Measure", "plain_text", "split_text"]

Measure = Callable[[str], int]

# An opening fence: after any quote markers, indentation and one list marker, three or more
# backticks or tildes; a backtick fence's info string has no backtick (CommonMark).
_OPENER = re.compile(r"(?P<lead>[ \t>]*(?:(?:[-*+]|\d{1,9}[.)])[ \t]+)?)(?P<fence>`{3,}|~{3,})")
_CLOSER = re.compile(r"(?P<lead>[ \t>]*)(?P<fence>`{3,}|~{3,})[ \t]*")
_ENTITY_START = re.compile(r"&#?[A-Za-z0-9]{0,31}$")
_SPAN = 256  # how far around a space a code span or a link's text is looked for
_JOINERS = frozenset("\u200d\ufe0e\ufe0f\r")  # a cut after these splits what they join
# Joined characters a cut is moved back over, at most: a longer run (a hostile run of combining
# marks) is cut anyway, not into one-character pieces each measuring a whole piece's worth.
_CLUSTER = 32


@dataclass(frozen=True)
class _Fence:
    start: int  # its opening line's first character
    body: int  # its first code line's
    end: int  # its closing line's (len(text) when it is never closed)
    stop: int  # just after its closing line
    reopen: str  # the line that opens it again in the next piece
    close: str  # the line that closes it at the end of a piece


def _fences(text: str) -> list[_Fence]:
    fences: list[_Fence] = []
    opened: tuple[int, int, str, str] | None = None  # start, body, lead, fence and info
    pos = 0
    for line in text.split("\n"):
        after = pos + len(line) + 1
        if opened is None:
            if (m := _OPENER.match(line)) and not (m["fence"][0] == "`" and "`" in line[m.end() :]):
                opened = (pos, after, m["lead"], line[len(m["lead"]) :].rstrip())
        elif (m := _CLOSER.fullmatch(line)) and _closes(m["fence"], opened[3]):
            start, body, _, opener = opened
            lead = m["lead"]
            fences.append(_Fence(start, body, pos, pos + len(line), lead + opener, line))
            opened = None
        pos = after
    if opened is not None:
        start, body, lead, opener = opened
        lead = re.sub(r"[^ \t>]", " ", lead)  # a list item's marker becomes its indentation
        fence = re.match(r"`+|~+", opener)
        close = lead + (fence[0] if fence else "```")
        fences.append(
            _Fence(start, min(body, len(text)), len(text), len(text), lead + opener, close)
        )
    return fences


def _closes(fence: str, opener: str) -> bool:
    return fence[0] == opener[0] and len(fence) >= len(opener) - len(opener.lstrip(opener[0]))


def split_text(
    text: str, limit: int, measure: Measure | None = None, *, fences: bool = True
) -> list[str]:
    """Pieces of `text` each at most `limit` by `measure` (characters when None), cut where a
    reader would pause. `fences`: the text is Markdown, whose code fences are kept whole or
    closed and reopened around a cut, and whose code spans and links' text are not cut at a
    space. Measuring costs a few calls per piece, each on about a
    piece's length, so a long text costs about linearly in its length."""
    return _Splitter(text, limit, measure or len, fences).pieces()


class _Splitter:
    def __init__(self, text: str, limit: int, measure: Measure, markdown: bool) -> None:
        self.text, self.limit, self.measure = text, limit, measure
        self.markdown = markdown
        self.fences = _fences(text) if markdown else []
        self.starts = [f.start for f in self.fences]
        self.fits: dict[int, bool] = {}  # fence start → fits one piece whole
        self.last_lines: dict[int, int] = {}  # fence start → its last code line's start

    def pieces(self) -> list[str]:
        text, n = self.text, len(self.text)
        if self.measure(text) <= self.limit:
            return [text]
        out: list[str] = []
        start = 0
        while start < n:
            cut = self._cut(start)
            if (piece := self._piece(start, cut)).strip():
                out.append(piece)
            start = self._skip(cut)
        return out or [text]

    def _fence_at(self, at: int) -> _Fence | None:
        """The fence whose lines hold position `at`."""
        k = bisect.bisect_right(self.starts, at) - 1
        return self.fences[k] if k >= 0 and at < self.fences[k].stop else None

    def _in_code(self, at: int) -> _Fence | None:
        """The fence whose code `at` lies in (its code lines, not its fence lines)."""
        fence = self._fence_at(at)
        return fence if fence is not None and fence.body <= at < fence.end else None

    def _piece(self, start: int, end: int) -> str:
        inside, closing = self._in_code(start), self._in_code(end) if end < len(self.text) else None
        head = f"{inside.reopen}\n" if inside is not None else ""
        if closing is not None and closing.body < end:
            return head + self.text[start:end].rstrip("\n") + "\n" + closing.close
        return head + self.text[start:end].rstrip()

    def _skip(self, at: int) -> int:
        """Where the next piece starts after a cut at `at`: past the whitespace between them,
        but not past a code line's indentation."""
        text, n = self.text, len(self.text)
        code = self._in_code(at)
        while at < n and (text[at] == "\n" or (text[at] == " " and code is None)):
            at += 1
            if code is not None and at >= self._last_line(code):
                break
            code = self._in_code(at) if code is None else code
        return at

    def _fits(self, start: int, end: int) -> bool:
        return self.measure(self._piece(start, end)) <= self.limit

    def _fit(self, start: int) -> int:
        """The furthest end whose piece fits: a few measures guessed by proportion (exact for
        a measure that counts characters), bisecting after two guesses that did not halve the
        range, until within 0.4% of it; `start` when not even one character fits."""
        n, limit = len(self.text), self.limit
        lo, lo_size = start, 0
        hi: int | None = None
        hi_size, slow = 0, 0
        # Near enough: a break is looked for before it anyway, and each measure may render.
        while lo_size < limit and (hi is None or hi - lo > max(1, (lo - start) // 256)):
            if hi is None:  # no misfit yet: grow by the proportion seen, at most doubling
                seen = lo - start
                grow = min(seen * limit // max(lo_size, 1), 2 * seen) if seen else limit
                guess = min(max(start + grow, lo + 1 + seen // 64), n)
            elif slow >= 2:  # two guesses in a row that did not halve the range
                guess, slow = (lo + hi) // 2, 0
            else:
                guess = lo + (hi - lo) * (limit - lo_size) // max(hi_size - lo_size, 1)
            guess = max(lo + 1, guess if hi is None else min(guess, hi - 1))
            width = None if hi is None else hi - lo
            size = self.measure(self._piece(start, guess))
            if size <= limit:
                lo, lo_size = guess, size
                if lo >= n:
                    break
            else:
                hi, hi_size = guess, size
            slow = slow + 1 if hi is not None and width is not None and (hi - lo) * 2 > width else 0
        return lo

    def _cut(self, start: int) -> int:
        fit = self._fit(start)
        if fit >= len(self.text):
            return fit
        if fit == start:  # not even a character fits: one goes alone
            return start + 1
        least = fit  # measured: it fits
        for _ in range(8):
            cut = self._best(start, fit)
            if cut == least or self._fits(start, cut):
                return cut
            fit = cut - 1  # the measure is not monotonic here: look before this cut
            if fit <= start:
                break
        return least

    def _best(self, start: int, fit: int) -> int:
        """The last paragraph break up to `fit`, else line break, else space, else `fit`."""
        boundary = self._boundary(start, fit)
        for mark in ("\n\n", "\n", " "):
            at = self._last(mark, start, fit)
            if mark == "\n\n" and boundary > max(at, start):
                return boundary
            if at > start:
                return at
        if boundary > start:
            return boundary
        return self._hard(start, fit)

    def _boundary(self, start: int, fit: int) -> int:
        """The last fence start or end up to `fit` (a cut there keeps the fence whole)."""
        k = bisect.bisect_right(self.starts, fit) - 1
        while k >= 0:
            fence = self.fences[k]
            if start < fence.stop <= fit:
                return fence.stop
            if start < fence.start:
                return fence.start
            k -= 1
            if fence.start <= start:
                break
        return start

    def _last(self, mark: str, start: int, fit: int) -> int:
        """The last `mark` at or before `fit` where a cut is allowed; `start` when none is."""
        end, spans = fit + len(mark), 64  # spaces in code or a link passed over, at most
        while (at := self.text.rfind(mark, start + 1, end)) > start:
            fence = self._fence_at(at)
            if fence is None and mark == " " and self.markdown and spans and self._in_span(at):
                end, spans = at, spans - 1
                continue
            if fence is None:
                return at
            # In code only between its lines, and only when it cannot stay whole.
            inner = mark != " " and fence.body <= at and not self._whole(fence)
            if inner and at < (last := self._last_line(fence)):
                return at
            end = (last if inner else fence.start) + len(mark) - 1
        return start

    def _in_span(self, at: int) -> bool:
        """A space inside inline code or a link's text: a cut there would show their markers."""
        text = self.text
        line = text.rfind("\n", max(0, at - _SPAN), at) + 1 or max(0, at - _SPAN)
        before = text[line:at]
        if before.count("`") % 2:
            return True
        if before.rfind("[") <= before.rfind("]"):
            return False
        close = text.find("]", at, at + _SPAN)
        return close > 0 and text.startswith("(", close + 1) and "\n" not in text[at:close]

    def _whole(self, fence: _Fence) -> bool:
        if fence.start not in self.fits:
            whole = self.text[fence.start : fence.stop]
            self.fits[fence.start] = self.measure(whole) <= self.limit
        return self.fits[fence.start]

    def _last_line(self, fence: _Fence) -> int:
        """Where its last code line with anything on it starts."""
        if fence.start not in self.last_lines:
            last = fence.body + len(self.text[fence.body : fence.end].rstrip("\n"))
            self.last_lines[fence.start] = self.text.rfind("\n", fence.body, last) + 1 or fence.body
        return self.last_lines[fence.start]

    def _hard(self, start: int, fit: int) -> int:
        """`fit`, moved back off a cut that would break a character, an escape or an entity."""
        text, at = self.text, fit
        fence = self._fence_at(at)
        if fence is not None and fence.start > start and (self._whole(fence) or at < fence.body):
            return fence.start
        floor = max(start + 1, fit - _CLUSTER)
        while at > floor and (
            text[at - 1] in _JOINERS
            or unicodedata.combining(text[at])
            or "\udc00" <= text[at] <= "\udfff"
            or text[at] in "\u200d\ufe0e\ufe0f"
        ):
            at -= 1
        if at == floor and floor > start + 1:
            at = fit  # no character is that long: a run of marks is cut where it fills a piece
        run = at  # an odd run of backslashes ends in one escaping the next character
        while run > start and text[run - 1] == "\\":
            run -= 1
        if (at - run) % 2 and at - 1 > start:
            at -= 1
        if (m := _ENTITY_START.search(text, max(start + 1, at - 32), at)) and m.end() == at:
            at = m.start() if m.start() > start else at
        return at

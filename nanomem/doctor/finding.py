"""What one check found: passed, a warning that does not fail, or a failure with its fix."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Literal

from nanomem.text.escapes import strip_escapes
from nanomem.text.masking import redact

Level = Literal["ok", "warn", "fail"]
MARKS: dict[Level, str] = {"ok": "✓", "warn": "!", "fail": "✗"}


@dataclass(frozen=True)
class Finding:
    name: str
    level: Level
    found: str
    fix: str = ""  # a command or a setting; for a warning, what would help

    @staticmethod
    def ok(name: str, found: str) -> Finding:
        return Finding(name, "ok", found)

    @staticmethod
    def warn(name: str, found: str, fix: str = "") -> Finding:
        return Finding(name, "warn", found, fix)

    @staticmethod
    def fail(name: str, found: str, fix: str = "") -> Finding:
        return Finding(name, "fail", found, fix)

    def line(self, width: int) -> str:
        """One line: the mark, the name, what was found, and the fix (never a known secret,
        never a terminal escape from what a server said)."""
        fix = f" → {self.fix}" if self.fix else ""
        text = strip_escapes(redact(f"{self.found}{fix}"))
        return f"{MARKS[self.level]} {self.name.ljust(width)}  {' '.join(text.split())}"


async def within(name: str, seconds: float, check: Callable[[], Awaitable[Finding]]) -> Finding:
    """The check's finding, or a failure saying it did not finish within `seconds`; an
    unexpected error becomes a failure too (one check never stops the others)."""
    try:
        return await asyncio.wait_for(check(), seconds)
    except TimeoutError:
        return Finding.fail(name, f"no result within {seconds:g} s")
    except Exception as exc:  # the doctor's own boundary: a line, never a traceback
        return Finding.fail(name, f"the check failed: {type(exc).__name__}: {exc}")

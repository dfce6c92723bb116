"""Where a long command is: one line rewritten in place on a terminal, one line per phase
elsewhere (a log, a pipe, cron's mail)."""

from __future__ import annotations

from typing import TextIO

from nanomem.text.escapes import strip_escapes

CLEAR = "\r\x1b[K"  # to the start of the line, and erase it


class ProgressLine:
    def __init__(self, stream: TextIO, prefix: str) -> None:
        self.stream = stream
        self.prefix = prefix
        self.live = stream.isatty()
        self._shown = False

    def __call__(self, phase: str) -> None:
        phase = strip_escapes(phase)  # a tool call's arguments, as the model wrote them
        if self.live:
            self.stream.write(f"{CLEAR}{self.prefix}: {phase}…")
            self._shown = True
        else:
            self.stream.write(f"{self.prefix}: {phase}\n")
        self.stream.flush()

    def clear(self) -> None:
        """Leave the terminal's line empty for what is printed next."""
        if self._shown:
            self.stream.write(CLEAR)
            self.stream.flush()
            self._shown = False

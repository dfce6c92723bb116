"""`nanomem chat -m`: the reply written to stdout as it arrives."""

from __future__ import annotations

import sys
from pathlib import Path

from nanomem.agent import Delta, File, OutboundMessage
from nanomem.text.escapes import strip_escapes


class StdoutStream:
    """`chat -m` writes the reply as it arrives (flushed), so a pipe sees text early. Control
    sequences in it are dropped, on a terminal or not: the model's title changes and clipboard
    writes would act on whatever terminal the output reaches (`| tee`, a log read later).

    A reader that closes stdout early (`| head -3`) does not end the turn: it runs on and is
    saved, nothing more is written, and `check` raises BrokenPipeError after it for the
    command's one handler (cli/main.py). Raised from `show`, the loop would take it for an
    internal error of the turn."""

    def __init__(self, workspace: Path | None = None) -> None:
        self.workspace = workspace  # where a sent file's path starts
        self.step: int | None = None
        self.written = ""  # what the current step has put on stdout
        self.reader_gone = False

    async def show(self, out: OutboundMessage) -> None:
        if isinstance(piece := out.part, File):
            self._file(piece)
            return
        if not isinstance(piece, Delta):
            return
        step = piece.step
        if self.step is not None and step != self.step:
            self._write("\n\n")  # what came before a tool call stays; a new text begins
            self.written = ""
        self.step = step
        # From the step's whole text so far: a sequence split between pieces is still seen.
        text = strip_escapes(piece.so_far or self.written + piece.piece)
        if text.startswith(self.written):
            self._write(text[len(self.written) :])
            self.written = text

    def finish(self, reply: str) -> None:
        """The rest of the reply; all of it again if it is not what was streamed."""
        reply = strip_escapes(reply)
        if self.written and reply.startswith(self.written):
            rest = reply[len(self.written) :]
        else:
            self.end()
            rest = reply
        self._write(f"{rest}\n")

    def _file(self, part: File) -> None:
        """A file the turn sent: where it lies (and its caption), on lines of their own."""
        where = part.where(self.workspace)
        if self.written:
            self._write("\n\n")
            self.step, self.written = None, ""  # what follows starts afresh
        lines = [f"📎 {where}", *([part.caption] if part.caption else [])]
        self._write(strip_escapes("\n".join(lines)) + "\n\n")

    def end(self) -> None:
        if self.step is not None:
            self._write("\n")

    def check(self) -> None:
        """Raise BrokenPipeError when the reader closed stdout during the turn."""
        if self.reader_gone:
            raise BrokenPipeError("stdout's reader closed it")

    def _write(self, text: str) -> None:
        if self.reader_gone:
            return
        try:
            sys.stdout.write(text)
            sys.stdout.flush()
        except BrokenPipeError:
            self.reader_gone = True

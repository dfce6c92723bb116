"""What the agent said unasked in a chat nobody has open, until the chat shows it: a reminder
made in `nanomem chat` fires in the gateway while no terminal is open, or while one is. The
gateway's channel for that chat leaves the text here, a file per session under the home
(`unread/<session>.jsonl`, written under the home's `unread` lock, fsynced); the chat shows
what waits when it starts and, while open, within a second (one stat a second, the file read
only when something waits), then removes it. Shown at least once: a chat killed between
showing and removing shows it again at its next start."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from nanomem.home import Home
from nanomem.locks import FileLock

# Imported where used: `nanomem chat` builds an Unread before its prompt shows (start-up speed).

VERSION = 1
# Read at most this much (the newest): a file that grew for weeks with no chat open must flood
# neither the screen nor the memory.
MAX_BYTES = 256 * 1024


class Unread:
    """Blocking calls, each holding the home's `unread` lock: run them in a worker thread
    (`waiting` is one stat, cheap enough for the event loop)."""

    def __init__(self, directory: Path, lock: FileLock) -> None:
        self.directory, self.lock = directory, lock

    @classmethod
    def of(cls, home: Home) -> Unread:
        return cls(home.unread, home.lock("unread"))

    def path(self, session: str) -> Path:
        # Here, not at the top: `nanomem chat` builds this before its prompt shows.
        from nanomem.memory import session_filename  # the session's own safe name

        return self.directory / session_filename(session)

    def leave(self, session: str, text: str) -> None:
        import json
        from datetime import UTC, datetime

        from nanomem.durable import append_lines

        record = {"v": VERSION, "ts": datetime.now(UTC).isoformat(timespec="seconds"), "text": text}
        with self.lock.hold_sync():
            self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            append_lines(self.path(session), [json.dumps(record, ensure_ascii=False)])

    def waiting(self, session: str) -> bool:
        try:
            return self.path(session).stat().st_size > 0
        except OSError:
            return False

    def take(self, session: str) -> list[str]:
        """What waits for the chat, oldest first; none of it waits any more."""
        from nanomem.text import untrusted_json

        path = self.path(session)
        with self.lock.hold_sync():
            try:
                with path.open("rb") as fh:
                    size = os.fstat(fh.fileno()).st_size
                    fh.seek(max(0, size - MAX_BYTES))
                    data = fh.read(MAX_BYTES)
            except FileNotFoundError:
                return []
            path.unlink(missing_ok=True)
        lines = data.split(b"\n")
        if size > MAX_BYTES:
            lines = lines[1:]  # cut at the front: only whole ones are shown
        texts: list[str] = []
        for line in lines:
            with contextlib.suppress(ValueError):  # a torn or hand-edited line is skipped
                record = untrusted_json.loads(line)
                if isinstance(record, dict) and isinstance(record.get("text"), str):
                    texts.append(record["text"])
        return texts

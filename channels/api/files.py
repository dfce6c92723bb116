"""Files an agent API answer links to: `send_file`'s file, copied when it is sent, served at
`GET /v1/files/<id>` behind the API's keys until it expires.

A copy (not the workspace path): the link serves the file as it was when sent, whatever the
agent writes over it later, and no link planted in the workspace can change what it serves.
Each file is `<id>.bin` with a record `<id>.json` written after it (both write-temp-then-
rename): a file without its record is not served, and either is swept once expired. The id is
32 random URL-safe characters: unguessable, so the key and the id are both needed.
"""

from __future__ import annotations

import asyncio
import json
import mimetypes
import re
import secrets
import time
import urllib.parse
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from aiohttp import web
from loguru import logger

from channels.api.wire import error_body
from nanomem.agent import File, FileGone, file_bytes
from nanomem.durable import unlink_below, write_below

KEEP_S = 24 * 3600.0
_ID = re.compile(r"[A-Za-z0-9_-]{32}")


@dataclass(frozen=True)
class Stored:
    path: Path  # the copy
    name: str  # the file's name when sent
    mime: str


class SentFiles:
    """The copies, by id: `link` and `response` for the channel; the rest blocking."""

    def __init__(self, folder: Path, workspace: Path, keep_s: float = KEEP_S) -> None:
        self.folder, self.workspace, self.keep_s = folder, workspace, keep_s

    async def link(self, request: web.Request, part: File) -> str:
        """A file the turn sends, kept now: its Markdown link (after its caption), absolute
        when the request said which host it reached."""
        name = PurePosixPath(part.path).name
        try:
            file_id, name = await asyncio.to_thread(self.keep, part)
        except (FileGone, OSError) as exc:
            logger.warning("api: a sent file could not be kept: {}", exc)
            return f"(the file {name} could not be attached: {exc})"
        url = f"/v1/files/{file_id}"
        if request.host:
            url = f"{request.scheme}://{request.host}{url}"
        label = name.replace("\\", "\\\\").replace("[", "\\[").replace("]", "\\]")
        link = f"[{label}]({url})"
        return f"{part.caption}\n\n{link}" if part.caption else link

    async def response(self, file_id: str) -> web.StreamResponse:
        """The copy's bytes, to be saved (never shown as a page); 404 when there is none."""
        stored = await asyncio.to_thread(self.find, file_id)
        if stored is None:
            body = error_body(
                "No such file (the link is wrong, or it expired).",
                "invalid_request_error",
                "file_not_found",
            )
            return web.json_response(body, status=404)
        quoted = urllib.parse.quote(stored.name)
        plain = re.sub(r'[^\x20-\x7e]|["\\]', "_", stored.name)  # nothing breaks the header
        headers = {
            "Content-Type": stored.mime,
            "Content-Disposition": f"attachment; filename=\"{plain}\"; filename*=UTF-8''{quoted}",
            "X-Content-Type-Options": "nosniff",
        }
        return web.FileResponse(stored.path, headers=headers)

    def keep(self, part: File) -> tuple[str, str]:
        """Copy the file; (its id, its name). FileGone when it cannot be read now."""
        data = file_bytes(self.workspace, part.path)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.sweep()
        name = PurePosixPath(part.path).name
        mime = mimetypes.guess_type(name)[0] or "application/octet-stream"
        file_id = secrets.token_urlsafe(24)
        record = {"version": 1, "name": name, "mime": mime, "size": len(data), "at": time.time()}
        write_below(self.folder, Path(f"{file_id}.bin"), data)
        write_below(self.folder, Path(f"{file_id}.json"), json.dumps(record).encode())
        return file_id, name

    def find(self, file_id: str) -> Stored | None:
        """The copy under this id; None when there is none (or it expired)."""
        if not _ID.fullmatch(file_id):
            return None
        record = self._record(self.folder / f"{file_id}.json")
        if record is None:
            return None
        if time.time() - float(record["at"]) > self.keep_s:
            self._drop(file_id)
            return None
        copy = self.folder / f"{file_id}.bin"
        if not copy.is_file():
            return None
        return Stored(copy, str(record["name"]), str(record["mime"]))

    def sweep(self) -> None:
        """Drop what expired (and a copy whose record never came: a crash between the two)."""
        if not self.folder.is_dir():
            return
        now = time.time()
        for path in self.folder.iterdir():
            file_id, suffix = path.stem, path.suffix
            if not _ID.fullmatch(file_id):
                continue  # a temporary file being written
            if suffix == ".json":
                record = self._record(path)
                if record is None or now - float(record["at"]) > self.keep_s:
                    self._drop(file_id)
            elif suffix == ".bin" and not (self.folder / f"{file_id}.json").exists():
                try:
                    old = now - path.stat().st_mtime > 60  # not one being written now
                except FileNotFoundError:
                    continue
                if old:
                    self._drop(file_id)

    def _drop(self, file_id: str) -> None:
        for suffix in (".json", ".bin"):  # the record first: never a record without its copy
            unlink_below(self.folder, Path(f"{file_id}{suffix}"))

    @staticmethod
    def _record(path: Path) -> dict[str, Any] | None:
        try:
            record = json.loads(path.read_text("utf-8"))
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            logger.warning("api: an unreadable record of a sent file, {}: {}", path.name, exc)
            return None
        ok = isinstance(record, dict) and isinstance(record.get("at"), int | float)
        return record if ok and isinstance(record.get("name"), str) else None

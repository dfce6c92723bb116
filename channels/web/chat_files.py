"""Files in a web conversation. In: what the person drops, picks or records, read from a
bounded multipart form and told by its first bytes (an image, a PDF, a recording; nothing
else). Out: a `File` the turn sends (`send_file`) becomes a download link of that conversation
only, served from the workspace as the file tools read it, always as an attachment."""

from __future__ import annotations

import asyncio
import json
import re
import secrets
import time
import unicodedata
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from aiohttp import BodyPartReader, web

from nanomem.agent import File, FileGone, file_bytes, image_suffix
from nanomem.durable import atomic_write_text
from nanomem.text import untrusted_json
from nanomem.text.utf8 import clean_text

MAX_FILES = 10  # in one message
MAX_PARTS = MAX_FILES + 8  # of a form: the files, the words, the token, an empty file input
MAX_TEXT_BYTES = 1_000_000  # of the typed words in a form (the core's own limit is lower)
NAME_CHARS = 100  # of a file's name as shown
CHUNK = 64 * 1024
_ID = re.compile(r"[A-Za-z0-9_-]{32}")
# A recording, told by its first bytes: the ending it is saved under (the voice feature
# transcribes by ending).
_AUDIO = (
    (b"OggS", ".ogg"),
    (b"\x1aE\xdf\xa3", ".webm"),
    (b"ID3", ".mp3"),
    (b"fLaC", ".flac"),
)


class Refused(Exception):
    """A form the chat does not take; the message says why, to the person."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


@dataclass
class Form:
    text: str = ""
    files: list[tuple[str, str, bytes]] = field(default_factory=list)  # (field, name, bytes)


async def read_form(request: web.Request, max_mb: int) -> Form:
    """The message a browser posts: its words, and files within `max_mb` together (Refused:
    too big, too many, not a form we know). Nothing is saved here."""
    if request.content_type != "multipart/form-data":
        posted = await request.post()
        return Form(text=clean_text(str(posted.get("text", ""))))
    form = Form()
    reader = await request.multipart()
    parts = 0
    while (part := await reader.next()) is not None:
        parts += 1
        if parts > MAX_PARTS:  # each is bounded; so is how many (empty ones count too)
            raise Refused("That form has too many parts.")
        if not isinstance(part, BodyPartReader):
            raise Refused("That form is not one this page sends.")
        if part.name == "text":
            data = await _read(part, MAX_TEXT_BYTES, "That message is too long.")
            form.text = clean_text(data.decode("utf-8", "replace"))
        elif part.name in ("file", "voice") and part.filename is not None:
            if len(form.files) >= MAX_FILES:
                raise Refused(f"At most {MAX_FILES} files in one message.")
            too_big = f"That is more than {max_mb} MB of files (web.max_upload_mb)."
            left = max_mb * 2**20 - sum(len(data) for _, _, data in form.files)
            data = await _read(part, left, too_big)
            if data:
                form.files.append((part.name, part.filename, data))
        else:
            await _read(part, MAX_TEXT_BYTES, "That form is too big.")
    return form


async def _read(part: BodyPartReader, limit: int, too_big: str) -> bytes:
    chunks, size = [], 0
    while chunk := await part.read_chunk(CHUNK):
        size += len(chunk)
        if size > limit:
            raise Refused(too_big, 413)
        chunks.append(chunk)
    return b"".join(chunks)


def kind_of(data: bytes, recorded: bool) -> tuple[str, str] | None:
    """(the label's kind, the ending to save it under) of a file we take, by its first bytes;
    None for anything else. A recording made on the page is a voice note."""
    if (suffix := image_suffix(data)) is not None:
        return "photo", suffix
    if data.startswith(b"%PDF-"):
        return "document", ".pdf"
    if data[:4] == b"RIFF" and data[8:12] == b"WAVE":
        suffix = ".wav"
    elif data[4:8] == b"ftyp" and b"M4A" in data[8:12]:
        suffix = ".m4a"
    else:
        suffix = next((ending for magic, ending in _AUDIO if data.startswith(magic)), "")
    if not suffix:
        return None
    return ("voice", suffix) if recorded else ("audio", suffix)


def saved_name(suffix: str, recorded: bool) -> str:
    """A new, dated, unique name; a recording marked as the person's own voice (`.voice.`,
    the voice feature's mark: `is_own_voice`)."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    mark = ".voice" if recorded else ""
    return f"web-{stamp}-{secrets.token_hex(4)}{mark}{suffix}"


def shown_name(name: str) -> str:
    """A file's name as given (the person's, or the model's path), for its label: its last part,
    no control characters, not too long (shown as text, never markup). Format characters go
    too: a right-to-left override makes "invoice\u202efdp.exe" read as a PDF."""
    last = PurePosixPath(name.replace("\\", "/")).name
    kept = (ch for ch in clean_text(last) if unicodedata.category(ch) not in ("Cc", "Cf"))
    cleaned = re.sub(r"[\[\]]", "", "".join(kept)).strip()
    return cleaned[:NAME_CHARS] or "file"


# Out: the files a turn sends.


@dataclass(frozen=True)
class Sent:
    session: str
    path: str  # relative to the workspace
    name: str


class SentFiles:
    """Each sent file's record (`<id>.json`: its conversation, its path in the workspace),
    outside the workspace; the link names the id, so only a file sent to that conversation is
    served there, and only while it is in the workspace. Blocking methods."""

    def __init__(self, folder: Path, workspace: Path) -> None:
        self.folder, self.workspace = folder, workspace

    def add(self, session: str, part: File) -> tuple[str, str]:
        """(its id, its name)."""
        file_id = secrets.token_urlsafe(24)
        name = shown_name(part.path)
        record = {"version": 1, "session": session, "path": part.path, "name": name}
        atomic_write_text(self.folder / f"{file_id}.json", json.dumps(record), mode=0o600)
        return file_id, name

    def find(self, session: str, file_id: str) -> Sent | None:
        if not _ID.fullmatch(file_id):
            return None
        try:
            record: Any = untrusted_json.loads((self.folder / f"{file_id}.json").read_text())
        except (OSError, ValueError):
            return None
        if not isinstance(record, dict) or record.get("session") != session:
            return None
        path, name = record.get("path"), record.get("name")
        if not isinstance(path, str) or not isinstance(name, str):
            return None
        return Sent(session, path, name)

    async def response(self, session: str, file_id: str) -> web.StreamResponse:
        """The file's bytes, to be saved, never shown (an HTML file is not a page here)."""
        found = await asyncio.to_thread(self.find, session, file_id)
        if found is None:
            raise web.HTTPNotFound(text="No such file in this conversation.")
        try:
            data = await asyncio.to_thread(file_bytes, self.workspace, found.path)
        except FileGone:
            raise web.HTTPNotFound(text="That file is no longer in the workspace.") from None
        quoted = urllib.parse.quote(found.name, safe="")
        plain = re.sub(r'[^\x20-\x7e]|["\\;]', "_", found.name)
        disposition = f"attachment; filename=\"{plain}\"; filename*=UTF-8''{quoted}"
        headers = {"Content-Disposition": disposition, "X-Content-Type-Options": "nosniff"}
        return web.Response(body=data, content_type="application/octet-stream", headers=headers)


def file_url(conversation: str, file_id: str, name: str) -> str:
    return f"{conversation}/files/{file_id}/{urllib.parse.quote(name, safe='')}"

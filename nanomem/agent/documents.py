"""Documents a chat sends (PDFs, text, Markdown, CSV, JSON, source files), as text for the model
in the message that carried them. Other files stay a path in the runtime header.

The text is made once, when the message is saved, and stored with it in the session: a retry,
a replay and the Consolidator see what the model saw, the file may change or go later, and no
turn extracts again (per-turn work does not grow with the session)."""

from __future__ import annotations

import codecs
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from nanomem.pools import DOCUMENTS
from nanomem.text.plural import plural
from nanomem.tools import (
    IMAGE_TYPES,
    PdfUnreadable,
    ToolError,
    pdf_text,
    read_checked,
    untrusted,
)

if TYPE_CHECKING:
    from nanomem.config import DocumentSettings


def _suffixes(words: str) -> frozenset[str]:
    return frozenset(words.split())


# Telegram's Bot API hands out files up to 20 MB: nothing bigger arrives through a chat.
MAX_DOCUMENT_BYTES = 20 * 2**20
TEXT_SUFFIXES = _suffixes(
    ".txt .text .md .markdown .rst .org .tex .log .csv .tsv .json .jsonl .ndjson .yaml "
    ".yml .toml .ini .cfg .conf .env .xml .html .htm .css .scss .svg .sql .sh .bash .zsh "
    ".fish .ps1 .bat .py .pyi .ipynb .js .mjs .cjs .ts .tsx .jsx .java .kt .kts .scala "
    ".groovy .c .h .cc .cpp .cxx .hpp .hh .cs .go .rs .rb .php .pl .pm .lua .r .jl "
    ".swift .m .mm .dart .ex .exs .erl .hs .ml .clj .el .vim .nix .tf .proto .graphql "
    ".gradle .cmake .mk .dockerfile .diff .patch .srt .vtt .ics .vcf"
)
# Known binary kinds are not sniffed: a short binary could decode as UTF-8 by chance.
BINARY_SUFFIXES = _suffixes(
    ".zip .gz .tgz .bz2 .xz .7z .rar .tar .oga .ogg .opus .mp3 .m4a .wav .flac .mp4 .mov "
    ".mkv .webm .avi .doc .docx .xls .xlsx .ppt .pptx .odt .ods .epub .exe .dll .so .bin "
    ".apk .dmg .iso .sqlite .db"
) | frozenset(IMAGE_TYPES)
SNIFF_BYTES = 8192  # enough to tell text from binary


@dataclass(frozen=True)
class Document:
    name: str  # as the tools name it
    header: str  # "[document: report.pdf, 3 pages]"
    text: str | None  # None: a note in the header says why there is none


async def documents_text(
    root: Path, media: tuple[str, ...], limit: int, settings: DocumentSettings
) -> str:
    """The text of the documents among `media` (paths relative to `root`), each under its
    header and wrapped as outside text, at most `limit` characters of their text together,
    with a note saying how much was cut. Files are read in the documents pool's threads,
    PDFs parsed in a confined child process (tools/pdf.py)."""
    blocks: list[str] = []
    left = max(limit, 0)
    for relative in media:
        document = await _read(root, relative, left, settings)
        if document is None:
            continue
        if document.text is None:
            blocks.append(document.header)
            continue
        shown = document.text[:left]
        left -= len(shown)
        block = f"{document.header}\n{untrusted(f'document {document.name}', shown)}"
        if len(shown) < len(document.text):
            block += (
                f"\n[cut: {len(shown)} of {len(document.text)} characters shown "
                f"(agent.max_message_chars); the whole file is {relative}]"
            )
        blocks.append(block)
    return "\n\n".join(blocks)


async def _read(
    root: Path, relative: str, budget: int, settings: DocumentSettings
) -> Document | None:
    loaded = await DOCUMENTS.run(_load, root, relative)
    if not isinstance(loaded, bytes):
        return loaded
    return await _pdf((root / relative).name, loaded, budget, settings)


def _load(root: Path, relative: str) -> Document | bytes | None:
    """A text file's Document, a PDF's bytes (to be parsed), or None for other files."""
    root = root.resolve()
    path = root / relative
    suffix, name = path.suffix.lower(), path.name
    if suffix in BINARY_SUFFIXES:
        return None
    if suffix != ".pdf" and suffix not in TEXT_SUFFIXES and not _sniffs_as_text(root, relative):
        return None
    try:
        data = read_checked(root, path, relative, MAX_DOCUMENT_BYTES + 1)
    except ToolError as exc:
        return Document(name, f"[document: {name} could not be read: {exc}]", None)
    if len(data) > MAX_DOCUMENT_BYTES:
        return Document(name, f"[document: {name} is too large to read as text]", None)
    if suffix == ".pdf":
        return data
    text = data.decode("utf-8", errors="replace")
    return Document(name, f"[document: {name}, {len(text)} characters]", text)


def _sniffs_as_text(root: Path, relative: str) -> bool:
    """Whether the file's start decodes as UTF-8 without NUL bytes (a file of any name)."""
    try:
        head = read_checked(root, root / relative, relative, SNIFF_BYTES)
    except ToolError:
        return False
    if not head or b"\0" in head:
        return False
    try:  # not final: the read may end inside a character
        codecs.getincrementaldecoder("utf-8")().decode(head, final=False)
    except UnicodeDecodeError:
        return False
    return True


async def _pdf(name: str, data: bytes, budget: int, settings: DocumentSettings) -> Document:
    try:
        pdf = await pdf_text(data, budget, settings)
    except PdfUnreadable as exc:
        return _unreadable(name, str(exc))
    header = f"[document: {name}, {plural(pdf.pages, 'page')}"
    if pdf.note:
        header += f"; {pdf.note}"
    if not pdf.text:
        if pdf.note:
            return Document(name, f"{header}; no text in the pages read]", None)
        return Document(name, f"{header}; no text layer: it may be scanned images]", None)
    return Document(name, f"{header}]", pdf.text)


def _unreadable(name: str, reason: str) -> Document:
    return Document(name, f"[document: {name} could not be read as text: {reason}]", None)

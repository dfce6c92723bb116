"""The Memory page: SOUL.md, USER.md and MEMORY.md rendered, edited in place, each line's why.

An edit is one memory version (nanomem/memory/edits.py) with the summary the person typed,
refused when the file changed since the edit began; a line's why is /why's own answer
(features/dream/provenance.py), for the line clicked instead of the words typed."""

from __future__ import annotations

import asyncio
import functools
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from aiohttp import web

from channels.web.auth import changes_state, owner_only
from channels.web.markdown import markdown
from channels.web.render import page
from nanomem.features.dream import meaningful
from nanomem.memory import EditConflict, GitStoreError, digest, save_edit, shown

if TYPE_CHECKING:
    from markupsafe import Markup

    from channels.web.site import Site
    from nanomem.features.dream import Dreaming

SECTIONS = {"SOUL.md": "soul", "USER.md": "user", "memory/MEMORY.md": "memory"}
LINE_HASH_CHARS = 16
FENCE = ("```", "~~~")
HEADING = re.compile(r" {0,3}(#{1,6})(\s.*|$)")


@dataclass(frozen=True)
class Block:
    """One line of a memory file (or a whole fenced code block), rendered on its own, with
    its 1-based number in the file and whether /why can be asked of it."""

    number: int
    html: Markup
    askable: bool
    hash: str


def dreaming(site: Site) -> Dreaming:
    from nanomem.features.dream import Dreaming

    return site.app.feature(Dreaming)


def line_hash(text: str) -> str:
    return digest(text.encode("utf-8"))[:LINE_HASH_CHARS]


def blocks(content: str) -> list[Block]:
    """Each line its own block, so each has its why; a fenced code block stays whole."""
    lines = content.splitlines()
    found: list[Block] = []
    index = 0
    while index < len(lines):
        line = lines[index]
        start = index
        if line.lstrip().startswith(FENCE):
            fence = line.lstrip()[:3]
            index += 1
            while index < len(lines) and not lines[index].lstrip().startswith(fence):
                index += 1
            text = "\n".join(lines[start : index + 1])
            found.append(Block(start + 1, markdown(text), False, line_hash(line)))
        elif line.strip():
            askable = meaningful(line)
            found.append(Block(start + 1, markdown(_below(line)), askable, line_hash(line)))
        index += 1
    return found


def _below(line: str) -> str:
    """A file's heading two levels down (`# User` an h3): the page's h1 and the file's h2 are
    above it, for whoever finds their way by headings."""
    heading = HEADING.match(line)
    if heading is None:
        return line
    return "#" * min(len(heading.group(1)) + 2, 6) + heading.group(2)


def add_routes(web_app: web.Application, site: Site) -> None:
    web_app.router.add_get("/memory", owner_only(functools.partial(_page, site)))
    web_app.router.add_get("/memory/file", owner_only(functools.partial(_file, site)))
    web_app.router.add_get("/memory/edit", owner_only(functools.partial(_edit_form, site)))
    web_app.router.add_post("/memory/edit", changes_state(functools.partial(_save, site)))
    web_app.router.add_get("/memory/why", owner_only(functools.partial(_why, site)))


def _file_context(rel: str, content: bytes | None) -> dict[str, Any]:
    text = (content or b"").decode("utf-8", errors="replace")
    return {
        "rel": rel,
        "slug": SECTIONS[rel],
        "blocks": blocks(text),
        "absent": content is None,
        "quote": quote,
    }


def _files(site: Site) -> list[dict[str, Any]]:
    """Blocking (git, and Markdown for files of up to 2 MB)."""
    now = shown(site.app.git)
    return [_file_context(rel, now.files.get(rel)) for rel in SECTIONS]


async def _page(site: Site, request: web.Request) -> web.StreamResponse:
    try:
        files = await asyncio.to_thread(_files, site)
    except GitStoreError as exc:
        return page(request, "memory_page.html.j2", status=409, error=str(exc), files=[])
    return page(request, "memory_page.html.j2", error="", files=files)


def _chosen(request: web.Request, field: str = "file") -> str:
    rel = request.query.get(field, "")
    if rel not in SECTIONS:
        raise web.HTTPBadRequest(text="That is not a memory file.")
    return rel


async def _file(site: Site, request: web.Request) -> web.StreamResponse:
    rel = _chosen(request)
    try:
        files = await asyncio.to_thread(_files, site)
    except GitStoreError as exc:
        return page(request, "memory_error.html.j2", status=409, error=str(exc))
    return page(
        request, "memory_file.html.j2", **files[list(SECTIONS).index(rel)], saved="", focus=True
    )


async def _edit_form(site: Site, request: web.Request) -> web.StreamResponse:
    rel = _chosen(request)
    try:
        now = await asyncio.to_thread(shown, site.app.git)
    except GitStoreError as exc:
        return page(request, "memory_error.html.j2", status=409, error=str(exc))
    content = now.files.get(rel)
    return page(
        request,
        "memory_edit.html.j2",
        rel=rel,
        slug=SECTIONS[rel],
        text=(content or b"").decode("utf-8", errors="replace"),
        summary="",
        base=now.head or "",
        seen=now.digests[rel],
        error="",
        quote=quote,
    )


async def _save(site: Site, request: web.Request) -> web.StreamResponse:
    try:
        form = await request.post()
    except web.HTTPRequestEntityTooLarge:
        # Too big to read back into the form: the message goes beside it (see memory.js).
        return page(
            request,
            "memory_error.html.j2",
            status=413,
            error="That text is larger than the web app takes in one request; nothing was saved.",
        )
    rel = str(form.get("file", ""))
    if rel not in SECTIONS:
        raise web.HTTPBadRequest(text="That is not a memory file.")
    text, summary = str(form.get("text", "")), str(form.get("summary", ""))
    base, seen = str(form.get("base", "")), str(form.get("seen", ""))
    try:
        version = await asyncio.to_thread(save_edit, site.app.git, rel, text, summary, base, seen)
        files = await asyncio.to_thread(_files, site)
    except GitStoreError as exc:
        # The person's text goes back into the form: a refused edit loses nothing.
        status = 409 if isinstance(exc, EditConflict) else 400
        return page(
            request,
            "memory_edit.html.j2",
            status=status,
            rel=rel,
            slug=SECTIONS[rel],
            text=text,
            summary=summary,
            base=base,
            seen=seen,
            error=f"{str(exc)[:1].upper()}{str(exc)[1:]}.",
            quote=quote,
        )
    saved = f"Saved as version {version.short}: {version.summary}"
    return page(
        request, "memory_file.html.j2", **files[list(SECTIONS).index(rel)], saved=saved, focus=True
    )


async def _why(site: Site, request: web.Request) -> web.StreamResponse:
    rel = _chosen(request)
    try:
        number = int(request.query.get("line", ""))
    except ValueError:
        raise web.HTTPBadRequest(text="Which line? (line=<number>)") from None
    provenance = dreaming(site).provenance
    try:
        found = await asyncio.to_thread(provenance.line_at, rel, number)
        if found is None or line_hash(found[0].text) != request.query.get("h", ""):
            return page(
                request,
                "memory_why.html.j2",
                status=409,
                why=None,
                error="This line changed since the page was loaded: reload it and ask again.",
            )
        why = await provenance.traced(*found)
    except GitStoreError as exc:
        return page(request, "memory_why.html.j2", status=409, why=None, error=str(exc))
    return page(request, "memory_why.html.j2", why=why, error="", quote=quote)

"""The Timeline page: every memory version, newest first, with its coloured diff; any of them
restored as a new version, exactly as /dream-restore does (MemoryCommands.restore); and the
memory's size and the facts added and removed per day (memory_chart.py)."""

from __future__ import annotations

import asyncio
import functools
import threading
from collections import OrderedDict
from typing import TYPE_CHECKING

from aiohttp import web

from channels.web.auth import changes_state, owner_only
from channels.web.charts import bars
from channels.web.diffs import Diff, parse
from channels.web.memory_chart import FactCounts
from channels.web.memory_page import dreaming
from channels.web.render import page
from nanomem.locks import to_thread_to_the_end
from nanomem.memory import GitStore, GitStoreError, Version

if TYPE_CHECKING:
    from markupsafe import Markup

    from channels.web.site import Site

PER_PAGE = 10
MAX_PAGE = 10_000  # a page further back walks that many versions: a bound on one request
DIFFS_KEPT = 200  # parsed diffs remembered (versions never change)
LATER_LOOKED = 100  # newer versions looked at for the ones a restore also undoes


class Versions:
    """The versions as the page shows them: each one's diff parsed once."""

    def __init__(self, git: GitStore) -> None:
        self.git = git
        self.facts = FactCounts(git)
        self._diffs: OrderedDict[str, tuple[Version, Diff]] = OrderedDict()
        self._guard = threading.Lock()

    def shown(self, sha: str) -> tuple[Version, Diff]:
        """Blocking. A version (a full id) and its diff, secrets masked as /dream-log does."""
        with self._guard:
            if sha in self._diffs:
                self._diffs.move_to_end(sha)
                return self._diffs[sha]
        version, diff = self.git.shown(sha)
        found = (version, parse(diff))
        with self._guard:
            self._diffs[sha] = found
            while len(self._diffs) > DIFFS_KEPT:
                self._diffs.popitem(last=False)
        return found

    def page(self, number: int) -> tuple[list[tuple[Version, Diff]], bool]:
        """Blocking. Page `number` (from 1), and whether an older one follows."""
        skip = (number - 1) * PER_PAGE
        walked = self.git.walk(skip + PER_PAGE + 1)
        return [self.shown(sha) for sha, _ in walked[skip : skip + PER_PAGE]], len(walked) > (
            skip + PER_PAGE
        )

    def later(self, sha: str) -> tuple[list[Version], bool]:
        """Blocking. The newer versions that changed a file version `sha` changed (a restore
        undoes them too, as /dream-restore says after the fact), oldest first; and whether
        more versions lay between than were looked at."""
        target, _ = self.shown(sha)
        walked = self.git.walk(LATER_LOOKED + 1)
        newer = [s for s, _ in walked]
        cut = sha not in newer
        newer = newer[: newer.index(sha)] if not cut else newer[:LATER_LOOKED]
        touched = [v for v, _ in map(self.shown, newer) if set(v.files) & set(target.files)]
        return touched[::-1], cut

    def charts(self) -> tuple[Markup, Markup]:
        """Blocking. Facts in memory per day; facts added (up) and removed (down) per day."""
        days = self.facts.daily()
        size = bars(
            [(day.day.isoformat(), day.facts) for day in days],
            title="Facts in memory, per day",
            unit=" facts",
        )
        points: list[tuple[str, float]] = []
        for day in days:
            points += [(f"{day.day} added", day.added), (f"{day.day} removed", -day.removed)]
        return size, bars(points, title="Facts added and removed, per day", unit=" facts")


def add_routes(web_app: web.Application, site: Site) -> None:
    versions = Versions(site.app.git)
    web_app.router.add_get("/timeline", owner_only(functools.partial(_page, versions)))
    one = functools.partial(_version, versions, confirm=False)
    web_app.router.add_get("/timeline/v/{sha}", owner_only(one))
    confirm = functools.partial(_version, versions, confirm=True)
    web_app.router.add_get("/timeline/restore/{sha}", owner_only(confirm))
    restore = functools.partial(_restore, site, versions)
    web_app.router.add_post("/timeline/restore/{sha}", changes_state(restore))


async def _page(versions: Versions, request: web.Request) -> web.StreamResponse:
    raw = request.query.get("page", "1")
    if not raw.isdigit() or not 1 <= int(raw) <= MAX_PAGE:
        return page(
            request,
            "timeline_message.html.j2",
            status=400,
            title="No such page",
            message=f"The page is a number from 1 to {MAX_PAGE}.",
            version=None,
        )
    number = int(raw)
    try:
        shown, more = await asyncio.to_thread(versions.page, number)
        size, changes = await asyncio.to_thread(versions.charts)
    except GitStoreError as exc:
        message = f"The memory history cannot be read: {exc}."
        return page(
            request,
            "timeline_message.html.j2",
            status=409,
            title="Timeline",
            message=message,
            version=None,
        )
    return page(
        request,
        "timeline.html.j2",
        versions=shown,
        number=number,
        more=more,
        size_chart=size,
        changes_chart=changes,
    )


async def _resolved(versions: Versions, sha: str) -> str:
    """The full id of a version from a prefix in the address; 404 when none matches."""
    try:
        return await asyncio.to_thread(versions.git.resolve, sha)
    except GitStoreError as exc:
        raise _not_found(exc) from None


def _not_found(exc: GitStoreError) -> web.HTTPNotFound:
    return web.HTTPNotFound(text=f"{str(exc)[:1].upper()}{str(exc)[1:]}.")


async def _version(
    versions: Versions, request: web.Request, *, confirm: bool
) -> web.StreamResponse:
    full = await _resolved(versions, request.match_info["sha"])
    version, diff = await asyncio.to_thread(versions.shown, full)
    later, more = await asyncio.to_thread(versions.later, full) if confirm else ([], False)
    return page(
        request,
        "timeline_version.html.j2",
        version=version,
        diff=diff,
        confirm=confirm,
        later=later,
        more=more,
    )


async def _restore(site: Site, versions: Versions, request: web.Request) -> web.StreamResponse:
    from nanomem.features.dream import DREAM_IS_RUNNING, DreamBusy, MemoryCommands

    full = await _resolved(versions, request.match_info["sha"])
    dream = dreaming(site).dream
    commands = MemoryCommands(dream, dream.git)
    try:
        restored = await to_thread_to_the_end(commands.restore, full)
    except DreamBusy:
        return page(
            request,
            "timeline_message.html.j2",
            status=409,
            title="Not restored",
            message=DREAM_IS_RUNNING,
            version=None,
        )
    except GitStoreError as exc:
        return page(
            request,
            "timeline_message.html.j2",
            status=409,
            title="Not restored",
            message=f"Nothing restored: {exc}.",
            version=None,
        )
    return page(request, "timeline_restored.html.j2", restored=restored)

"""The Dream review page: the Dream change waiting for a decision (dream.review = "ask"), its
diff, and Approve / Reject with a reason: the same decision /dream-approve and /dream-reject
make (ReviewCommands.decide, under the Dream lock). A change decided meanwhile elsewhere (a
Telegram button) is shown as decided, never decided twice."""

from __future__ import annotations

import asyncio
import functools
from typing import TYPE_CHECKING, Any

from aiohttp import web

from channels.web.auth import changes_state, owner_only
from channels.web.diffs import parse
from channels.web.memory_page import dreaming
from channels.web.render import page
from nanomem.locks import to_thread_to_the_end
from nanomem.text.masking import redact

if TYPE_CHECKING:
    from channels.web.site import Site
    from nanomem.features.dream import Dream

MAX_REASON_CHARS = 1_000  # it goes into Dream's next prompts
DECISIONS_SHOWN = 5
DECIDED = ("approved", "rejected")


def add_routes(web_app: web.Application, site: Site) -> None:
    web_app.router.add_get("/review", owner_only(functools.partial(_page, site)))
    web_app.router.add_post("/review", changes_state(functools.partial(_decide, site)))


def _state(dream: Dream) -> dict[str, Any]:
    """Blocking. What /dream-log lists: the change waiting and the latest decisions."""
    pending = dream.review.peek()
    return {
        "pending": pending,
        # Masked as a version's diff is: a key pasted into a chat is in the history Dream read.
        "diff": parse(redact(pending.diff)) if pending is not None else None,
        "decisions": dream.review.decisions(limit=DECISIONS_SHOWN),
    }


async def _page(site: Site, request: web.Request) -> web.StreamResponse:
    state = await asyncio.to_thread(_state, dreaming(site).dream)
    return page(request, "dream_review.html.j2", outcome=None, error="", **state)


async def _decide(site: Site, request: web.Request) -> web.StreamResponse:
    from nanomem.features.dream import BUSY, DreamBusy, ReviewCommands, ReviewError

    form = await request.post()
    what, wanted = str(form.get("decision", "")), str(form.get("id", ""))
    reason = " ".join(str(form.get("reason", "")).split())
    dream = dreaming(site).dream
    error, outcome, status = "", None, 200
    if what not in ("approve", "reject") or not wanted:
        error, status = "Choose Approve or Reject for the change shown.", 400
    elif len(reason) > MAX_REASON_CHARS:
        error, status = f"The reason is longer than {MAX_REASON_CHARS:,} characters.", 400
    else:
        try:
            if decided := await asyncio.to_thread(_decided_elsewhere, dream, wanted):
                raise ReviewError(decided)  # made meanwhile, elsewhere: never made twice
            pending, version = await to_thread_to_the_end(
                ReviewCommands(dream).decide, what, wanted, reason
            )
            outcome = {"what": what, "pending": pending, "version": version, "reason": reason}
        except ReviewError as exc:
            # Decided elsewhere in the instant between the look and the decision, too.
            decided = await asyncio.to_thread(_decided_elsewhere, dream, wanted)
            error, status = decided or str(exc), 409
        except DreamBusy:
            error, status = BUSY, 409
    state = await asyncio.to_thread(_state, dream)
    return page(
        request, "dream_review.html.j2", status=status, outcome=outcome, error=error, **state
    )


def _decided_elsewhere(dream: Dream, wanted: str) -> str:
    """Blocking. What the owner decided of change `wanted` elsewhere ("" if nothing): an
    approval or a rejection (a change dropped or expired was the review's own doing)."""
    for record in dream.review.decisions(limit=200):
        if str(record.get("id", "")) == wanted and record.get("status") in DECIDED:
            when = str(record.get("at", ""))[:16].replace("T", " ")
            return (
                f"Change {wanted} was already {record.get('status')} ({when} UTC), elsewhere; "
                "nothing was decided twice."
            )
    return ""

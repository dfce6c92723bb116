"""The front door: log in with web.token or a one-time link (`nanomem web-link`), log out.
Failures are counted per client and in all: past the limit a login is refused with 429 until
the minute has passed, whoever sends the right token meanwhile."""

from __future__ import annotations

import functools
import hashlib
import hmac
import math
import secrets
import time
from collections import OrderedDict, deque
from typing import TYPE_CHECKING

from aiohttp import web

from channels.web.auth import COOKIE, EXPIRES, SESSION, changes_state, gate_of
from channels.web.render import page
from nanomem.web_logins import CODE_SHAPE, consume, end_session

if TYPE_CHECKING:
    from channels.web.site import Site

WINDOW_S = 60.0
PER_CLIENT = 5  # failures a minute from one address
OVERALL = 20  # failures a minute from everyone: a spread-out guess is slowed too
MAX_CLIENTS = 10_000  # addresses remembered; the longest quiet is forgotten first
MAX_NEXT = 2000
WRONG = "That token is wrong."
USED = "This login link is used up or has expired: nanomem web-link prints a new one."
BUSY = "Too many failed logins: try again in a minute."


class Throttle:
    """Failed logins of the last minute, per client and in all."""

    def __init__(self, per_client: int = PER_CLIENT, overall: int = OVERALL) -> None:
        self.per_client, self.overall = per_client, overall
        self._clients: OrderedDict[str, deque[float]] = OrderedDict()
        self._all: deque[float] = deque()

    def wait_s(self, client: str, now: float | None = None) -> float:
        """How long `client` must wait before trying again (0: it may try now)."""
        now = time.monotonic() if now is None else now
        mine = self._clients.get(client)
        wait = _wait(mine, self.per_client, now) if mine is not None else 0.0
        return max(wait, _wait(self._all, self.overall, now))

    def failed(self, client: str, now: float | None = None) -> float:
        """Count a failure of `client`'s; when it was counted (for `forgive`)."""
        now = time.monotonic() if now is None else now
        times = self._clients.pop(client, None) or deque()
        self._clients[client] = times  # now the most recent
        for each, limit in ((times, self.per_client), (self._all, self.overall)):
            each.append(now)
            while len(each) > limit:  # the oldest of `limit` failures is all the wait needs
                each.popleft()
        while len(self._clients) > MAX_CLIENTS:
            self._clients.popitem(last=False)
        return now

    def forgive(self, client: str, when: float) -> None:
        """Take back the failure counted at `when`: the attempt turned out to be good."""
        for times in (self._clients.get(client), self._all):
            if times is not None and when in times:
                times.remove(when)


def _wait(times: deque[float], limit: int, now: float) -> float:
    while times and times[0] <= now - WINDOW_S:
        times.popleft()
    return times[0] + WINDOW_S - now if len(times) >= limit else 0.0


THROTTLE_KEY = web.AppKey("nanomem_web_throttle", Throttle)


def add_routes(web_app: web.Application, site: Site) -> None:
    web_app[THROTTLE_KEY] = Throttle()
    web_app.router.add_get("/login", _form)
    web_app.router.add_post("/login", _login)
    web_app.router.add_get("/login/{code}", _link)
    web_app.router.add_post("/logout", changes_state(functools.partial(_logout, site)))


def safe_next(given: str) -> str:
    """Where to go after logging in: a path of this site only, never another host."""
    if (
        not given.startswith("/")
        or given.startswith(("//", "/\\"))
        or len(given) > MAX_NEXT
        or any(ch < " " or ch == "\\" for ch in given)
    ):
        return "/"
    return given


def _refused(request: web.Request, error: str, status: int, **headers: str) -> web.Response:
    response = page(
        request, "login.html.j2", status=status, error=error, next=_next_of(request), done=False
    )
    response.headers.update(headers)
    return response


def _next_of(request: web.Request) -> str:
    return safe_next(request.query.get("next", ""))


def _throttled(request: web.Request) -> web.Response | None:
    wait = request.app[THROTTLE_KEY].wait_s(gate_of(request).client(request))
    if wait <= 0:
        return None
    return _refused(request, BUSY, 429, **{"Retry-After": str(math.ceil(wait))})


async def _form(request: web.Request) -> web.StreamResponse:
    return page(request, "login.html.j2", error="", next=_next_of(request), done=False)


async def _login(request: web.Request) -> web.StreamResponse:
    # The form is read first: from the limit's check to the failure it counts nothing waits,
    # so a burst of guesses sent at once is counted as they are decided, not let through.
    form = await request.post()
    if refused := _throttled(request):
        return refused
    gate = gate_of(request)
    token = gate.site.settings.token
    assert token is not None
    # Compared as digests: the time taken says nothing of the token's length either.
    given = hashlib.sha256(str(form.get("token", "")).strip().encode()).digest()
    if not hmac.compare_digest(given, hashlib.sha256(token.get_secret_value().encode()).digest()):
        request.app[THROTTLE_KEY].failed(gate.client(request))
        return _refused(request, WRONG, 401)
    return _logged_in(request, safe_next(str(form.get("next", "/"))))


async def _link(request: web.Request) -> web.StreamResponse:
    if refused := _throttled(request):
        return refused
    gate, code = gate_of(request), request.match_info["code"]
    if not CODE_SHAPE.fullmatch(code):  # no code we made: no guess at one either
        return _refused(request, USED, 403)
    # Counted as a failure while the home is read (a burst of guesses meets the limit at
    # once), forgiven when it was a code we made.
    throttle, client = request.app[THROTTLE_KEY], gate.client(request)
    tried = throttle.failed(client)
    if not await consume(gate.site.app.home, code):
        return _refused(request, USED, 403)
    throttle.forgive(client, tried)
    # A page that moves on by itself, not a redirect: a link opened from another site (a
    # chat app) would carry that site's context through a redirect, and the SameSite=Strict
    # cookie would then stay home on the next request.
    response = page(request, "login.html.j2", error="", next="/", done=True)
    _set_cookie(request, response)
    return response


def _logged_in(request: web.Request, target: str) -> web.StreamResponse:
    response = web.HTTPSeeOther(target)
    _set_cookie(request, response)
    raise response


def _set_cookie(request: web.Request, response: web.StreamResponse) -> None:
    gate = gate_of(request)
    lasts = int(gate.site.settings.session_days * 86400)
    session = secrets.token_urlsafe(18)
    response.set_cookie(
        COOKIE,
        gate.cookie(session, int(time.time()) + lasts),
        max_age=lasts,
        httponly=True,
        samesite="Strict",
        secure=gate.is_https(request),
        path="/",
    )


async def _logout(site: Site, request: web.Request) -> web.StreamResponse:
    session, expires = request[SESSION], request[EXPIRES]
    gate_of(request).ended.add(session)
    await end_session(site.app.home, session, expires)
    response = web.HTTPSeeOther("/login")
    response.del_cookie(COOKIE, path="/")
    raise response

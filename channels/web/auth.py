"""Owner only: a login with web.token gives a signed session cookie; every page checks it, and
every change of state also checks a CSRF token tied to that session.

The cookie is stateless (the session id and its expiry, signed with a key derived from
web.token), so a restart keeps people logged in and a new token logs everyone out.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import secrets
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from aiohttp import web

from channels.web.render import page

if TYPE_CHECKING:
    from channels.web.site import Site

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
COOKIE = "nanomem_session"
CSRF_FIELD = "csrf"  # a form's field, or the X-CSRF-Token header (htmx sends it: base.html.j2)
CSRF_HEADER = "X-CSRF-Token"
SITE_KEY = web.AppKey("nanomem_web_site", object)
# No inline script or style anywhere: whatever reached a page as text stays text.
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; "
        "media-src 'self' blob:; connect-src 'self'; object-src 'none'; base-uri 'none'; "
        "form-action 'self'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-store",
}


def add_routes(web_app: web.Application, site: Site) -> None:
    web_app[SITE_KEY] = site
    web_app.router.add_get("/login", functools.partial(_login_form, site))
    web_app.router.add_post("/login", functools.partial(_login, site))
    web_app.router.add_post("/logout", changes_state(_logout))


def _key(site: Site) -> bytes:
    token = site.settings.token
    assert token is not None  # WebChannel.from_app refuses to start without one
    return hashlib.sha256(b"nanomem-web-session\0" + token.get_secret_value().encode()).digest()


def _sign(site: Site, text: str) -> str:
    return hmac.new(_key(site), text.encode(), hashlib.sha256).hexdigest()


def _session_of(request: web.Request, site: Site) -> str | None:
    """The session id the request's cookie carries, when its signature and expiry hold."""
    cookie = request.cookies.get(COOKIE, "")
    session, _, rest = cookie.partition(".")
    expires, _, signature = rest.partition(".")
    if not (session and expires.isdigit() and signature):
        return None
    if not hmac.compare_digest(_sign(site, f"{session}.{expires}"), signature):
        return None
    return session if int(expires) > time.time() else None


def csrf_token(site: Site, session: str) -> str:
    return _sign(site, f"csrf.{session}")


def _site(request: web.Request) -> Site:
    return request.app[SITE_KEY]  # type: ignore[return-value]


def owner_only(handler: Handler) -> Handler:
    """A page for the logged-in owner; others are sent to /login (htmx: told to go there)."""

    @functools.wraps(handler)
    async def checked(request: web.Request) -> web.StreamResponse:
        site = _site(request)
        session = _session_of(request, site)
        if session is None:
            if request.headers.get("HX-Request"):
                return _secured(web.Response(status=401, headers={"HX-Redirect": "/login"}))
            raise web.HTTPSeeOther("/login", headers=SECURITY_HEADERS)
        request["web_session"] = session
        request["web_context"] = {"csrf": csrf_token(site, session)}
        return _secured(await handler(request))

    return checked


def changes_state(handler: Handler) -> Handler:
    """owner_only, and the request carries the session's CSRF token (header or form field)."""

    async def with_csrf(request: web.Request) -> web.StreamResponse:
        sent = request.headers.get(CSRF_HEADER)
        if sent is None and request.content_type in (
            "application/x-www-form-urlencoded",
            "multipart/form-data",
        ):
            sent = str((await request.post()).get(CSRF_FIELD, ""))
        expected = request["web_context"]["csrf"]
        if not sent or not hmac.compare_digest(sent, expected):
            return web.Response(status=403, text="This form has expired: reload the page.")
        return await handler(request)

    return owner_only(functools.wraps(handler)(with_csrf))


def _secured(response: web.StreamResponse) -> web.StreamResponse:
    for name, value in SECURITY_HEADERS.items():
        response.headers.setdefault(name, value)
    return response


async def _login_form(site: Site, request: web.Request) -> web.StreamResponse:
    return _secured(page(request, "login.html.j2", error=""))


async def _login(site: Site, request: web.Request) -> web.StreamResponse:
    form = await request.post()
    given = str(form.get("token", "")).encode()
    token = site.settings.token
    assert token is not None
    if not hmac.compare_digest(given, token.get_secret_value().encode()):
        return _secured(page(request, "login.html.j2", status=401, error="That token is wrong."))
    session = secrets.token_urlsafe(18)
    expires = int(time.time() + site.settings.session_days * 86400)
    response = web.HTTPSeeOther("/", headers=SECURITY_HEADERS)
    response.set_cookie(
        COOKIE,
        f"{session}.{expires}.{_sign(site, f'{session}.{expires}')}",
        max_age=int(site.settings.session_days * 86400),
        httponly=True,
        samesite="Strict",
        secure=request.secure,
        path="/",
    )
    raise response


async def _logout(request: web.Request) -> web.StreamResponse:
    response = web.HTTPSeeOther("/login", headers=SECURITY_HEADERS)
    response.del_cookie(COOKIE, path="/")
    raise response

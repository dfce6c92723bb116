"""Owner only: a login (channels/web/login.py) gives a signed session cookie; every page checks
it, and every change of state also checks a CSRF token tied to that session.

The cookie is stateless (the session id and its expiry, signed with a key derived from
web.token), so a restart keeps people logged in and a new token logs everyone out; a logout
is remembered in the home (nanomem/web_logins.py) until the cookie would have expired.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from aiohttp import web

from nanomem.channel_settings import WEB_PATHS
from nanomem.web_logins import ended_sessions

if TYPE_CHECKING:
    from channels.web.site import Site

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
COOKIE = "nanomem_session"
CSRF_FIELD = "csrf"  # a form's field, or the X-CSRF-Token header (htmx sends it: base.html.j2)
CSRF_HEADER = "X-CSRF-Token"
SITE_KEY = web.AppKey("nanomem_web_site", object)
# What owner_only puts on a request: the login's id, its expiry, what every template gets.
SESSION = web.RequestKey("web_session", str)
EXPIRES = web.RequestKey("web_expires", int)
CONTEXT = web.RequestKey("web_context", dict[str, Any])
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
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Resource-Policy": "same-origin",
    # The chat records voice notes; nothing asks for the rest.
    "Permissions-Policy": "camera=(), geolocation=(), microphone=(self), payment=(), usb=()",
    "Cache-Control": "no-store",
}
STATIC_CACHE = "no-cache"  # revalidated (ETag): a new version of a script is never missed
HSTS = "max-age=31536000"
LOGGED_OUT = "You are logged out: reload the page to log in again."


def is_web_path(path: str) -> bool:
    return path == "/" or any(path == own or path.startswith(own + "/") for own in WEB_PATHS)


@dataclass
class Gate:
    """The login's state in the gateway: the signing key and the logins a logout ended."""

    site: Site
    key: bytes
    ended: set[str] = field(default_factory=set)

    @classmethod
    def of(cls, site: Site) -> Gate:
        token = site.settings.token
        assert token is not None  # WebChannel.from_app refuses to start without one
        secret = token.get_secret_value().encode()
        return cls(site, hashlib.sha256(b"nanomem-web-session\0" + secret).digest())

    def sign(self, text: str) -> str:
        return hmac.new(self.key, text.encode(), hashlib.sha256).hexdigest()

    def cookie(self, session: str, expires: int) -> str:
        return f"{session}.{expires}.{self.sign(f'{session}.{expires}')}"

    def session_of(self, request: web.Request) -> tuple[str, int] | None:
        """The session id and expiry the request's cookie carries, when its signature and
        expiry hold and no logout ended it."""
        session, _, rest = request.cookies.get(COOKIE, "").partition(".")
        expires, _, signature = rest.partition(".")
        if not (session and expires.isdigit() and len(expires) < 12 and signature):
            return None
        if not hmac.compare_digest(self.sign(f"{session}.{expires}"), signature):
            return None
        if int(expires) <= time.time() or session in self.ended:
            return None
        return session, int(expires)

    def csrf(self, session: str) -> str:
        return self.sign(f"csrf.{session}")

    def is_https(self, request: web.Request) -> bool:
        """Whether the browser reached us over https: our own TLS, or the proxy's word."""
        if request.secure:
            return True
        forwarded = request.headers.get("X-Forwarded-Proto", "")
        return self.site.settings.behind_proxy and forwarded.strip().lower() == "https"

    def client(self, request: web.Request) -> str:
        """Who is asking, for the rate limits: the peer, or behind a proxy the address the
        proxy saw (the last one it appended: earlier ones are the client's own claims)."""
        if self.site.settings.behind_proxy:
            forwarded = request.headers.get("X-Forwarded-For", "").split(",")[-1].strip()
            if forwarded:
                return forwarded[:64]
        return request.remote or "?"


GATE_KEY = web.AppKey("nanomem_web_gate", Gate)


def add_routes(web_app: web.Application, site: Site) -> None:
    from channels.web import login

    gate = Gate.of(site)
    web_app[SITE_KEY] = site
    web_app[GATE_KEY] = gate

    async def load_ended(_: web.Application) -> None:
        gate.ended |= await ended_sessions(site.app.home)

    web_app.on_startup.append(load_ended)
    web_app.middlewares.append(_error_pages)
    web_app.on_response_prepare.append(_secure_headers)
    login.add_routes(web_app, site)


def gate_of(request: web.Request) -> Gate:
    return request.app[GATE_KEY]


def csrf_token(site: Site, session: str) -> str:
    return Gate.of(site).csrf(session)


def login_address(request: web.Request) -> str:
    """/login, asked to come back here afterwards (a page's own address only)."""
    if request.method != "GET" or request.path in ("/", "/login"):
        return "/login"
    return f"/login?next={quote(request.path_qs, safe='')}"


def owner_only(handler: Handler) -> Handler:
    """A page for the logged-in owner; others are sent to /login (htmx: told to go there)."""

    @functools.wraps(handler)
    async def checked(request: web.Request) -> web.StreamResponse:
        gate = gate_of(request)
        found = gate.session_of(request)
        if found is None:
            if request.headers.get("HX-Request"):
                return web.Response(status=401, headers={"HX-Redirect": "/login"})
            if request.headers.get("Sec-Fetch-Mode", "navigate") != "navigate":
                # A page's script (a message sent, earlier messages, an event stream): a
                # redirect would be followed to the login page's 200, and a message typed
                # after a logout elsewhere taken as sent and lost.
                return web.Response(status=401, text=LOGGED_OUT)
            raise web.HTTPSeeOther(login_address(request))
        request[SESSION], request[EXPIRES] = found
        request[CONTEXT] = {"csrf": gate.csrf(found[0])}
        return await handler(request)

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
        expected = request[CONTEXT]["csrf"]
        if not sent or not hmac.compare_digest(sent.encode(), expected.encode()):
            return web.Response(status=403, text="This form has expired: reload the page.")
        return await handler(request)

    return owner_only(functools.wraps(handler)(with_csrf))


async def _secure_headers(request: web.Request, response: web.StreamResponse) -> None:
    """Every answer at the web app's paths, pages, redirects, errors and static files alike,
    goes out with the security headers; /v1 and /health keep their own."""
    if not is_web_path(request.path):
        return
    for name, value in SECURITY_HEADERS.items():
        response.headers.setdefault(name, value)
    if request.path.startswith("/static/") and response.status in (200, 304):
        response.headers["Cache-Control"] = STATIC_CACHE
    if gate_of(request).is_https(request):
        response.headers.setdefault("Strict-Transport-Security", HSTS)


@web.middleware
async def _error_pages(request: web.Request, handler: Handler) -> web.StreamResponse:
    """An error met by a person opening a page (no such conversation, a page that is not
    there) is shown in the layout, with the way back; a script's or a program's stays plain."""
    try:
        return await handler(request)
    except web.HTTPException as exc:
        navigating = request.headers.get("Sec-Fetch-Mode") == "navigate"
        if not (navigating and exc.status >= 400 and exc.status != 401):
            raise
        if not is_web_path(request.path) or request.method not in ("GET", "HEAD"):
            raise
        from channels.web.render import render

        found = gate_of(request).session_of(request)
        shown = {"csrf": gate_of(request).csrf(found[0])} if found is not None else {}
        plain = exc.text in (None, f"{exc.status}: {exc.reason}")
        html = render(
            "error.html.j2",
            request_path=request.path,
            reason=exc.reason,
            message=exc.reason if plain else exc.text,
            **shown,
        )
        kept = {k: v for k, v in exc.headers.items() if not k.lower().startswith("content-")}
        return web.Response(
            text=html, status=exc.status, content_type="text/html", charset="utf-8", headers=kept
        )

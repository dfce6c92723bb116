"""The web app from a test's side: every route it adds to the gateway's server (read from the
app built in this process, as the gateway builds it), and a login of a test's own over HTTP."""

from __future__ import annotations

import re

import httpx
from aiohttp import web

from channels.web.channel import WebChannel
from nanomem.home import Home
from nanomem.providers.scripted import ScriptedProvider
from tests.conftest import make_app
from tests.helpers.browser import WEB_TOKEN

PLACEHOLDER = re.compile(r"\{[^}]+\}")


def routes(home: Home) -> list[tuple[str, str]]:
    """(method, a path it answers) for every route the web app adds to the gateway's server,
    built in this process as the gateway builds it."""
    app = make_app(home, ScriptedProvider([]), web={"enabled": True, "token": WEB_TOKEN})
    server = web.Application()
    WebChannel.from_app(app).routes(server)
    found = []
    for route in server.router.routes():
        info = route.resource.get_info() if route.resource is not None else {}
        path = info.get("path") or info.get("formatter") or info.get("prefix")
        if path:
            found.append((route.method, PLACEHOLDER.sub("x", str(path))))
    return sorted(set(found))


def logged_in(base: str) -> tuple[httpx.Client, str]:
    """A client with a login of its own, and that login's CSRF token (from its page)."""
    client = httpx.Client(base_url=base, follow_redirects=False, timeout=10)
    answer = client.post("/login", data={"token": WEB_TOKEN})
    assert answer.status_code == 303, answer.text
    page = client.get("/chat")
    assert page.status_code == 200
    found = re.search(r'name="csrf" value="([^"]+)"', page.text)
    assert found is not None
    return client, found.group(1)

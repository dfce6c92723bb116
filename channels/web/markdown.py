"""The model's Markdown (and memory files, and anything else written as Markdown) as the web
app's HTML: the vetted renderer the messengers use (raw HTML shown as text, links only to
http, https and mailto), Matrix's tag set, and code blocks highlighted by Pygments."""

from __future__ import annotations

import functools

from markupsafe import Markup

from nanomem.text.markdown_html import MATRIX_HTML, HtmlSubset, render_html

MAX_HIGHLIGHT_CHARS = 100_000  # longer blocks are shown plain: Pygments' lexers can be slow


def _highlight(code: str, language: str) -> str:
    from html import escape

    if not language or len(code) > MAX_HIGHLIGHT_CHARS:
        return escape(code, quote=False)
    from pygments import highlight
    from pygments.formatters import HtmlFormatter
    from pygments.lexers import get_lexer_by_name
    from pygments.util import ClassNotFound

    try:
        lexer = get_lexer_by_name(language)
    except ClassNotFound:
        return escape(code, quote=False)
    # nowrap: spans only, inside the renderer's own <pre><code>; classes, not inline styles
    # (the CSP allows no inline style): static/highlight.css colours them.
    return highlight(code, lexer, HtmlFormatter(nowrap=True)).rstrip("\n")


WEB_HTML = HtmlSubset(MATRIX_HTML.tags, schemes=MATRIX_HTML.schemes, highlight=_highlight)


@functools.lru_cache(maxsize=512)
def markdown(text: str) -> Markup:
    """Safe HTML for a Jinja template (`{{ markdown(text) }}` is not escaped again)."""
    return Markup(render_html(text, WEB_HTML))

"""The shared HTML renderer: the model's Markdown as the subset a platform shows (Matrix's
`formatted_body` here; Telegram's in tests/channels/test_telegram_format.py)."""

from __future__ import annotations

import json
from html.parser import HTMLParser

import pytest

from nanomem.text.markdown_html import (
    MATRIX_HTML,
    TELEGRAM_HTML,
    html_text,
    matrix_content,
    matrix_event_bytes,
    render_html,
)

MARKDOWN = """# Title

Some **bold**, *slanted*, ~~struck~~, `code` and a [link](https://x.org/?a=1&b=2).
A second line.

- one
- two
  1. nested

3. three

> quoted
> > inside

```py
if a < b: print("&")
```

| a | b |
|---|---|
| **1** | 2 |

---"""


class Checker(HTMLParser):
    """Every tag in `tags`, attributes only where the subset has them, all balanced."""

    def __init__(self, tags: frozenset[str]) -> None:
        super().__init__(convert_charrefs=True)
        self.tags, self.stack, self.errors = tags, [], []  # type: ignore[var-annotated]

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        allowed = {"a": {"href"}, "code": {"class"}, "ol": {"start"}}.get(tag, set())
        if tag not in self.tags or any(name not in allowed for name, _ in attrs):
            self.errors.append((tag, attrs))
        if tag == "a" and not str(dict(attrs)["href"]).startswith(("https:", "http:", "mailto:")):
            self.errors.append((tag, attrs))
        if tag not in ("br", "hr"):
            self.stack.append(tag)

    def handle_endtag(self, tag: str) -> None:
        if not self.stack or self.stack.pop() != tag:
            self.errors.append(f"</{tag}>")


def check(html: str, tags: frozenset[str]) -> None:
    checker = Checker(tags)
    checker.feed(html)
    checker.close()
    assert checker.errors == [] and checker.stack == [], (checker.errors, checker.stack, html)


def test_matrix_gets_structured_html_in_its_formatted_body_set() -> None:
    html = render_html(MARKDOWN, MATRIX_HTML)
    check(html, MATRIX_HTML.tags)
    assert html.split("\n") == [
        "<h1>Title</h1>",
        "<p>Some <strong>bold</strong>, <em>slanted</em>, <del>struck</del>, <code>code</code>"
        ' and a <a href="https://x.org/?a=1&amp;b=2">link</a>.<br>A second line.</p>',
        "<ul><li>one</li><li>two<ol><li>nested</li></ol></li></ul>",
        '<ol start="3"><li>three</li></ol>',
        "<blockquote><p>quoted</p>",
        "<blockquote><p>inside</p></blockquote></blockquote>",
        '<pre><code class="language-py">if a &lt; b: print("&amp;")</code></pre>',
        "<table><thead><tr><th>a</th><th>b</th></tr></thead>"
        "<tbody><tr><td><strong>1</strong></td><td>2</td></tr></tbody></table>",
        "<hr>",
    ]


def test_one_paragraph_is_a_line_without_margins() -> None:
    assert render_html("just **this**", MATRIX_HTML) == "just <strong>this</strong>"


def test_telegram_gets_text_with_the_few_tags_it_takes() -> None:
    html = render_html(MARKDOWN, TELEGRAM_HTML)
    check(html, TELEGRAM_HTML.tags)
    assert "• one\n• two\n  1. nested" in html and "<b>Title</b>" in html
    assert "<blockquote>quoted\n\ninside</blockquote>" in html  # Telegram nests no quotes


@pytest.mark.parametrize(
    "hostile",
    [
        "<img src=x onerror=alert(1)>",
        "<script>alert(1)</script>",
        "[x](javascript:alert(1))",
        "[x](JaVaScRiPt:alert(1))",
        "[x](data:text/html;base64,PHNjcmlwdD4=)",
        "[x](vbscript:msgbox)",
        '[x](https://e.org/"onmouseover="alert(1))',
        "![x](javascript:alert(1))",
        '```"><script>alert(1)</script>\ncode\n```',
        "<a href='https://e.org'>raw link</a>",
        "[tg](tg://user?id=1)",
    ],
)
def test_what_the_model_wrote_is_never_markup(hostile: str) -> None:
    html = render_html(hostile, MATRIX_HTML)
    check(html, MATRIX_HTML.tags)
    assert "<script" not in html and "<img" not in html  # shown as text: &lt;script


def test_a_matrix_message_has_a_plain_body_beside_its_html_and_is_measured_as_json() -> None:
    content = matrix_content("**Hi** [there](https://x.org) 😀")
    assert content["body"] == "Hi there (https://x.org) 😀"
    assert html_text(content["formatted_body"]) == "Hi there 😀"
    size = len(json.dumps(content, ensure_ascii=False, separators=(",", ":")).encode())
    assert matrix_event_bytes("**Hi** [there](https://x.org) 😀") == size

from __future__ import annotations

from channels.web.markdown import markdown


def test_code_is_highlighted_and_escaped() -> None:
    html = markdown('```python\nprint("<b>")\n```')
    assert '<pre><code class="language-python">' in html
    assert '<span class="nb">print</span>' in html
    assert "&lt;b&gt;" in html and "<b>" not in html


def test_raw_html_and_script_links_stay_text() -> None:
    html = markdown("<script>alert(1)</script> [x](javascript:alert(1)) <img src=x onerror=y>")
    assert "<script" not in html and "<img" not in html and "<a" not in html
    assert "&lt;script&gt;" in html  # shown, as written


def test_an_unknown_language_is_shown_plain() -> None:
    assert markdown("```nosuchlang\n<x>\n```") == (
        '<pre><code class="language-nosuchlang">&lt;x&gt;</code></pre>'
    )

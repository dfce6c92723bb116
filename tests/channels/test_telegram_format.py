"""Tests for channels.telegram.format: Markdown → Telegram HTML and message splitting."""

from __future__ import annotations

import ast
import random
import re
from html import unescape
from html.parser import HTMLParser
from pathlib import Path

import pytest

from channels.telegram.format import (
    TELEGRAM_LIMIT,
    html_to_plain,
    markdown_to_html,
    render_chunks,
    split_html,
    split_plain,
    utf16_length,
    visible_length,
)

ALLOWED_TAGS = {"b", "i", "u", "s", "code", "pre", "a", "blockquote", "tg-spoiler"}
NAMED_ENTITIES = {"amp", "lt", "gt", "quot"}


class TelegramHTMLChecker(HTMLParser):
    """Stack-based validator for the subset of HTML Telegram accepts."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=False)
        self.stack: list[str] = []
        self.errors: list[str] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag not in ALLOWED_TAGS:
            self.errors.append(f"disallowed tag <{tag}>")
        if tag == "a":
            ok = len(attrs) == 1 and attrs[0][0] == "href" and bool(attrs[0][1])
        elif tag == "code" and attrs:
            ok = self.stack[-1:] == ["pre"] and len(attrs) == 1 and attrs[0][0] == "class"
            ok = ok and str(attrs[0][1]).startswith("language-")
        else:
            ok = not attrs
        if not ok:
            self.errors.append(f"bad attributes on <{tag}>: {attrs}")
        if self.stack and self.stack[-1] in ("code", "pre") and tag != "code":
            self.errors.append(f"<{tag}> inside <{self.stack[-1]}>")
        if self.stack[-1:] == ["code"]:
            self.errors.append("tag inside <code>")
        if tag in ("a", "blockquote") and tag in self.stack:
            self.errors.append(f"nested <{tag}>")
        self.stack.append(tag)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.errors.append(f"self-closing <{tag}/>")

    def handle_endtag(self, tag: str) -> None:
        if not self.stack or self.stack.pop() != tag:
            self.errors.append(f"unbalanced </{tag}>")

    def handle_data(self, data: str) -> None:
        if any(ch in data for ch in "<>&"):
            self.errors.append(f"unescaped text: {data!r}")
        self.text.append(data)

    def handle_entityref(self, name: str) -> None:
        if name not in NAMED_ENTITIES:
            self.errors.append(f"unsupported entity &{name};")
        self.text.append(unescape(f"&{name};"))

    def handle_charref(self, name: str) -> None:
        self.text.append(unescape(f"&#{name};"))

    def handle_comment(self, data: str) -> None:
        self.errors.append("comment")

    def handle_decl(self, decl: str) -> None:
        self.errors.append("declaration")


def check_html(html: str) -> str:
    """Assert ``html`` is valid Telegram HTML; return its visible text."""
    checker = TelegramHTMLChecker()
    checker.feed(html)
    checker.close()
    assert not checker.errors, (checker.errors, html)
    assert not checker.stack, (f"unclosed {checker.stack}", html)
    # Entities must be complete: every '&' starts one of the supported references.
    assert not re.search(r"&(?!(?:amp|lt|gt|quot|#\d+|#x[0-9a-fA-F]+);)", html), html
    return "".join(checker.text)


def squash(text: str) -> str:
    return "".join(text.split())


def check_chunks(chunks: list[str], html: str, limit: int = TELEGRAM_LIMIT) -> None:
    """The splitting invariants: valid, within limit, non-empty, trimmed, nothing lost."""
    plains = []
    for chunk in chunks:
        assert visible_length(chunk) <= limit, (visible_length(chunk), chunk[:80])
        plain = check_html(chunk)
        assert plain == html_to_plain(chunk)
        assert plain.strip(), chunk
        assert not plain.startswith("\n") and plain == plain.rstrip(), repr(plain[:40])
        plains.append(plain)
    assert squash("".join(plains)) == squash(html_to_plain(html))


@pytest.mark.parametrize(
    "bad",
    [
        "<b><i>x</b></i>",
        "<b>x",
        "x</b>",
        "<div>x</div>",
        "<br/>",
        "a & b",
        "a > b",
        "&nbsp;",
        '<a href="u" target="_blank">x</a>',
        '<code class="language-py">x</code>',
        "<pre><b>x</b></pre>",
        "<blockquote><blockquote>x</blockquote></blockquote>",
    ],
)
def test_checker_rejects_invalid_html(bad: str) -> None:
    with pytest.raises(AssertionError):
        check_html(bad)


# --- markdown_to_html ------------------------------------------------------------------------

RENDER_CASES = [
    ("bold", "**bold**", "<b>bold</b>"),
    ("nested_bold_italic", "**bold _italic_**", "<b>bold <i>italic</i></b>"),
    ("italic_with_bold", "_a **b** c_", "<i>a <b>b</b> c</i>"),
    ("triple_emphasis", "***both***", "<i><b>both</b></i>"),
    ("strikethrough", "~~gone~~ kept", "<s>gone</s> kept"),
    ("inline_code_tag", "use `<tag> & x` here", "use <code>&lt;tag&gt; &amp; x</code> here"),
    ("bold_code", "**run `ls`**", "<b>run <code>ls</code></b>"),
    ("escape_text", "a < b & c > d", "a &lt; b &amp; c &gt; d"),
    ("script_block", "<script>alert('x')</script>", "&lt;script&gt;alert('x')&lt;/script&gt;"),
    ("inline_html", "hi <b>there</b>", "hi &lt;b&gt;there&lt;/b&gt;"),
    ("html_comment", "<!-- note -->", "&lt;!-- note --&gt;"),
    ("md_entities", "AT&amp;T &copy; &#60;", "AT&amp;T © &lt;"),
    ("heading", "# Title", "<b>Title</b>"),
    ("heading_then_text", "## Part *two*\ntext", "<b>Part <i>two</i></b>\n\ntext"),
    ("heading_no_double_bold", "### A **B** C", "<b>A B C</b>"),
    ("setext_heading", "Big\n===", "<b>Big</b>"),
    ("empty_heading", "#", ""),
    ("paragraphs", "p1\n\n\n\np2", "p1\n\np2"),
    ("soft_break", "a\nb", "a\nb"),
    ("hard_break_spaces", "a  \nb", "a\nb"),
    ("hard_break_backslash", "a\\\nb", "a\nb"),
    ("link", "[site](https://example.com)", '<a href="https://example.com">site</a>'),
    (
        "link_quotes_ampersands",
        '[a "q" & b](https://x.com/?a=1&b="2")',
        '<a href="https://x.com/?a=1&amp;b=%222%22">a "q" &amp; b</a>',
    ),
    (
        "link_formatted_text",
        "[**big** link](http://e.com)",
        '<a href="http://e.com"><b>big</b> link</a>',
    ),
    ("link_javascript", "[click](javascript:alert(1))", "click"),
    ("link_javascript_case", "[x](JaVaScRiPt:alert(1))", "x"),
    ("link_data", "[x](data:text/html;base64,AAAA)", "x"),
    ("link_relative", "[rel](/path/to)", "rel"),
    ("link_mailto", "[mail](mailto:a@b.c)", '<a href="mailto:a@b.c">mail</a>'),
    ("link_tg_user_is_no_link", "[x](tg://user?id=1)", "x"),  # a mention nobody gave
    ("link_tg_autolink", "<tg://user?id=1>", "tg://user?id=1"),  # as text
    ("link_empty_text", "[](https://e.com)", '<a href="https://e.com">https://e.com</a>'),
    (
        "autolink",
        "<https://a.b/c?d&e>",
        '<a href="https://a.b/c?d&amp;e">https://a.b/c?d&amp;e</a>',
    ),
    ("image", "![a *cat*](https://i.example/c.png)", '<a href="https://i.example/c.png">a cat</a>'),
    (
        "image_no_alt",
        "![](https://i.ex/c.png)",
        '<a href="https://i.ex/c.png">https://i.ex/c.png</a>',
    ),
    ("image_unsafe", "![pic](javascript:x)", "pic"),
    (
        "image_in_link",
        "[![logo](https://i/l.png)](https://site)",
        '<a href="https://site">logo</a>',
    ),
    ("blockquote", "> quoted **text**", "<blockquote>quoted <b>text</b></blockquote>"),
    ("blockquote_multi", "> a\n>\n> b", "<blockquote>a\n\nb</blockquote>"),
    ("blockquote_nested_flattened", "> a\n>\n> > b", "<blockquote>a\n\nb</blockquote>"),
    ("blockquote_list", "> - x\n> - y", "<blockquote>• x\n• y</blockquote>"),
    ("bullets", "- a\n- b", "• a\n• b"),
    ("bullets_star", "* a\n* b", "• a\n• b"),
    ("ordered", "1. a\n2. b", "1. a\n2. b"),
    ("ordered_paren_start", "3) a\n1) b", "3. a\n4. b"),
    ("ordered_zero_start", "0. a\n1. b", "0. a\n1. b"),
    ("nested_lists", "- a\n  - b\n    - c\n- d", "• a\n  • b\n    • c\n• d"),
    ("mixed_lists", "1. a\n   - b\n   - c\n2. d", "1. a\n  • b\n  • c\n2. d"),
    ("loose_list", "- a\n\n- b", "• a\n• b"),
    ("list_item_continuation", "- a\n  more\n\n  second para", "• a\n  more\n  second para"),
    ("list_formatting", "- **x** and `y`", "• <b>x</b> and <code>y</code>"),
    ("list_with_code", "- a\n\n  ```\n    code\n  ```", "• a\n  <pre>  code</pre>"),
    ("hr", "a\n\n---\n\nb", "a\n\n———\n\nb"),
    (
        "fence_language",
        "```python\nif a < b:\n    pass\n```",
        '<pre><code class="language-python">if a &lt; b:\n    pass</code></pre>',
    ),
    ("fence_no_language", "```\nplain & simple\n```", "<pre>plain &amp; simple</pre>"),
    (
        "fence_info_words",
        "```js title=x\nf()\n```",
        '<pre><code class="language-js">f()</code></pre>',
    ),
    (
        "fence_language_sanitized",
        '```py"><b>\nx\n```',
        '<pre><code class="language-pyb">x</code></pre>',
    ),
    ("fence_keeps_markdown", "```\n**not bold** <b>\n```", "<pre>**not bold** &lt;b&gt;</pre>"),
    ("fence_empty", "```\n```", ""),
    ("indented_code", "    x = 1\n    y = 2", "<pre>x = 1\ny = 2</pre>"),
    (
        "table",
        "| name | qty |\n|:-----|----:|\n| apple | 3 |\n| **kiwi** | 12 |",
        "<pre>name  | qty\n------+----\napple |   3\nkiwi  |  12</pre>",
    ),
    (
        "table_escape",
        "| x | y |\n|---|---|\n| a<b | `c` |",
        "<pre>x   | y\n----+--\na&lt;b | c</pre>",
    ),
    ("table_center", "| a |\n|:-:|\n| xyz |", "<pre> a\n---\nxyz</pre>"),
    ("table_short_row", "| a | b |\n|---|---|\n| 1 |", "<pre>a | b\n--+--\n1 |</pre>"),
    ("empty", "", ""),
    ("whitespace_only", "  \n\n \t\n", ""),
]


@pytest.mark.parametrize(
    ("markdown", "expected"), [c[1:] for c in RENDER_CASES], ids=[c[0] for c in RENDER_CASES]
)
def test_markdown_to_html(markdown: str, expected: str) -> None:
    html = markdown_to_html(markdown)
    assert html == expected
    check_html(html)
    check_chunks(render_chunks(markdown), html)


def test_empty_input_gives_no_chunks() -> None:
    assert render_chunks("") == []
    assert render_chunks(" \n\n ") == []
    assert split_html("") == []
    assert split_html("<b> </b>\n\n") == []


def test_module_does_not_import_telegram() -> None:
    import channels.telegram.format as mod

    tree = ast.parse(Path(mod.__file__ or "").read_text(encoding="utf-8"))
    imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert not any(name.split(".")[0] == "telegram" for name in imported)


# --- html_to_plain ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("html", "plain"),
    [
        ("<b>a &amp; b</b> &lt;x&gt;", "a & b <x>"),
        ('<a href="https://e.com/?a=1&amp;b=2">link</a>', "link"),
        ('<pre><code class="language-py">x = "&quot;"</code></pre>', 'x = """'),
        ("<blockquote>q</blockquote>\n\n• item", "q\n\n• item"),
        ("", ""),
    ],
)
def test_html_to_plain(html: str, plain: str) -> None:
    assert html_to_plain(html) == plain


# --- split_html ------------------------------------------------------------------------------


def _paragraphs(total: int) -> list[str]:
    rng = random.Random(7)
    words = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta"]
    paras: list[str] = []
    size = 0
    while size < total:
        para = " ".join(rng.choice(words) for _ in range(rng.randint(40, 110))) + "."
        paras.append(f"P{len(paras)} {para}")
        size += len(para) + 2
    return paras


def test_long_reply_splits_at_paragraphs() -> None:
    paras = _paragraphs(9000)
    markdown = "\n\n".join(paras)
    assert len(markdown) >= 9000
    chunks = render_chunks(markdown)
    check_chunks(chunks, markdown_to_html(markdown))
    assert len(chunks) >= 3
    for chunk in chunks:
        assert all(part in paras for part in chunk.split("\n\n"))
    assert "\n\n".join(chunks) == markdown


def test_long_code_block_becomes_balanced_pre_chunks() -> None:
    lines = [f"line_{n} = compute({n}) if a < b and c & d else '<none>'  # n" for n in range(300)]
    markdown = "```python\n" + "\n".join(lines) + "\n```"
    html = markdown_to_html(markdown)
    assert len(html) > 3 * TELEGRAM_LIMIT
    chunks = split_html(html)
    check_chunks(chunks, html)
    opener = '<pre><code class="language-python">'
    assert all(c.startswith(opener) and c.endswith("</code></pre>") for c in chunks)
    # Packed, not line-per-message; the entities (&lt; &amp;) count as one unit each.
    assert all(visible_length(c) > TELEGRAM_LIMIT - 100 for c in chunks[:-1])
    assert any(len(c) > TELEGRAM_LIMIT for c in chunks)  # the markup is not counted
    # Cuts fall on line boundaries, so every code line survives intact and in order.
    assert "\n".join(html_to_plain(c) for c in chunks) == "\n".join(lines)


def test_single_huge_word_is_hard_cut() -> None:
    word = "x" * 10_000
    chunks = render_chunks(word)
    check_chunks(chunks, word)
    assert [len(c) for c in chunks] == [4096, 4096, 1808]
    assert "".join(chunks) == word


def test_huge_bold_word_reopens_tag() -> None:
    chunks = render_chunks("**" + "y" * 9000 + "**")
    check_chunks(chunks, "y" * 9000)
    assert len(chunks) == 3
    assert all(c.startswith("<b>") and c.endswith("</b>") for c in chunks)


def test_long_line_splits_at_spaces() -> None:
    words = [f"w{n}" for n in range(400)]
    chunks = split_html(" ".join(words), 100)
    check_chunks(chunks, " ".join(words), 100)
    assert [w for c in chunks for w in c.split(" ")] == words


def test_lines_split_before_spaces() -> None:
    text = "\n".join(f"row {n} has a few words" for n in range(50))
    chunks = split_html(text, 120)
    check_chunks(chunks, text, 120)
    assert all(line.startswith("row ") for c in chunks for line in c.split("\n"))


def test_link_reopened_with_same_attributes() -> None:
    markdown = "[" + "word " * 1200 + '](https://e.com/?a=1&b="2")'
    chunks = render_chunks(markdown)
    check_chunks(chunks, markdown_to_html(markdown))
    assert len(chunks) == 2
    assert all(c.startswith('<a href="https://e.com/?a=1&amp;b=%222%22">') for c in chunks)


def test_nested_tags_reopened_in_order() -> None:
    html = "<blockquote>intro <b>bold <i>" + "deep " * 60 + "</i></b> tail</blockquote>"
    chunks = split_html(html, 120)
    check_chunks(chunks, html, 120)
    assert chunks[1].startswith("<blockquote><b><i>deep")
    assert chunks[-1].endswith("tail</blockquote>")


@pytest.mark.parametrize("limit", range(16, 48))
def test_entity_never_split(limit: int) -> None:
    html = "ab" + "&amp;x&lt;&gt;&quot;" * 12
    chunks = split_html(html, limit)
    check_chunks(chunks, html, limit)
    assert "".join(chunks) == html  # no whitespace anywhere, so cuts lose nothing


def test_entity_at_boundary_moves_whole_and_counts_as_its_character() -> None:
    html = "a" * 40 + "&amp;" + "b" * 10
    assert split_html(html, 40) == ["a" * 40, "&amp;" + "b" * 10]
    assert split_html(html, 41) == ["a" * 40 + "&amp;", "b" * 10]


def test_tags_cost_nothing_visible() -> None:
    html = '<a href="https://e.com/' + "p" * 60 + '">click here</a> then more'
    assert split_html(html, 20) == [html]


@pytest.mark.parametrize("emoji", ["😀", "👍🏽", "🇩🇪"])
def test_emoji_beyond_the_bmp_count_two_units(emoji: str) -> None:
    reply = emoji * 3000
    chunks = render_chunks(reply)
    check_chunks(chunks, reply)
    assert "".join(chunks) == reply
    assert [visible_length(c) for c in chunks[:-1]] == [TELEGRAM_LIMIT] * (len(chunks) - 1)
    assert len(chunks) == -(-utf16_length(reply) // TELEGRAM_LIMIT)


def test_plain_text_splits_by_utf16_units_at_spaces() -> None:
    text = " ".join(["😀" * 10] * 500)  # 10,499 code units
    pieces = split_plain(text)
    assert all(utf16_length(p) <= TELEGRAM_LIMIT for p in pieces)
    assert all(p.endswith(" ") for p in pieces[:-1])  # cut after a space, never in a word
    assert "".join(pieces) == text
    assert split_plain("x" * 10, 4) == ["xxxx", "xxxx", "xx"]
    assert split_plain("😀😀😀", 3) == ["😀", "😀", "😀"]


def test_code_indentation_kept_after_line_cut() -> None:
    code = "\n".join(["def f():"] + ["    x = 1"] * 30)
    html = f"<pre>{code}</pre>"
    chunks = split_html(html, 64)
    check_chunks(chunks, html, 64)
    assert all(c.startswith(("<pre>    x = 1", "<pre>def f():")) for c in chunks)


def test_limit_too_small_rejected() -> None:
    with pytest.raises(ValueError):
        split_html("hello", 5)


# --- property-style ---------------------------------------------------------------------------


def _random_markdown(rng: random.Random, n: int) -> tuple[str, list[str]]:
    """Random Markdown from snippets; each carries a unique marker word that must survive."""
    markers: list[str] = []

    def mk() -> str:
        markers.append(f"mk{n}x{len(markers)}q")
        return markers[-1]

    def words(k: int) -> str:
        return " ".join(
            rng.choice(["lorem", "a<b", "c&d", "x>y", '"q"', "ipsum"]) for _ in range(k)
        )

    inline = [
        lambda: f"{mk()} {words(rng.randint(1, 30))}",
        lambda: f"**{mk()} _{words(2)}_ {words(3)}**",
        lambda: f"_{mk()}_",
        lambda: f"~~{mk()} {words(2)}~~",
        lambda: f"`{mk()} <tag> & {words(2)}`",
        lambda: f'[{mk()} "t" & u](https://e.com/?a=1&b="{rng.randint(0, 9)}")',
        lambda: f"[{mk()}](javascript:alert(1))",
        lambda: f"![{mk()}](https://i.ex/p.png)",
        lambda: f"<span>{mk()}</span>",
        lambda: f"{mk()}" + "z" * rng.choice([10, 200, 5000]),
        lambda: f"&amp;{mk()}&lt;",
    ]

    def para() -> str:
        return " ".join(rng.choice(inline)() for _ in range(rng.randint(1, 6)))

    def code() -> str:
        lines = [f"    {mk()} = '<{i}>' & {i}" for i in range(rng.choice([1, 5, 40, 250]))]
        return f"```{rng.choice(['', 'py', 'c++'])}\n" + "\n".join(lines) + "\n```"

    blocks = [
        para,
        lambda: f"{'#' * rng.randint(1, 6)} {para()}",
        lambda: f"> {para()}\n>\n> > {para()}",
        lambda: "\n".join(
            f"{'  ' * rng.randint(0, 1)}- {para()}" for _ in range(rng.randint(1, 5))
        ),
        lambda: "\n".join(f"{i}. {para()}" for i in range(1, rng.randint(2, 5))),
        code,
        lambda: "---",
        lambda: (
            f"| h{mk()} | b |\n|---|:-:|\n" + "\n".join(f"| {mk()} | **x** |" for _ in range(3))
        ),
        lambda: f"- {para()}\n\n  > {para()}",
        lambda: f"> ```\n> {mk()} < 1\n> ```",
    ]
    markdown = "\n\n".join(rng.choice(blocks)() for _ in range(rng.randint(0, 8)))
    return markdown, markers


def test_random_markdown_invariants() -> None:
    rng = random.Random(20240601)
    for n in range(300):
        markdown, markers = _random_markdown(rng, n)
        limit = rng.choice([64, 120, 300, 1000, TELEGRAM_LIMIT])
        html = markdown_to_html(markdown)
        plain = check_html(html)
        chunks = split_html(html, limit)
        check_chunks(chunks, html, limit)
        positions = [plain.find(m) for m in markers]
        assert -1 not in positions, (markdown, markers)
        assert positions == sorted(positions)


@pytest.mark.parametrize(
    ("text", "units"),
    [("", 0), ("plain", 5), ("héllo", 5), ("😀 ok", 5), ("𝄞𝄞é", 5), ("a\ud800b", 3)],
)
def test_utf16_length_counts_what_telegram_counts(text: str, units: int) -> None:
    # A character beyond the BMP is two UTF-16 units; a lone surrogate (never sent) one.
    assert utf16_length(text) == units

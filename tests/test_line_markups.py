"""The model's Markdown in Slack's mrkdwn and Discord's Markdown (nanomem/text/mrkdwn.py,
discord_markdown.py): one walk of the blocks, each platform's markers and escaping."""

from __future__ import annotations

from nanomem.text.discord_markdown import discord_length, neutralise_mentions, render_discord
from nanomem.text.mrkdwn import mrkdwn_length, render_mrkdwn

MARKDOWN = """# Plan **now**

Some **bold**, *slanted*, ~~struck~~, `code` and a [link](https://x.org/?a=1&b=2).
Next line.

- one
  - nested
3. three

> quoted
> > inside

```python
if a < b:
    print("&")
```

| a | bb |
|---|---:|
| 1 | 2 |

---"""


def test_slack_gets_mrkdwn() -> None:
    assert render_mrkdwn(MARKDOWN).split("\n") == [
        "*Plan now*",
        "",
        "Some *bold*, _slanted_, ~struck~, `code` and a <https://x.org/?a=1&amp;b=2|link>.",
        "Next line.",
        "",
        "• one",
        "  • nested",
        "",
        "3. three",
        "",
        "> quoted",
        "> ",
        "> inside",
        "",
        "```",
        "if a &lt; b:",
        '    print("&amp;")',
        "```",
        "",
        "```",
        "a | bb",
        "--+---",
        "1 |  2",
        "```",
        "",
        "———",
    ]


def test_slack_escapes_what_would_mention_or_link() -> None:
    text = render_mrkdwn("<!channel> <@U123> <https://evil.example|Your bank> a & b")
    assert text == (
        "&lt;!channel&gt; &lt;@U123&gt; &lt;https://evil.example|Your bank&gt; a &amp; b"
    )
    link = render_mrkdwn("[a|b>c](https://e.org/x|y>z) [no](javascript:alert(1))")
    assert link == "<https://e.org/x%7Cy%3Ez|a¦b&gt;c> no"
    assert mrkdwn_length("**x**") == 3


def test_discord_gets_its_markdown() -> None:
    assert render_discord(MARKDOWN).split("\n") == [
        "# Plan now",
        "",
        "Some **bold**, *slanted*, ~~struck~~, `code` and a [link](https://x.org/?a=1&b=2).",
        "Next line.",
        "",
        "- one",
        "  - nested",
        "",
        "3. three",
        "",
        "> quoted",
        "> ",
        "> inside",
        "",
        "```python",
        "if a < b:",
        '    print("&")',
        "```",
        "",
        "```",
        "a | bb",
        "--+---",
        "1 |  2",
        "```",
        "",
        "———",
    ]


def test_discord_mentions_in_the_models_text_never_ping() -> None:
    for text in ["@everyone look", "@here", "<@123>", "<@!123>", "<@&456>", "<#789>"]:
        for wrapped in (text, f"`{text}`", f"```\n{text}\n```", f"**{text}**"):
            shown = render_discord(wrapped)
            assert "@everyone" not in shown and "@here" not in shown, shown
            assert not any(f"<{c}" in shown for c in "@#"), shown
    assert neutralise_mentions("@Everyone") == "@\u200bEveryone"
    assert neutralise_mentions("mail me@here.org") == "mail me@\u200bhere.org"


def test_discord_shows_the_models_markers_as_written() -> None:
    shown = render_discord(
        "\\*not bold\\* a_b_c https://x.org/a_b_c\n\n\\# not a heading\n\n1\\. no"
    )
    assert shown == "\\*not bold\\* a\\_b\\_c https://x.org/a_b_c\n\n\\# not a heading\n\n1\\. no"
    assert render_discord("[x](javascript:alert(1)) [y](https://e.org/(a))") == (
        "x [y](https://e.org/%28a%29)"
    )
    assert render_discord("#### four") == "**four**"
    assert discord_length("😀 **x**") == 7  # code points of `😀 **x**`, as Discord counts

"""The forms the core picks from a channel's capabilities: Markdown as plain text, and a long
text split where a reader would pause."""

from __future__ import annotations

from nanomem.agent.channel import Capabilities, forms
from nanomem.agent.markup import plain_text, split_text
from nanomem.agent.outbound import Button, OutboundMessage, Text

MARKDOWN = """# Plans

Some **bold**, *slanted* and `code`, a [link](https://example.org) and <https://x.org>.

- one
- two
  - nested

1. first
2. second

> quoted

```python
print("as written")
```

| a | b |
|---|---|
| 1 | 2 |"""


def test_markdown_reads_as_plain_text() -> None:
    assert plain_text(MARKDOWN) == "\n".join(
        [
            "Plans",
            "",
            "Some bold, slanted and code, a link (https://example.org) and https://x.org.",
            "",
            "- one",
            "- two",
            "  - nested",
            "",
            "1. first",
            "2. second",
            "",
            "> quoted",
            "",
            'print("as written")',
            "",
            "a | b",
            "1 | 2",
        ]
    )


def test_a_long_text_is_cut_at_paragraphs_then_lines_then_words_then_anywhere() -> None:
    assert split_text("aaaa\n\nbbbb cccc\ndddd", 10) == ["aaaa", "bbbb cccc", "dddd"]
    assert split_text("one two three four", 9) == ["one two", "three", "four"]
    assert split_text("x" * 25, 10) == ["x" * 10, "x" * 10, "x" * 5]
    assert split_text("short", 10) == ["short"]


def test_the_core_acts_on_markup_and_max_chars() -> None:
    reply = Text("**a** b\n\n" + "c " * 20, buttons=(Button("Yes", "/yes"),))
    msg = OutboundMessage("line", "1", reply)
    parts = forms(msg, Capabilities(markup="plain", buttons=True, max_chars=30))
    assert [p.content for p in parts] == ["a b", ("c " * 15).strip(), ("c " * 5).strip()]
    assert [p.part.buttons for p in parts] == [(), (), reply.buttons]  # type: ignore[union-attr]
    # A channel that renders itself gets the Markdown whole; commands and errors stay as written.
    assert forms(msg, Capabilities(markup="html", buttons=True)) == [msg]
    error = OutboundMessage("line", "1", Text("**not markdown**", "error"))
    assert forms(error, Capabilities(markup="plain")) == [error]

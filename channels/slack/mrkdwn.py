"""The model's Markdown as Slack's mrkdwn: the smallest renderer that is safe, until the shared
one (issue 33, item 4) lands in the core.

Safety first: `&`, `<` and `>` are escaped everywhere, so nothing the model writes becomes a
`<!channel>` ping, a `<@U…>` mention or a link it did not write; the only links made are
Markdown links to http(s) addresses, written by us as `<url|text>`."""

from __future__ import annotations

import re

_FENCE = re.compile(r"(```.*?(?:```|\Z)|`[^`\n]+`)", re.S)
_LINK = re.compile(r"\[([^\]\n]{1,500})\]\((https?://[^\s()<>|]{1,2000})\)")
_BOLD = re.compile(r"(\*\*|__)(?=\S)(.+?)(?<=\S)\1")
_ITALIC = re.compile(r"(?<![*\w])\*(?=\S)([^*\n]+?)(?<=\S)\*(?![*\w])")
_STRIKE = re.compile(r"~~(?=\S)(.+?)(?<=\S)~~")
_HEADING = re.compile(r"^#{1,6}[ \t]+(.+?)[ \t#]*$", re.M)
_BULLET = re.compile(r"^([ \t]*)[-*+][ \t]+", re.M)


def escape(text: str) -> str:
    """Plain text as Slack shows it literally (its only three control characters)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def render(markdown: str) -> str:
    """mrkdwn for the model's Markdown: code kept as written (escaped), emphasis, headings as
    bold lines, bullets as •, Markdown links to http(s) as Slack links."""
    pieces = _FENCE.split(markdown)
    return "".join(escape(piece) if n % 2 else _prose(piece) for n, piece in enumerate(pieces))


def _prose(text: str) -> str:
    links: list[str] = []

    def keep_link(found: re.Match[str]) -> str:
        label, url = found.group(1), found.group(2)
        links.append(f"<{escape(url)}|{escape(label)}>")
        return f"\x00{len(links) - 1}\x00"

    text = _LINK.sub(keep_link, text.replace("\x00", ""))
    text = escape(text)
    text = _HEADING.sub(lambda m: f"\x01{m.group(1)}\x01", text)
    text = _BOLD.sub(lambda m: f"\x01{m.group(2)}\x01", text)
    text = _ITALIC.sub(r"_\1_", text)
    text = _STRIKE.sub(r"~\1~", text)
    text = _BULLET.sub(r"\1• ", text)
    text = text.replace("\x01", "*")
    return re.sub(r"\x00(\d+)\x00", lambda m: links[int(m.group(1))], text)


def measure(markdown: str) -> int:
    """A reply's length as Slack counts it: its rendering's."""
    return len(render(markdown))

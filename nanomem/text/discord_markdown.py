"""The model's Markdown as Discord shows it: mostly as written, its text escaped so it shows
as written, and every mention in it (`@everyone`, `@here`, `<@id>`, `<@&id>`, `<#id>`)
neutralised so it never pings; tables as code blocks, headings past the third in bold."""

from __future__ import annotations

import re

from nanomem.text.markdown_lines import LineMarkup, render_lines

__all__ = ["discord_length", "neutralise_mentions", "render_discord"]

_ZWSP = "\u200b"
_MENTION = re.compile(r"@(everyone|here)\b|<(?=[@#:/]|a:|t:|id:)", re.IGNORECASE)
# Outside a URL, what Discord's Markdown would read as a marker; a URL is left as written (a
# backslash in it would be part of the link).
_MARKERS = re.compile(r"(https?://[^\s<>]+)|([\\*_~|`\[\]])")
_LINE_START = re.compile(r"(?m)^([ \t]*)(?:([>#+-])|(\d+)([.)]))")


def neutralise_mentions(text: str) -> str:
    """`text` with a zero-width space in every mention, which then shows but never pings."""
    return _MENTION.sub(lambda m: f"@{_ZWSP}{m[1]}" if m[1] else f"<{_ZWSP}", text)


def _escape(text: str) -> str:
    return _MARKERS.sub(lambda m: m[1] or "\\" + m[2], text)


class _Discord(LineMarkup):
    strong = ("**", "**")
    em = ("*", "*")
    strike = ("~~", "~~")
    bullet = "- "

    def text(self, text: str) -> str:
        return neutralise_mentions(_escape(text))

    def lines(self, text: str) -> str:
        # A line the model began with `>`, `#`, `-` or `1.` is text, not a quote or a list.
        return _LINE_START.sub(lambda m: m[1] + ("\\" + m[2] if m[2] else f"{m[3]}\\{m[4]}"), text)

    def code(self, text: str) -> str:
        text = neutralise_mentions(text.replace("``", f"`{_ZWSP}`"))
        return f"`` {text} ``" if "`" in text else f"`{text}`"

    def fence(self, info: str, code: str) -> str:
        body = neutralise_mentions(code.replace("```", f"`{_ZWSP}``"))
        return f"```{info}\n{body}\n```"

    def link(self, label: str, href: str | None, plain: str) -> str:
        if href is None:
            return label
        url = href.replace("(", "%28").replace(")", "%29").replace(" ", "%20")
        url = neutralise_mentions(url.replace("<", "%3C").replace(">", "%3E"))
        return url if plain == href else f"[{label}]({url})"

    def heading(self, level: int, text: str) -> str:
        return f"{'#' * level} {text}" if level <= 3 else f"**{text}**"


_DISCORD = _Discord()


def render_discord(markdown: str) -> str:
    """`markdown` as a Discord message's content."""
    return render_lines(markdown, _DISCORD)


def discord_length(markdown: str) -> int:
    """What Discord counts against its 2,000: the rendered content's code points (its API
    counts Python characters, an emoji one)."""
    return len(render_discord(markdown))

"""The model's Markdown as Slack's mrkdwn: `*bold*`, `_italic_`, `~strike~`, code, `<url|text>`
links, headings as bold lines, lists as lines; `&`, `<` and `>` escaped, so no text the model
wrote can mention `<!channel>` or a user, or open a link of its own."""

from __future__ import annotations

from nanomem.text.markdown_lines import LineMarkup, render_lines

__all__ = ["mrkdwn_length", "render_mrkdwn"]


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


class _Slack(LineMarkup):
    def text(self, text: str) -> str:
        return _escape(text)

    def code(self, text: str) -> str:
        # mrkdwn has no escape for a backtick inside code: a look-alike keeps the span whole.
        return f"`{_escape(text.replace('`', 'ˋ'))}`"

    def fence(self, info: str, code: str) -> str:
        # Slack shows no language; an info string would be read as the first line of code.
        return "```\n" + _escape(code.replace("```", "`\u200b``")) + "\n```"

    def link(self, label: str, href: str | None, plain: str) -> str:
        if href is None:
            return label
        url = _escape(href.replace("|", "%7C").replace(" ", "%20"))
        text = _escape(plain.replace("|", "¦")).strip()
        return f"<{url}|{text}>" if text and text != href else f"<{url}>"


_SLACK = _Slack()


def render_mrkdwn(markdown: str) -> str:
    """`markdown` as Slack's mrkdwn (a message's `text`, a section block's text)."""
    return render_lines(markdown, _SLACK)


def mrkdwn_length(markdown: str) -> int:
    """The length Slack counts against its limits: characters of the mrkdwn sent."""
    return len(render_mrkdwn(markdown))

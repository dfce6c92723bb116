"""USER.md's placeholder ("Nothing is known yet."): true of a new workspace, false once Dream
has written a fact there, so Dream's first real edit of the file takes it out.

The placeholder is the first paragraph of workspace-template/USER.md after its heading, so the
template stays its one source. Homes from older templates held it at the start of a longer
paragraph; only the sentence goes there."""

from __future__ import annotations

import re
from functools import cache

from nanomem.agent import bundled_dir
from nanomem.features.dream.journal import Edit, Staging

FILE = "USER.md"


@cache
def placeholder() -> str:
    try:
        text = (bundled_dir("workspace-template") / FILE).read_text(encoding="utf-8")
    except OSError:
        return ""
    body = text.split("\n", 1)[1] if text.startswith("# ") and "\n" in text else text
    return body.strip().split("\n\n")[0].strip()


def placeholder_edit(staging: Staging) -> Edit | None:
    """The edit that takes the placeholder out of USER.md, when this run changed the file and
    left the placeholder in it (once, word for word); None otherwise."""
    sentence = placeholder()
    before = (staging.base.get(FILE) or b"").decode("utf-8", errors="replace")
    after = staging.read(FILE)
    if not sentence or after == before or after.count(sentence) != 1:
        return None
    # The sentence and the space after it: a blank line, or the space before the next words.
    found = re.search(re.escape(sentence) + r"(?:[ \t]*\n(?:[ \t]*\n)?|[ \t]+)?", after)
    return Edit(FILE, "edit", found.group(0), "") if found else None

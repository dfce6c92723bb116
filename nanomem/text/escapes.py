"""Text a model or a workspace file wrote, made safe to show on a terminal.

A reply may carry terminal control sequences: a title change (OSC 0), a clipboard write
(OSC 52), a cleared screen or moved cursor (CSI), a device control string. On a terminal they
act instead of showing, so they are removed and the plain text kept (newlines and tabs too).
"""

from __future__ import annotations

import re

# Strings that run to a terminator (BEL or ST): OSC, DCS, SOS, PM, APC, as ESC + a letter or
# as their C1 byte. One left open ends at the line's end, so it cannot eat the rest of a reply.
_STRING = (
    r"(?:\x1b[\]P^_X]|[\x90\x98\x9d\x9e\x9f])[^\x07\x1b\x9c\n]*"
    r"(?:\x07|\x1b\\|\x9c|(?=\n)|\x1b?\Z)"
)
_CSI = r"(?:\x1b\[|\x9b)[0-?]*[ -/]*(?:[@-~]|\Z)"
_ESCAPE = r"\x1b[ -/]*(?:[0-~]|\Z)"  # ESC c (reset), ESC 7, ESC ( B, ...
_CONTROL = r"[\x00-\x08\x0b-\x1f\x7f-\x9f]"  # C0 but \t and \n, DEL, C1: \r and \b too
# A sequence cut off at the end (`\Z`) is removed too: shown as it streams in, text so far is
# then always the beginning of what the whole text shows.
_SEQUENCE = re.compile("|".join((_STRING, _CSI, _ESCAPE, _CONTROL)))


def strip_escapes(text: str) -> str:
    """`text` without control sequences or control characters (but newline and tab)."""
    if text.isprintable():  # the usual case: nothing to look for
        return text
    return _SEQUENCE.sub("", text)

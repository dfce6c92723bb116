"""A reader that closed stdout early (`nanomem memory log | head`): every command leaves
quietly, as a Unix tool does, instead of with a traceback."""

from __future__ import annotations

import os
import sys

# 128 + SIGPIPE: what a shell reports for a Unix tool whose reader left (`yes | head`), so a
# script tells "the reader had enough" from a failure (1).
EXIT_READER_GONE = 141


def reader_gone() -> int:
    """The exit code. What is still buffered for stdout goes to /dev/null: flushing it at
    interpreter exit would print "Exception ignored ... BrokenPipeError" otherwise."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # stdout is no file (an in-process caller's buffer)
        pass
    return EXIT_READER_GONE

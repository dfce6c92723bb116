"""Helpers shared by the test files: they import from here (or tests.fakes, tests.conftest),
never from one another. Waiting is on a condition with a deadline, never a fixed pause."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

WAIT_S = 60.0  # the default safety net of a wait: each ends on its condition, not on the clock
POLL_S = 0.01  # how often a condition is looked at again


async def until(
    check: Callable[[], Any], timeout: float = WAIT_S, what: str = "", every: float = POLL_S
) -> Any:
    """Wait in the event loop for `check()` to be true (looked at each `every` s); its value."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not (value := check()):
        if loop.time() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what or check}")
        await asyncio.sleep(every)
    return value


def wait_until(
    check: Callable[[], Any], timeout: float = WAIT_S, what: str = "", every: float = POLL_S
) -> Any:
    """Wait, blocking (for subprocess tests), for `check()` to be true; its value."""
    deadline = time.monotonic() + timeout
    while not (value := check()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what or check}")
        time.sleep(every)
    return value

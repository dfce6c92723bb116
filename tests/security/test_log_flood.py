"""Log floods: one error repeated on every request of a real aiohttp server, and tens of MB of
error lines against the real rotating file log. Neither may drown the log or erase older days."""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web
from loguru import logger

from nanomem.agent import MessageBus
from nanomem.gateway.health import Health, serve_health
from nanomem.log import KEEP_PER_DAY, setup_logging

WAIT_S = 30.0
INTERVAL_S = 1.0


@pytest.fixture
def logging_state() -> Iterator[None]:
    """setup_logging changes process-wide logging: put it back afterwards."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    logger.remove()
    root.handlers[:] = handlers
    root.setLevel(level)


def add_failing_route(app: web.Application) -> None:
    async def boom(_: web.Request) -> web.Response:
        raise RuntimeError("the handler broke on request 12345")

    app.router.add_get("/boom", boom)


def log_text(log_dir: Path) -> str:
    logger.complete()
    return (log_dir / "nanomem.log").read_text()


async def test_one_error_repeated_per_request_is_logged_once_then_counted(
    tmp_path: Path, logging_state: None
) -> None:
    setup_logging("INFO", tmp_path, stderr_level="CRITICAL", repeat_interval_s=INTERVAL_S)
    runner, port = await serve_health(Health(MessageBus()), "127.0.0.1", 0, [add_failing_route])
    hits = 0
    try:
        async with aiohttp.ClientSession() as session:

            async def hit() -> None:
                nonlocal hits
                async with session.get(f"http://127.0.0.1:{port}/boom") as response:
                    assert response.status == 500
                hits += 1

            started = time.monotonic()
            for _ in range(300):  # aiohttp logs each with its traceback
                await hit()
            # One line per interval begun, never one per request.
            assert written(tmp_path) <= 1 + (time.monotonic() - started) / INTERVAL_S
            # Then until a request's error is written again: that line sums up every one left
            # out since the line before, so each request is accounted for, however long the
            # flood took on a loaded machine.
            deadline = time.monotonic() + WAIT_S
            while True:
                before = written(tmp_path)
                await hit()
                if written(tmp_path) > before:
                    break
                assert time.monotonic() < deadline, "no line after an interval"
                await asyncio.sleep(0.05)
            took = time.monotonic() - started
    finally:
        await runner.cleanup()
    lines = [line for line in log_text(tmp_path).splitlines() if "Error handling request" in line]
    assert 2 <= len(lines) <= 1 + took / INTERVAL_S
    assert any("more like it" in line for line in lines)  # an interval's summary
    left_out = sum(int(line.split("(and ")[1].split()[0]) for line in lines if "(and " in line)
    assert len(lines) + left_out == hits  # every error counted, each written or summed up


def written(log_dir: Path) -> int:
    return log_text(log_dir).count("Error handling request")


def word(number: int) -> str:
    """A distinct word without digits: distinct lines, not one repeated error."""
    letters = ""
    for _ in range(5):
        number, digit = divmod(number, 26)
        letters += chr(ord("a") + digit)
    return letters


@pytest.mark.slow
def test_a_flood_of_error_lines_never_erases_an_earlier_days_log(
    tmp_path: Path, logging_state: None
) -> None:
    yesterday = tmp_path / "nanomem.2026-01-01_10-00-00_000000.log.gz"
    yesterday.write_bytes(b"yesterday's log")
    day_ago = time.time() - 86_400
    os.utime(yesterday, (day_ago, day_ago))
    setup_logging("INFO", tmp_path, stderr_level="CRITICAL")
    filler = "x" * 1000
    for number in range(80_000):  # about 80 MB: eight rotations at 10 MB
        logger.error("flood {} {}", word(number), filler)
    logger.complete()
    assert yesterday.exists()
    rotated = [p for p in tmp_path.iterdir() if p.name != "nanomem.log" and p != yesterday]
    assert rotated and all(p.suffix == ".gz" for p in rotated)
    assert len(rotated) <= KEEP_PER_DAY

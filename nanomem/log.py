"""Logging: loguru to stderr and a rotating file; known secrets are masked in every record."""

from __future__ import annotations

import contextlib
import logging
import re
import sys
import threading
import time
from collections import OrderedDict
from datetime import date, timedelta
from pathlib import Path
from typing import Any

from loguru import logger

from nanomem.text.escapes import strip_escapes
from nanomem.text.masking import (  # noqa: F401 (their home is nanomem.text.masking; imported from here too)
    MASK,
    _secrets,
    is_secret_name,
    masked,
    redact,
    redact_message,
    register_environment_secrets,
    register_secrets,
    secret_of,
    shown_so_far,
)


class _Repeats:
    """Floods of one warning or error: the first is logged, then at most one line per interval,
    saying how many were left out meanwhile. Keyed by where it was logged and its text with
    numbers blanked (ids, counts, ports), so "the same error" is recognised."""

    KEPT = 1024  # distinct keys remembered; the oldest are forgotten

    def __init__(self, interval_s: float) -> None:
        self.interval_s = interval_s
        self._seen: OrderedDict[tuple[Any, ...], list[float]] = OrderedDict()  # [at, left out]
        self._lock = threading.Lock()  # records come from threads too (asyncio.to_thread)

    def patch(self, record: Any) -> None:
        if record["level"].no < _WARNING or record["extra"].get(EACH):
            return
        text = _NUMBER.sub("#", record["message"][:200])
        key = (record["name"], record["function"], record["line"], record["level"].no, text)
        now = time.monotonic()
        with self._lock:
            seen = self._seen.get(key)
            if seen is not None and now - seen[0] < self.interval_s:
                seen[1] += 1
                record["extra"]["repeat"] = True  # counted, not written
                return
            self._seen[key] = [now, 0]
            self._seen.move_to_end(key)
            while len(self._seen) > self.KEPT:
                self._seen.popitem(last=False)
        if seen is not None and seen[1]:
            record["message"] += f" (and {int(seen[1])} more like it since the last such line)"


_WARNING = 30
# Bound on a line logged once per thing by design (each schedule that cannot be armed): such
# lines differ only in numbers (water1, water2, #4) but are not a flood, so none is counted away.
EACH = "each"
_NUMBER = re.compile(r"\d+")
REPEAT_INTERVAL_S = 60.0
_repeats = _Repeats(REPEAT_INTERVAL_S)


def _patch(record: Any) -> None:
    # A log is read on a terminal (stderr, `tail -f`): what a model or a server wrote in it
    # (an error body, a tool's output) must not act there.
    record["message"] = strip_escapes(redact(record["message"]))
    _repeats.patch(record)


def _written(record: Any) -> bool:
    return record["extra"].get("repeat") is not True


# The file log: rotated by size and compressed; a flood can fill today's share, never erase
# an earlier day's files (at most KEEP_PER_DAY files a day, KEEP_DAYS days).
ROTATE_AT = "10 MB"
KEEP_PER_DAY = 5
KEEP_DAYS = 14


def _retention(files: list[str]) -> None:
    """Keep each day's newest KEEP_PER_DAY rotated files, for the last KEEP_DAYS days."""
    by_day: dict[date, list[tuple[float, Path]]] = {}
    for name in files:
        path = Path(name)
        with contextlib.suppress(FileNotFoundError):
            mtime = path.stat().st_mtime
            by_day.setdefault(date.fromtimestamp(mtime), []).append((mtime, path))
    oldest = date.today() - timedelta(days=KEEP_DAYS - 1)
    for day, dated in by_day.items():
        dated.sort(reverse=True)
        for _, path in dated if day < oldest else dated[KEEP_PER_DAY:]:
            path.unlink(missing_ok=True)


def _format(record: Any) -> str:
    text = "{time:YYYY-MM-DD HH:mm:ss.SSS} | {level: <8} | {name}:{line} | {message}\n"
    if record["exception"] is not None:
        import traceback

        exc = record["exception"]
        lines = traceback.format_exception(exc.type, exc.value, exc.traceback)
        trace = strip_escapes(redact("".join(lines)))
        record["extra"]["trace"] = trace.replace("{", "{{").replace("}", "}}")
        text += "{extra[trace]}"
    return text


class _InterceptHandler(logging.Handler):
    """Route stdlib logging (litellm, httpx, telegram) into loguru, through the same redaction."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            level: str | int = logger.level(record.levelname).name
        except ValueError:
            level = record.levelno
        logger.opt(depth=6, exception=record.exc_info).log(level, record.getMessage())


def setup_logging(
    level: str,
    log_dir: Path | None,
    *,
    stderr_level: str | None = None,
    repeat_interval_s: float = REPEAT_INTERVAL_S,
) -> None:
    global _repeats
    register_environment_secrets()
    logger.remove()
    _repeats = _Repeats(repeat_interval_s)  # each setup counts afresh
    logger.configure(patcher=_patch)
    logger.add(
        sys.stderr,
        level=stderr_level or level,
        filter=_written,
        format="{time:HH:mm:ss} | {level: <8} | {message}",
        backtrace=False,
        diagnose=False,  # diagnose prints local variables, API keys among them
        colorize=False,
    )
    if log_dir is not None:
        log_dir.mkdir(parents=True, exist_ok=True)
        logger.add(
            log_dir / "nanomem.log",
            level=level,
            format=_format,
            filter=_written,
            rotation=ROTATE_AT,
            retention=_retention,
            compression="gz",
            encoding="utf-8",
            backtrace=False,
            diagnose=False,
            enqueue=False,
        )
    logging.basicConfig(handlers=[_InterceptHandler()], level=logging.INFO, force=True)
    # httpx logs every request URL at INFO, and a Telegram URL carries the bot token.
    for noisy in ("httpx", "httpcore", "LiteLLM", "litellm", "asyncio", "telegram", "apscheduler"):
        logging.getLogger(noisy).setLevel(logging.WARNING)

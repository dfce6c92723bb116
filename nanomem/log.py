"""Logging: loguru to stderr and a rotating file; known secrets are masked in every record."""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any

from loguru import logger

from nanomem.escapes import strip_escapes
from nanomem.masking import (  # noqa: F401 (their home is nanomem.masking; imported from here too)
    MASK,
    _secrets,
    is_secret_name,
    redact,
    redact_message,
    register_environment_secrets,
    register_secrets,
    shown_so_far,
)


def _patch(record: Any) -> None:
    # A log is read on a terminal (stderr, `tail -f`): what a model or a server wrote in it
    # (an error body, a tool's output) must not act there.
    record["message"] = strip_escapes(redact(record["message"]))


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


def setup_logging(level: str, log_dir: Path | None, *, stderr_level: str | None = None) -> None:
    register_environment_secrets()
    logger.remove()
    logger.configure(patcher=_patch)
    logger.add(
        sys.stderr,
        level=stderr_level or level,
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
            rotation="10 MB",
            retention=5,
            encoding="utf-8",
            backtrace=False,
            diagnose=False,
            enqueue=False,
        )
    logging.basicConfig(handlers=[_InterceptHandler()], level=logging.INFO, force=True)
    # httpx logs every request URL at INFO, and a Telegram URL carries the bot token.
    for noisy in ("httpx", "httpcore", "LiteLLM", "litellm", "asyncio", "telegram", "apscheduler"):
        logging.getLogger(noisy).setLevel(logging.WARNING)

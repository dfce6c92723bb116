"""Logging: loguru to stderr and a rotating file; known secrets are masked in every record."""

from __future__ import annotations

import logging
import os
import re
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from loguru import logger

from nanomem.escapes import strip_escapes

MASK = "***"
_secrets: list[str] = []


def register_secrets(values: Iterable[str | None]) -> None:
    """Values that must never be written out: API keys, bot tokens."""
    for value in values:
        if value and len(value) >= 6 and value not in _secrets:
            _secrets.append(value)
    _secrets.sort(key=len, reverse=True)


# Variables whose values are secrets: what providers and tools read (OPENAI_API_KEY,
# ANTHROPIC_API_KEY, AWS_SECRET_ACCESS_KEY, GITHUB_TOKEN, NANOMEM_TELEGRAM__TOKEN, ...).
_SECRET_NAME = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIALS?)$|SECRET", re.I)
_MIN_ENV_SECRET = 8  # shorter values are too likely to be ordinary words


def is_secret_name(name: str) -> bool:
    return bool(_SECRET_NAME.search(name))


def register_environment_secrets(environ: Mapping[str, str] = os.environ) -> None:
    register_secrets(
        value
        for name, value in environ.items()
        if is_secret_name(name) and len(value) >= _MIN_ENV_SECRET
    )
    # A proxy URL's password (HTTPS_PROXY=http://me:pw@host): a library's error or a shell
    # command's output (`env`) may show the URL, and its name says nothing of a secret.
    for name, value in environ.items():
        if name.lower().endswith("_proxy") and "@" in value:
            password = _password(value)
            register_secrets([password, unquote(password)] if password else [])


def _password(url: str) -> str | None:
    try:
        return urlsplit(url if "://" in url else f"http://{url}").password
    except ValueError:  # an unreadable URL: the lean client does not use it either
        return None


def redact(text: str) -> str:
    for secret in _secrets:
        if secret in text:
            text = text.replace(secret, MASK)
    return text


def shown_so_far(text: str) -> str:
    """The part of a growing text that can be shown now: masked, and short of the end by as
    much as the longest secret, so a secret still arriving is never shown in part."""
    masked = redact(text)
    if not _secrets:
        return masked
    return masked[: max(0, len(masked) - (len(_secrets[0]) - 1))]


def redact_message(message: dict[str, Any]) -> dict[str, Any]:
    """A chat message with every known secret masked (its text and tool-call arguments)."""
    if not _secrets:
        return message
    content = message.get("content")
    out = dict(message)
    if isinstance(content, str):
        out["content"] = redact(content)
    elif isinstance(content, list):  # parts: text beside images
        out["content"] = [
            {**part, "text": redact(part["text"])}
            if isinstance(part, dict) and isinstance(part.get("text"), str)
            else part
            for part in content
        ]
    if message.get("tool_calls"):
        out["tool_calls"] = [
            {
                **call,
                "function": {
                    **call["function"],
                    "arguments": redact(call["function"]["arguments"]),
                },
            }
            for call in message["tool_calls"]
        ]
    return out


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

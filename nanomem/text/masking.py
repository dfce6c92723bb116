"""Known secrets (API keys, bot tokens, secret environment variables), masked as `***` in any
text: what is logged, shown, sent to a model or written to disk. No loguru here: the chat's
prompt history masks with it before the rest of nanomem has loaded."""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit

if TYPE_CHECKING:
    from nanomem.config import Settings

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


def shown_url(url: str) -> str:
    """A URL as it may be shown: scheme, host, port and path; no user, password or query
    (which may hold a key)."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        return "(an unreadable URL)"
    host = f"[{host}]" if ":" in host else host
    return f"{parts.scheme}://{host}{port}{parts.path}"


def masked(secret: str) -> str:
    """How a key is shown to its owner: only its last 4 characters, and those only when at
    least 12 stay hidden."""
    return MASK + secret[-4:] if len(secret) >= 16 else MASK


def secret_of(value: Any) -> str:
    """The text of a SecretStr setting, or "" when it is unset."""
    return value.get_secret_value() if value is not None else ""


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


def redact_values(value: Any) -> Any:
    """Every string inside a JSON-like value masked (before it is encoded: JSON's escapes would
    hide a secret holding a quote, a backslash or non-ASCII characters from `redact`)."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {key: redact_values(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [redact_values(item) for item in value]
    return value


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


def configured_secrets(settings: Settings) -> list[str]:
    """Every secret in the settings, whichever channels run: `chat -m` must mask the bot
    token someone pastes as well as the gateway does."""
    web = settings.tools.web
    values = [settings.llm.api_key, settings.telegram.token, *settings.api.keys]
    values += [web.brave_api_key, web.tavily_api_key, settings.voice.api_key]
    for server in settings.mcp.servers.values():  # MCP servers' env and headers (tokens)
        values += [*server.env.values(), *server.headers.values()]
    secrets = [value.get_secret_value() for value in values if value is not None]
    # "Bearer <token>": the token alone is as secret as the whole header.
    secrets += [word for value in secrets if " " in value for word in value.split()[1:]]
    for proxy in (settings.llm.proxy, settings.telegram.proxy):  # http://me:pw@host: its password
        if proxy and "@" in proxy and (password := _password(proxy)):
            secrets += [password, unquote(password)]
    return secrets

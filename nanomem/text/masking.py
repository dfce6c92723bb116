"""Known secrets (API keys, bot tokens, secret environment variables), masked as `***` in any
text: what is logged, shown, sent to a model or written to disk. No loguru here: the chat's
prompt history masks with it before the rest of nanomem has loaded."""

from __future__ import annotations

import os
import re
import types
import typing
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
    register_secrets(environment_secrets(environ))


def environment_secrets(environ: Mapping[str, str] = os.environ) -> list[str]:
    """The values of variables named as secrets (…_KEY, …_TOKEN, …), and proxy passwords."""
    found = [
        value
        for name, value in environ.items()
        if is_secret_name(name) and len(value) >= _MIN_ENV_SECRET
    ]
    # A proxy URL's password (HTTPS_PROXY=http://me:pw@host): a library's error or a shell
    # command's output (`env`) may show the URL, and its name says nothing of a secret.
    for name, value in environ.items():
        if name.lower().endswith("_proxy") and "@" in value:
            password = url_password(value)
            found += [password, unquote(password)] if password else []
    return found


def url_password(url: str) -> str | None:
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


# Settings that are URLs and may carry a password (http://me:pw@host).
PROXY_SETTINGS = (("llm", "proxy"), ("telegram", "proxy"))


def configured_secrets(settings: Settings) -> list[str]:
    """Every secret in the settings, whichever channels run: `chat -m` must mask the bot
    token someone pastes as well as the gateway does."""
    secrets = [value.get_secret_value() for _, value in secret_settings(settings)]
    # "Bearer <token>": the token alone is as secret as the whole header.
    secrets += [word for value in secrets if " " in value for word in value.split()[1:]]
    for section, name in PROXY_SETTINGS:
        proxy = getattr(getattr(settings, section), name)
        if proxy and "@" in proxy and (password := url_password(proxy)):
            secrets += [password, unquote(password)]
    return secrets


def secret_settings(value: Any, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], Any]]:
    """(path, SecretStr) for every value typed SecretStr in the settings: API keys, tokens,
    MCP servers' env and headers, and any secret setting added later, by its type."""
    from pydantic import BaseModel, SecretStr

    if isinstance(value, SecretStr):
        return [(path, value)]
    if isinstance(value, BaseModel):
        items: list[tuple[str, Any]] = [
            (name, getattr(value, name)) for name in type(value).model_fields
        ]
    elif isinstance(value, dict):
        items = [(str(key), item) for key, item in value.items()]
    elif isinstance(value, list | tuple):
        items = [(str(i), item) for i, item in enumerate(value)]
    else:
        return []
    return [found for name, item in items for found in secret_settings(item, (*path, name))]


def is_secret_setting(path: tuple[str, ...]) -> bool:
    """Whether the setting at `path`, or one it lies within, is typed SecretStr (or holds
    them): `llm.api_key`, `api.keys`, `mcp.servers.<name>.env` and each variable in it."""
    from pydantic import BaseModel

    from nanomem.config import Settings

    kind: Any = Settings
    for part in path:
        kind = _unwrapped(kind)
        if _holds_secret(kind):
            return True
        if isinstance(kind, type) and issubclass(kind, BaseModel):
            field = kind.model_fields.get(part)
            if field is None:
                return False
            kind = field.annotation
        elif typing.get_origin(kind) in (list, dict):
            kind = typing.get_args(kind)[-1]  # any name or position
        else:
            return False
    return _holds_secret(kind)


def _holds_secret(kind: Any) -> bool:
    """SecretStr, or a list or a table of them."""
    from pydantic import SecretStr

    kind = _unwrapped(kind)
    if typing.get_origin(kind) in (list, dict):
        return _holds_secret(typing.get_args(kind)[-1])
    return kind is SecretStr


def _unwrapped(kind: Any) -> Any:
    """The type inside `X | None` and `Annotated[X, ...]`."""
    while True:
        origin = typing.get_origin(kind)
        if origin is typing.Annotated:
            kind = typing.get_args(kind)[0]
        elif origin in (typing.Union, types.UnionType):
            args = [a for a in typing.get_args(kind) if a is not type(None)]
            if len(args) != 1:
                return kind
            kind = args[0]
        else:
            return kind

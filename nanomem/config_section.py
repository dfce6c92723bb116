"""The base of every settings section, and the checks several sections share."""

from __future__ import annotations

from pydantic import ConfigDict

# Every section's: an unknown key is an error, and defaults are checked like given values.
# (Each module declares its `_Section(BaseModel)` itself, so linters see pydantic models.)
SECTION = ConfigDict(extra="forbid", validate_default=True)


def http_url(value: str, example: str) -> str:
    """`value` if it is an http(s) URL with a host; a URL no client can use stops the start."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018  (raises for a port that is not a number in range)
    except ValueError as exc:
        raise ValueError(f"not a URL ({exc}); e.g. {example}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"not an http:// or https:// URL with a host, e.g. {example}")
    return value


def blank_is_unset(value: object) -> object:
    """A blank string setting means unset (an empty variable in a compose file)."""
    return (value.strip() or None) if isinstance(value, str) else value

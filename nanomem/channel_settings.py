"""The settings sections of the messengers (`[telegram]`, `[matrix]`, `[discord]`, `[slack]`):
each denies strangers by default and names its owner explicitly."""

from __future__ import annotations

import re
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, Field, SecretStr, field_validator

from nanomem.config_section import SECTION, blank_is_unset

# Telegram's rule for a webhook's secret_token: 1 to 256 of these.
WEBHOOK_SECRET = re.compile(r"[A-Za-z0-9_-]{1,256}")
# Every path the web app answers besides `/` (channels/web): its headers go on them all.
WEB_PATHS: tuple[str, ...] = ("/login", "/logout", "/chat", "/memory", "/timeline", "/review")
WEB_PATHS += ("/recall", "/operations", "/static")
# The gateway's own routes, /health, the agent API and the web app's pages (whether it is on
# or not: turning it on later must not take a webhook's path): never a webhook's.
_GATEWAY_PATHS = ("/health", "/v1/", *WEB_PATHS)
WEB_TOKEN_CHARS = 16


class _Section(BaseModel):
    model_config = SECTION


class TelegramSettings(_Section):
    enabled: bool = False
    token: SecretStr | None = None
    # Not default_factory=list: pydantic reads a factory's signature, and for a builtin that
    # means tokenizing text (a regex compile of ~10 ms at every start); defaults are copied.
    allow_from: list[int | str] = []
    # The owner's numeric user id: only they run owner commands, approve shell commands and
    # memory changes, and Dream reviews go to their private chat. Unset: the first user id in
    # allow_from, as before this setting existed (logged once at start).
    owner: int | None = Field(None, gt=0)
    base_url: str = "https://api.telegram.org/bot"
    base_file_url: str = "https://api.telegram.org/file/bot"
    proxy: str | None = None
    group_policy: Literal["mention", "open"] = "mention"
    max_file_mb: int = Field(20, ge=1, le=2000)
    stream: bool = True  # private chats see a reply grow while the model writes it
    stream_groups: bool = False  # groups too (edits of one message; drafts are private-only)
    album_wait_s: float = Field(1.0, gt=0, le=10)  # an album is one message: its parts' wait
    # "polling": getUpdates from here (no public address needed). "webhook": Telegram posts
    # updates to the gateway at webhook_url (behind a reverse proxy with TLS); the gateway sets
    # and removes the webhook itself and checks Telegram's secret-token header.
    mode: Literal["polling", "webhook"] = "polling"
    # The public https address Telegram posts to; its path is the route the gateway serves.
    webhook_url: str | None = None
    # Telegram sends it back in X-Telegram-Bot-Api-Secret-Token; unset: made at start.
    webhook_secret: SecretStr | None = None

    def webhook_problem(self) -> str | None:
        """What keeps webhook mode from working with these settings, as a sentence for the
        person (Telegram's rules: https only, a secret of its characters); None: nothing."""
        url, secret = (self.webhook_url or "").strip(), self.webhook_secret
        if not url:
            return (
                'telegram.mode is "webhook" but telegram.webhook_url is not set: set it to the '
                "public https address Telegram posts to (a reverse proxy in front of the "
                'gateway), or set telegram.mode = "polling"'
            )
        try:
            parts = urlsplit(url)
            parts.port  # noqa: B018 (a port that is not a number raises here)
        except ValueError:
            return "telegram.webhook_url is not a URL"
        if parts.scheme != "https" or not parts.hostname:
            return (
                "telegram.webhook_url must be an https:// address (Telegram posts only over "
                "TLS): put a reverse proxy with a certificate in front of the gateway"
            )
        if parts.fragment or parts.username or parts.password:
            return "telegram.webhook_url may not hold a #fragment, a user or a password"
        path = parts.path or "/"
        if path == "/" or any(path == own.rstrip("/") or path.startswith(own.rstrip("/") + "/")
                              for own in _GATEWAY_PATHS):  # fmt: skip
            return (
                f"telegram.webhook_url's path {path!r} is the gateway's own (/, /health, /v1/, "
                "the web app's /login, /chat, /memory, ...): "
                "give it one of its own, e.g. https://bot.example.org/telegram/webhook"
            )
        if secret is not None and not WEBHOOK_SECRET.fullmatch(secret.get_secret_value()):
            return (
                "telegram.webhook_secret must be 1 to 256 letters, digits, _ or - (Telegram's "
                "rule); leave it unset to have one made"
            )
        return None

    @property
    def owner_id(self) -> int | None:
        """The owner's user id (and private chat): `owner`, else the first user in allow_from."""
        if self.owner is not None:
            return self.owner
        return self.assumed_owner

    @property
    def assumed_owner(self) -> int | None:
        """Who old configs without `owner` meant: the first positive id in allow_from."""
        if self.owner is not None:
            return None
        return next((v for v in self.allow_from if isinstance(v, int) and v > 0), None)

    @field_validator("webhook_url", "webhook_secret", mode="before")
    @classmethod
    def _blank_is_unset(cls, value: Any) -> Any:
        return blank_is_unset(value)  # "" in a compose file: a secret is made, say

    @field_validator("owner", mode="before")
    @classmethod
    def _a_user_id(cls, value: Any) -> Any:
        if isinstance(value, str) and not value.strip():
            return None  # NANOMEM_TELEGRAM__OWNER="" unsets it
        if isinstance(value, bool) or (isinstance(value, str) and not value.strip().isdigit()):
            raise ValueError(f"{value!r} is not a numeric Telegram user id (a positive number)")
        return value

    @field_validator("allow_from")
    @classmethod
    def _numeric_ids(cls, values: list[int | str]) -> list[int | str]:
        """Usernames can change hands; only numeric user ids (or "*") grant access."""
        checked: list[int | str] = []
        for value in values:
            if value == "*" or isinstance(value, int):
                checked.append(value)
            elif isinstance(value, str) and value.strip().lstrip("-").isdigit():
                checked.append(int(value))
            else:
                raise ValueError(f'{value!r} is not a numeric Telegram user id (or "*")')
        return checked


def _messenger_ids(values: list[str], what: str, pattern: str) -> list[str]:
    """Ids that grant access: each must look like the platform's own (a display name can be
    taken by anyone), or "*" for everyone."""
    checked: list[str] = []
    for value in values:
        value = str(value).strip()
        if value != "*" and not re.fullmatch(pattern, value):
            raise ValueError(f'{value!r} is not {what} (or "*")')
        checked.append(value)
    return checked


class _MessengerSection(_Section):
    """What every messenger beside Telegram shares: deny by default, an explicit owner."""

    enabled: bool = False
    # Who may talk to the agent besides the owner (always allowed); everyone else is ignored
    # silently and named once in the log. ["*"] lets anyone in.
    allow_from: list[str] = []
    # In rooms and channels: "mention" answers only when mentioned or replied to; "open" all.
    group_policy: Literal["mention", "open"] = "mention"
    max_file_mb: int = Field(20, ge=1, le=2000)
    stream: bool = True  # private chats see a reply grow (edits at a bounded rate)
    stream_groups: bool = False  # rooms too


class MatrixSettings(_MessengerSection):
    # The homeserver's client-server API, e.g. "https://matrix.example.org".
    homeserver: str = ""
    user_id: str = ""  # the bot's own account, "@nanomem:example.org"
    access_token: SecretStr | None = None
    password: SecretStr | None = None  # logs in once when there is no access_token
    device_id: str = ""
    # The owner's user id, "@you:example.org": always allowed; the only one whose invites are
    # accepted besides allow_from's; Dream reviews go to a DM with them.
    owner: str | None = None
    # End-to-end encrypted rooms, when the e2e extra is installed (said at start when it is not).
    e2e: bool = False

    @field_validator("allow_from")
    @classmethod
    def _user_ids(cls, values: list[str]) -> list[str]:
        return _messenger_ids(values, "a Matrix user id (@name:server)", r"@[^:\s]+:\S+")

    @field_validator("owner")
    @classmethod
    def _owner_id(cls, value: str | None) -> str | None:
        value = blank_is_unset(value)  # type: ignore[assignment]
        if value is not None:
            _messenger_ids([value], "a Matrix user id (@name:server)", r"@[^:\s]+:\S+")
        return value


class DiscordSettings(_MessengerSection):
    token: SecretStr | None = None  # the bot token (Developer Portal → Bot)
    owner: str | None = None  # the owner's numeric user id (Developer Mode → Copy User ID)
    # Discord's REST API; changed only for a test server (the gateway's address comes from it).
    api_base: str = "https://discord.com/api/v10"

    @field_validator("allow_from")
    @classmethod
    def _user_ids(cls, values: list[str]) -> list[str]:
        return _messenger_ids(values, "a numeric Discord user id", r"[0-9]{5,25}")

    @field_validator("owner")
    @classmethod
    def _owner_id(cls, value: str | None) -> str | None:
        value = blank_is_unset(value)  # type: ignore[assignment]
        if value is not None:
            _messenger_ids([value], "a numeric Discord user id", r"[0-9]{5,25}")
        return value


class SlackSettings(_MessengerSection):
    bot_token: SecretStr | None = None  # xoxb-…: the bot's Web API token
    # "socket": Socket Mode with app_token (xapp-…), no public address needed. "http": the
    # Events API posts to the gateway, checked with signing_secret.
    mode: Literal["socket", "http"] = "socket"
    app_token: SecretStr | None = None
    signing_secret: SecretStr | None = None
    owner: str | None = None  # the owner's member id, "U0123ABCD"
    # Slack's Web API; changed only for a test server.
    api_base: str = "https://slack.com/api/"
    # Without a Socket Mode connection this long, /health and the log say so (slack-sdk
    # reconnects by itself; a refresh takes a second or two).
    down_after_s: float = Field(15.0, gt=0, le=3600)

    @field_validator("allow_from")
    @classmethod
    def _user_ids(cls, values: list[str]) -> list[str]:
        return _messenger_ids(values, "a Slack member id (U…/W…)", r"[UW][A-Z0-9]{2,30}")

    @field_validator("owner")
    @classmethod
    def _owner_id(cls, value: str | None) -> str | None:
        value = blank_is_unset(value)  # type: ignore[assignment]
        if value is not None:
            _messenger_ids([value], "a Slack member id (U…/W…)", r"[UW][A-Z0-9]{2,30}")
        return value


class WebAppSettings(_Section):
    """The web app (channels/web): chat and the memory's pages at `/` on the gateway's server,
    for the owner alone."""

    enabled: bool = False
    # What the owner logs in with (at least 16 characters, never logged); `nanomem gateway` and
    # onboarding write a new one in the config file where none is set. `nanomem web-link`
    # prints a one-time login link instead.
    token: SecretStr | None = None
    # Served on a non-loopback gateway.host only behind a reverse proxy that adds TLS (it then
    # trusts X-Forwarded-Proto for the cookie's Secure flag): refused to start otherwise.
    behind_proxy: bool = False
    session_days: float = Field(30.0, gt=0, le=365)  # a login lasts this long
    max_upload_mb: int = Field(20, ge=1, le=2000)  # files in one chat message, together

    @field_validator("token", mode="before")
    @classmethod
    def _guessless(cls, value: Any) -> Any:
        """A token nobody can guess, that a login form carries whole; errors never hold it."""
        raw = value.get_secret_value() if isinstance(value, SecretStr) else value
        if not isinstance(raw, str) or not raw.strip():
            return None  # blank: unset, and the gateway makes one
        raw = raw.strip()
        if len(raw) < WEB_TOKEN_CHARS or not all("!" <= ch <= "~" for ch in raw):
            raise ValueError(
                f"must be at least {WEB_TOKEN_CHARS} characters without spaces (delete it to "
                "have `nanomem gateway` make one)"
            )
        return raw

    def start_problem(self, host: str, tls: bool) -> str | None:
        """Why the web app may not start on gateway.host `host` (`tls`: the gateway speaks
        https), said for the person; None: it may. The token and the login cookie never cross
        a network in the clear: off loopback, only over the gateway's TLS or a proxy's."""
        from nanomem.config import is_loopback

        if self.token is None:
            return "web.token is not set: the web app needs one to log in with"
        if is_loopback(host) or tls or self.behind_proxy:
            return None
        return (
            f"the web app will not serve gateway.host = {host!r} (not loopback) in the clear: "
            "set gateway.tls_cert and gateway.tls_key for https, or put a reverse proxy with TLS "
            'in front and set web.behind_proxy = true, or set gateway.host = "127.0.0.1"'
        )

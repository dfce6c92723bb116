"""Connecting Telegram while onboarding: the bot token (hidden, checked with the Bot API's
getMe), the owner's numeric user id, then `enabled`, `token` and `owner` written into
config.toml's [telegram] table in place."""

from __future__ import annotations

import getpass
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from nanomem.cli.first_run import Ask, ask_owner

if TYPE_CHECKING:
    from pathlib import Path

    from nanomem.config import TelegramSettings
    from nanomem.locks import FileLock

TRIES = 3
# What @BotFather hands out: the bot's id, a colon, then letters, digits, '_' and '-'. Checked
# before it goes into a URL's path, where a '/' or '?' would call something else.
TOKEN_SHAPE = re.compile(r"\d{1,20}:[A-Za-z0-9_-]{1,200}")


class TokenProblem(Exception):
    """What is wrong with a token, said without it."""


@dataclass(frozen=True)
class TelegramChoices:
    token: str  # "": one set elsewhere (NANOMEM_TELEGRAM__TOKEN) is kept there
    owner: int | None
    bot: str  # the bot's @username, as getMe gave it ("" when not checked)


def needs_setup(telegram: TelegramSettings) -> bool:
    """Telegram is off, or on without a token or an owner."""
    return not (telegram.enabled and telegram.token is not None and telegram.owner is not None)


def ask_telegram(
    telegram: TelegramSettings,
    config: Path,
    fresh: bool,
    command: str,
    *,
    ask: Ask = input,
    ask_secret: Ask = getpass.getpass,
    say: Callable[[str], None] = print,
) -> TelegramChoices | None:
    """At a terminal, the questions for what Telegram lacks: on a new home when it is enabled,
    and at every `nanomem onboard`, which offers to connect it when it is off. None when it is
    left unconnected (said, with how to connect it later)."""
    import sys

    onboarding = command == "onboard"
    if not sys.stdin.isatty() or not needs_setup(telegram) or not (fresh or onboarding):
        return None
    if not telegram.enabled and not (onboarding and _yes(ask("Connect Telegram now? [y/N] "))):
        return None
    token, bot = "", ""
    if telegram.token is None:
        say(_text("intro"))
        try:
            token, bot = _ask_token(telegram, ask_secret, say)
        except TokenProblem as exc:
            say(_text("later", reason=f" ({exc})", config=config))
            return None
    owner = telegram.owner
    if owner is None:
        say(_text("owner"))
        owner = ask_owner(telegram.model_copy(update={"enabled": True}), ask=ask, say=say)
    return TelegramChoices(token, owner, bot)


def _ask_token(
    telegram: TelegramSettings, ask_secret: Ask, say: Callable[[str], None]
) -> tuple[str, str]:
    """(token, bot's username) once getMe accepts a typed token; TokenProblem to skip."""
    for _ in range(TRIES):
        token = ask_secret("Bot token (hidden; empty to skip): ").strip()
        if not token:
            raise TokenProblem("no token given")
        try:
            bot = check_token(token, telegram)
        except TokenProblem as exc:
            say(str(exc))
            continue
        say(f"The token works: this is @{bot}.")
        return token, bot
    raise TokenProblem(f"no working token in {TRIES} tries")


def check_token(token: str, telegram: TelegramSettings) -> str:
    """The bot's username, asked by the Telegram channel (getMe); a TokenProblem that says
    what went wrong, never with the token in it."""
    if not TOKEN_SHAPE.fullmatch(token):
        raise TokenProblem(
            "That is not a bot token: @BotFather's look like 123456789:AAF-xyz... "
            "(digits, a colon, then letters); copy it again."
        )
    import asyncio

    from nanomem.channel_registry import load_channel

    try:
        username: str = asyncio.run(load_channel("telegram").bot_username(token, telegram))
    except ValueError as exc:
        raise TokenProblem(str(exc)) from None
    return username


def save_telegram(config: Path, lock: FileLock, choices: TelegramChoices) -> str:
    """`enabled = true`, the token and the owner written into [telegram] in place (the
    template's commented lines uncommented, never a second table) as `nanomem config set`
    writes a setting: under the config's lock, checked before it replaces the file; what to
    tell the person."""
    from nanomem.config import ConfigError
    from nanomem.config_file import set_values

    values: dict[str, object] = {"enabled": True}
    if choices.token:
        values["token"] = choices.token
    if choices.owner is not None:
        values["owner"] = choices.owner
    try:
        set_values(config, lock, "telegram", values)
    except ConfigError:  # e.g. a hand-written `token = """...` over lines: not ours to rewrite
        return _text("later", reason=" ([telegram] could not be set in place)", config=config)
    return _text("done", bot=choices.bot, owner=choices.owner, config=config)


def _text(part: str, **values: object) -> str:
    from nanomem.agent import Templates

    return Templates().render("telegram_onboard.md.j2", part=part, **values).strip()


def _yes(answer: str) -> bool:
    return answer.strip().lower() in ("y", "yes")

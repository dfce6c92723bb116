"""A web gateway that also serves Telegram (the loopback fake), so the pages' tests make real
chats, schedules and tasks through a messenger, as a person would."""

from __future__ import annotations

from typing import Any

from playwright.sync_api import Page

from nanomem.home import Home
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.telegram_server import FakeTelegram
from tests.helpers import wait_until
from tests.helpers.browser import WEB_TOKEN
from tests.helpers.gateway import GatewayProcess

WEB = {"NANOMEM_WEB__ENABLED": "true", "NANOMEM_WEB__TOKEN": WEB_TOKEN}


def telegram_web_gateway(
    home: Home, telegram: FakeTelegram, llm: FakeOpenAI, **env: str
) -> GatewayProcess:
    return GatewayProcess(home, telegram, llm, **(WEB | env))


def say(telegram: FakeTelegram, chat: int, text: str, **sender: Any) -> str:
    """`text` from the chat's person (a group's: pass chat_type and user_id); the bot's next
    message there that is not a progress line."""
    seen = max((m["message_id"] for m in telegram.sent_messages(chat)), default=0)
    telegram.send_text(chat, text, **sender)

    def replied() -> str | None:
        for message in telegram.sent_messages(chat):
            said = str(message.get("text") or "")
            if message["message_id"] > seen and not said.startswith("⚙"):
                return said
        return None

    return str(wait_until(replied, what=f"a reply to {text[:40]!r}"))


def tab_to(page: Page, selector: str, most: int = 80) -> None:
    """Press Tab until the element `selector` has the focus, as a keyboard's person would."""
    for _ in range(most):
        page.keyboard.press("Tab")
        if page.evaluate("(s) => document.activeElement?.matches(s) ?? false", selector):
            return
    raise AssertionError(f"{selector} never took the focus by Tab")


def fits(page: Page) -> bool:
    """Nothing wider than the viewport: no sideways scrolling at a phone's width."""
    return bool(page.evaluate("document.documentElement.scrollWidth <= window.innerWidth"))

"""The line channel (tests/helpers/line_channel.py) in a gateway process of its own, so the
contract suite can kill it as it kills `nanomem gateway`: `python -m tests.helpers.line_gateway`
with the home and model in the environment, as the real command takes them.

Around the worked example it adds what a platform has and a raw socket has not: who may talk
(the owner and LINE_ALLOW; anyone else refused), a chat's history kept on the platform's side
(`<home>/line-history/<chat>.jsonl`: what the bot said, read by the test whether or not the
person was connected), and a rate limit on request (`<home>/line-rate-limit` holds "<times>
<seconds>": the next sends are refused with `DeliveryLater(retry_in_s=seconds)`)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from loguru import logger

from nanomem.agent import DeliveryLater, MessageBus, OutboundMessage
from nanomem.agent.intake_kit import Strangers
from nanomem.audience import Sender
from tests.helpers.line_channel import LineChannel

LIMIT_FILE = "line-rate-limit"
HISTORY = "line-history"


class ContractLine(LineChannel):
    def __init__(self, root: Path, owner: str, allow: set[str], max_chars: int) -> None:
        super().__init__(owner=owner, max_chars=max_chars, stored=True)
        self.root, self.allow = root, allow | {owner}
        self.strangers = Strangers("line", "LINE_ALLOW")

    async def start(self, bus: MessageBus) -> None:
        await super().start(bus)
        logger.info("line: running on port {}", self.port)

    async def _take(self, chat: str, text: str, sender: Sender) -> None:
        if sender.id not in self.allow:  # deny by default: nothing stored, nothing said
            self.strangers.refuse(sender.id, sender.name)
            return
        await super()._take(chat, text, sender)

    async def send(self, msg: OutboundMessage) -> None:
        limit = self.root / LIMIT_FILE
        if limit.exists():
            times, seconds = limit.read_text().split()
            limit.unlink() if int(times) <= 1 else limit.write_text(f"{int(times) - 1} {seconds}")
            raise DeliveryLater("line: rate limited", retry_in_s=float(seconds))
        history = self.root / HISTORY / f"{msg.chat_id}.jsonl"
        history.parent.mkdir(exist_ok=True)
        with history.open("a") as out:  # the platform's record, before the person sees it
            out.write(json.dumps({"text": msg.content}) + "\n")
        await super().send(msg)


def main() -> None:
    from nanomem.app import build_app
    from nanomem.config import load_settings
    from nanomem.gateway.service import Gateway, finish, serve
    from nanomem.home import Home
    from nanomem.log import setup_logging

    home = Home(Path(os.environ["NANOMEM_HOME"]))
    settings = load_settings(home.config)
    setup_logging(settings.log.level, home.logs)
    allow = set(os.environ.get("LINE_ALLOW", "").split())
    channel = ContractLine(
        home.root, os.environ["LINE_OWNER"], allow, int(os.environ.get("LINE_MAX_CHARS", "0"))
    )
    app = build_app(settings, home, durable=True)
    finish(serve(Gateway(app, {channel.name: channel})))


if __name__ == "__main__":
    main()

"""A Dream scripted: the history it reads, the edits the model makes, and the run asked for."""

from __future__ import annotations

from nanomem.agent.bus import InboundMessage
from nanomem.app import App
from nanomem.audience import Sender
from nanomem.home import Home
from nanomem.memory.history import NewEntry
from nanomem.providers.scripted import ScriptedProvider, call, text
from tests.conftest import make_app
from tests.fakes.openai_server import FakeOpenAI

USER_BEFORE = "# User\n"


LEARN = [
    text("NEW: USER.md: the person is called Ada and drinks green tea"),
    call(
        "edit_memory",
        {
            "file": "USER.md",
            "old_text": USER_BEFORE,
            "new_text": USER_BEFORE + "- Name: Ada\n- Drinks green tea\n",
        },
    ),
    call("append_memory", {"file": "memory/MEMORY.md", "line": "- 2026-11-22: Ada started Apollo"}),
    text("Added Ada's name, her tea, and the Apollo project."),
]


async def app_with_history(home: Home, provider: ScriptedProvider, **sections) -> App:  # type: ignore[no-untyped-def]
    app = make_app(home, provider, **sections)
    await app.history.append(
        [
            NewEntry("cli:direct", "- 2026-11-22: the user is Ada, drinks green tea", "summary"),
            NewEntry("cli:direct", "- 2026-11-22: Ada started project Apollo", "summary"),
        ]
    )
    return app


async def dream(app: App, text_: str = "/dream") -> str:
    reply = await app.loop.handle(InboundMessage("cli", "direct", text_, Sender(is_owner=True)))
    assert reply is not None
    return reply.content


def script_a_dream(fake: FakeOpenAI) -> None:
    fake.reply("NEW: USER.md: the person is Ada; she loves green tea")
    fake.tool_call(
        "edit_memory",
        {
            "file": "USER.md",
            "old_text": "Nothing is known yet.",
            "new_text": "- Name: Ada\n- Loves green tea\n\nMore facts:",
        },
    )
    fake.reply("Recorded Ada's name and her tea.")

"""What people read: a count agrees with its noun, a session is named by its key, no doubled
parentheses, and the help names every channel the gateway serves (issue 31, slip 13)."""

from nanomem.agent.bus import InboundMessage
from nanomem.audience import Sender
from nanomem.features.dream import Dreaming
from nanomem.features.dream.journal import Journal
from nanomem.features.dream.review import PendingChange
from nanomem.features.voice.endpoint import audio_endpoint
from nanomem.home import Home
from nanomem.memory.history import NewEntry
from nanomem.providers.scripted import ScriptedProvider, call, text
from tests.conftest import cli_env, make_app, run_cli_here, settings_for


def test_a_change_from_one_entry_says_one_history_entry() -> None:
    change = PendingChange("c0ffee", "2026-11-27T10:00:00", 1, Journal(1, None, {}), "", {})
    assert change.describe().startswith("Dream prepared a memory change from 1 history entry (")


async def test_why_of_a_run_that_read_one_terminal_entry(home: Home) -> None:
    steps = [
        text("NEW: USER.md: lives in Quito"),  # cites no entry
        call(
            "edit_memory",
            {"file": "USER.md", "old_text": "# User\n", "new_text": "# User\n- Lives in Quito\n"},
        ),
        text("Added Quito."),
    ]
    app = make_app(home, ScriptedProvider(steps))
    await app.history.append([NewEntry("cli:direct", "- the user moved to Quito", "summary")])
    await app.feature(Dreaming).dream.run()
    sender = Sender("user", is_owner=True)
    reply = await app.loop.handle(InboundMessage("cli", "direct", "/why Quito", sender))
    assert reply is not None
    assert "It read 1 history entry and did not say which one" in reply.content
    assert "the chat cli:direct" in reply.content
    assert "cli chat direct" not in reply.content


def test_the_model_connection_is_named_in_one_pair_of_parentheses(home: Home) -> None:
    settings = settings_for(
        home, llm={"model": "openai/gpt-4o-mini", "api_base": "http://127.0.0.1:9/v1"}
    )
    endpoint = audio_endpoint(settings)
    assert endpoint is not None
    assert endpoint.describe() == "http://127.0.0.1:9/v1 (the model connection, llm.model)"


def test_the_help_names_each_channel_the_gateway_serves(home: Home) -> None:
    shown = run_cli_here("--help", env=cli_env(home)).stdout
    gateway = next(line for line in shown.splitlines() if line.strip().startswith("gateway"))
    assert "Telegram" in gateway and "API" in gateway

"""The terminal channel in-process: how replies are drawn (the pty tests cover the keyboard)."""

import io

from rich.console import Console

from channels.terminal.channel import TerminalChannel
from nanomem.agent.bus import InboundMessage
from nanomem.audience import Sender
from nanomem.home import Home
from nanomem.providers.scripted import ScriptedProvider, text
from tests.conftest import make_app


def msg(content: str) -> InboundMessage:
    return InboundMessage("cli", "direct", content, Sender("user", is_owner=True))


def terminal(home: Home) -> tuple[TerminalChannel, io.StringIO]:
    screen = io.StringIO()
    console = Console(file=screen, width=200, color_system=None, force_terminal=False)
    return TerminalChannel(history_file=home.root / "history", console=console), screen


async def test_help_is_shown_as_written_one_command_a_line(home: Home) -> None:
    app = make_app(home, ScriptedProvider())
    channel, screen = terminal(home)
    reply = await app.loop.handle(msg("/help"))
    assert reply is not None and reply.part.command == "help"
    await channel.send(reply)
    lines = screen.getvalue().splitlines()
    assert "/help — show the commands" in lines
    assert "/dream-restore [id] — list memory versions, or undo the one with that id" in lines
    assert "Anything else you write goes to the assistant." in lines


async def test_placeholders_and_the_lines_of_new_are_kept(home: Home) -> None:
    provider = ScriptedProvider([text("Hello!"), text("- the person said hello")])
    app = make_app(home, provider)
    channel, screen = terminal(home)
    await app.loop.handle(msg("hi"))
    for command in ("/new", "/dream-restore"):
        reply = await app.loop.handle(msg(command))
        assert reply is not None
        await channel.send(reply)
    shown = screen.getvalue().splitlines()
    assert shown[0] == "New session started."
    assert shown[1].startswith("Archived 2 messages")
    assert "/dream-restore <id> undoes one." in shown


async def test_the_models_words_are_still_rendered_as_markdown(home: Home) -> None:
    app = make_app(home, ScriptedProvider([text("It is **bold** and\n\n- a list item")]))
    channel, screen = terminal(home)
    reply = await app.loop.handle(msg("hi"))
    assert reply is not None and not reply.part.command
    await channel.send(reply)
    shown = screen.getvalue()
    assert "It is bold and" in shown and "**" not in shown
    assert "• a list item" in shown

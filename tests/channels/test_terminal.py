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


REPLY = (
    "Three lines:\nalpha\nbeta\n\n```sh\nls -la\n```\n\n- one\n- two\n\n"
    "a<b and <div>x</div>\x1b]0;pwned\x07 and <<end tag>>\n\nThe end."
)


async def test_a_streamed_reply_is_printed_block_by_block_as_one_render_would(
    home: Home,
) -> None:
    from channels.terminal.channel import LiveReply
    from channels.terminal.markdown import Literal
    from nanomem.agent import Delta, OutboundMessage, Text

    channel, screen = terminal(home)
    view = LiveReply(channel.console)
    with view:
        for end in range(1, len(REPLY) + 1, 3):  # three characters at a time
            view.grow(Delta(REPLY[end - 1 : end + 2], REPLY[: end + 2], 0))
            view.steps[0].looked = view.steps[0].pause = 0.0  # every cut is tried
        printed = screen.getvalue()
    assert "Three lines:\nalpha\nbeta" in printed  # finished blocks out before the end
    assert "The end." not in printed  # the last block is still being written
    clean = REPLY.replace("\x1b]0;pwned\x07", "")  # as send() hands the final reply on
    channel._render(OutboundMessage("cli", "direct", Text(clean)), shown=view.finish())
    whole = io.StringIO()
    Console(file=whole, width=200, color_system=None, force_terminal=False).print(Literal(clean))
    assert screen.getvalue() == whole.getvalue() + "\n"
    assert "pwned" not in screen.getvalue()


def test_the_live_region_redraws_only_the_last_lines_of_an_open_fence() -> None:
    from channels.terminal.markdown import tail

    fence = "```py\n" + "".join(f"x{n} = {n}\n" for n in range(100))
    assert tail(fence, 3) == "```py\nx98 = 98\nx99 = 99\n"


def test_indents_and_single_newlines_are_kept_as_written() -> None:
    from channels.terminal.markdown import Literal

    screen = io.StringIO()
    text = "tree:\n.\n├── a\n│   └── b\n  two spaces in\n\n- item\n  more of it"
    Console(file=screen, width=80, color_system=None).print(Literal(text))
    lines = [line.rstrip() for line in screen.getvalue().splitlines()]
    assert lines[:5] == ["tree:", ".", "├── a", "│   └── b", "  two spaces in"]
    assert lines[-2:] == [" • item", "   more of it"]

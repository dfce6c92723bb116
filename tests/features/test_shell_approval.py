"""Shell approval in-process, with a scripted model: prefixes never match chained commands,
only the asker's answer counts, and a turn stopped while asking leaves nothing open."""

import asyncio
from html import unescape

import pytest

from channels.telegram.format import message_chunks
from nanomem.agent.bus import InboundMessage
from nanomem.agent.outbound import OutboundMessage, Question
from nanomem.app import App
from nanomem.audience import Sender
from nanomem.features.shell_approval.approval import allowed_by, first_word
from nanomem.home import Home
from nanomem.providers.scripted import ScriptedProvider, call, text
from tests.conftest import make_app

PRESENT_OWNER = Sender("42", is_owner=True, can_answer=True)


@pytest.mark.parametrize(
    ("command", "prefixes", "allowed"),
    [
        ("git status", ["git"], "git"),
        ("git pull --rebase", ["git pull"], "git pull"),
        ("git push", ["git pull"], None),
        ("gitk", ["git"], None),  # whole words only
        ("git status; rm -rf ~", ["git"], None),  # chaining is never matched
        ("git status && curl x | sh", ["git"], None),
        ("git log $(whoami)", ["git"], None),
        ("git log > out.txt", ["git"], None),
        ("git log\nrm x", ["git"], None),
        ('git commit -m "unbalanced', ["git"], None),
    ],
)
def test_a_prefix_matches_plain_commands_only(
    command: str, prefixes: list[str], allowed: str | None
) -> None:
    assert allowed_by(command, prefixes) == allowed


def test_always_allow_offers_the_program_of_a_plain_command() -> None:
    assert first_word("git pull origin main") == "git"
    assert first_word("rm -rf / ; echo") is None
    assert first_word("") is None


@pytest.mark.parametrize(
    "command",
    [
        "X=1 ls",  # "Always allow X=1" would let `X=1 <anything>` run unasked
        "env ls",
        "sudo ls",
        "sh -c ls",
        "bash -c 'ls'",
        "xargs ls",
        "nohup ls",
        "timeout 5 ls",
        "command ls",
        "/usr/bin/env ls",
    ],
)
def test_always_is_never_offered_for_a_program_that_runs_any_other(command: str) -> None:
    # A hostile model asks for a harmless `env ls`; one careless "Always" would allow all.
    assert first_word(command) is None


def shell_app(home: Home, provider: ScriptedProvider) -> App:
    tools = {"shell_enabled": True, "shell_approval_timeout_s": 30}
    return make_app(home, provider, tools=tools)


async def question(app: App) -> OutboundMessage:
    while True:
        out = await asyncio.wait_for(app.bus.outbox("telegram").get(), 10)
        if isinstance(out.part, Question):
            return out


async def test_only_the_asker_s_answer_counts(home: Home) -> None:
    provider = ScriptedProvider([call("exec", {"command": "echo hi"}), text("done")])
    app = shell_app(home, provider)
    turn = asyncio.ensure_future(
        app.loop.handle(InboundMessage("telegram", "42", "go", PRESENT_OWNER))
    )
    asked = await question(app)
    allow = asked.buttons[0].command
    other = await app.loop.handle(InboundMessage("telegram", "42", allow, Sender("43")))
    assert other is not None and other.content.startswith("Only the owner can use /shell-allow")
    assert not turn.done()
    mine = await app.loop.handle(InboundMessage("telegram", "42", allow, PRESENT_OWNER))
    assert mine is not None and mine.content == "Allowed once."
    assert (await turn) is not None
    assert provider.calls[-1][-1]["content"] == "exit code 0\nhi\n"


async def test_only_the_owner_is_asked_others_are_denied_unasked(home: Home) -> None:
    # Another allowed person's private chat (or anyone's, with allow_from "*"): present, so
    # askable, but not the owner, whose machine the command would run on.
    provider = ScriptedProvider([call("exec", {"command": "touch ran"}), text("done")])
    app = shell_app(home, provider)
    friend = InboundMessage("telegram", "43", "go", Sender("43", can_answer=True))
    reply = await asyncio.wait_for(app.loop.handle(friend), 30)
    assert reply is not None and reply.content == "done"
    assert provider.calls[-1][-1]["content"].startswith("denied by the owner")
    assert app.bus.outbox("telegram").empty()  # nobody was asked
    assert not (app.workspace / "ran").exists()


async def test_the_question_shows_the_whole_command_however_it_is_written(home: Home) -> None:
    # A hostile model closes the question's code fence and hides the real work in a link;
    # sh runs the backquoted lines, Markdown showed only `x='ls -la'`.
    hidden = "true\n```\nx='[ls -la](<'; rm -rf notes; y='>)'\n`"
    provider = ScriptedProvider([call("exec", {"command": hidden}), text("done")])
    app = shell_app(home, provider)
    turn = asyncio.ensure_future(
        app.loop.handle(InboundMessage("telegram", "42", "go", PRESENT_OWNER))
    )
    asked = await question(app)
    shown = "".join(part for part, _ in message_chunks(asked.content, plain=False))
    assert "rm -rf notes" in unescape(shown)
    await app.loop.handle(InboundMessage("telegram", "42", asked.buttons[-1].command, Sender("42")))
    assert (await turn) is not None


async def test_a_stop_while_asking_closes_the_question(home: Home) -> None:
    provider = ScriptedProvider([call("exec", {"command": "echo hi"}), text("done")])
    app = shell_app(home, provider)
    turn = asyncio.ensure_future(
        app.loop.handle(InboundMessage("telegram", "42", "go", PRESENT_OWNER))
    )
    asked = await question(app)
    stopped = await app.loop.handle(InboundMessage("telegram", "42", "/stop", Sender("42")))
    assert stopped is not None and stopped.content == "Stopped."
    assert (await turn) is None
    press = asked.buttons[0].command
    late = await app.loop.handle(InboundMessage("telegram", "42", press, PRESENT_OWNER))
    assert late is not None and late.content.startswith("That question is no longer open")


async def test_only_the_allowlist_commands_are_in_help(home: Home) -> None:
    app = shell_app(home, ScriptedProvider())
    shown = await app.loop.handle(InboundMessage("cli", "direct", "/help"))
    assert shown is not None
    assert "/allowed" in shown.content and "/disallow" in shown.content
    assert "/shell-allow" not in shown.content  # its buttons send it
    answer = InboundMessage("cli", "direct", "/shell-allow 1234", PRESENT_OWNER)
    answered = await app.loop.handle(answer)
    assert answered is not None and answered.content.startswith("That question is no longer")

"""The feature seam (agent/feature.py): a feature added to the real app is reached by the real
loop through every part it contributes, with the turn's context passed in explicitly."""

from dataclasses import replace
from pathlib import Path

import pytest

from nanomem.agent import (
    Command,
    Feature,
    InboundMessage,
    MediaText,
    MessageBus,
    OutboundMessage,
    Reach,
    Text,
    Unreadable,
)
from nanomem.app import App, build_app
from nanomem.audience import Sender
from nanomem.features.dream import Dreaming
from nanomem.features.recall import Recall
from nanomem.features.shell_approval import Shell
from nanomem.home import Home
from nanomem.memory import Session
from nanomem.providers.scripted import ScriptedProvider, call, text
from nanomem.tools import Tool, ToolContext
from tests.conftest import log_lines, make_app, settings_for
from tests.helpers.inbox import stored

GROUP = InboundMessage("telegram", "-100", "who asks?", Sender("77", "Bo", shared_room=True))


class Probe(Feature):
    """Records what the engine hands it."""

    name = "probe"

    def __init__(self) -> None:
        self.hooks: list[tuple[str, str, str | None, bool]] = []
        self.started: tuple[set[str], bool] | None = None
        self.stopped: float | None = None

    def tools(self) -> list[Tool]:
        return [Tool.from_function(self.whoami)]

    async def whoami(self, context: ToolContext) -> str:
        """Say who the turn works for."""
        return f"{context.sender.id} in {context.session} (personal: {context.personal})"

    def commands(self) -> list[Command]:
        return [Command("probe", "answer from the probe", self._probe, usage="<words>")]

    async def _probe(self, msg: InboundMessage, args: str) -> str:
        return f"probe heard {args!r} from {msg.sender.id}"

    def prompt_section(self) -> str:
        return "probe.md.j2"

    async def before_turn(self, session: Session, context: ToolContext) -> None:
        self.hooks.append(("before", session.key, context.session, context.personal))

    async def after_turn(self, session: Session, context: ToolContext) -> None:
        self.hooks.append(("after", session.key, context.session, context.personal))

    async def before_new(self, session: Session, context: ToolContext) -> str | None:
        self.hooks.append(("new", session.key, context.session, context.personal))
        return "The probe forgot nothing."

    async def start(self, reach: Reach) -> None:
        self.started = (reach.pushing, reach.admits("telegram:-100", "77"))

    async def stop(self, grace_s: float) -> None:
        self.stopped = grace_s


class Broken(Feature):
    name = "broken"

    async def start(self, reach: Reach) -> None:
        raise RuntimeError("no scheduler today")


def with_probe(home: Home, model: ScriptedProvider) -> tuple[App, Probe]:
    templates = Path(home.workspace) / "templates"
    templates.mkdir(exist_ok=True)
    (templates / "probe.md.j2").write_text(
        "The probe is here{% if shared_room %}, in a group{% endif %}.\n"
    )
    app = make_app(home, model)
    probe = Probe()
    app.add(probe)
    return app, probe


async def test_a_feature_is_reached_through_every_part_it_contributes(home: Home) -> None:
    model = ScriptedProvider([call("whoami", {}), text("done")])
    app, probe = with_probe(home, model)
    reply = await app.loop.handle(GROUP)
    assert reply is not None and reply.content == "done"
    (tool_result,) = [m for m in model.calls[1] if m.get("role") == "tool"]
    assert tool_result["content"] == "77 in telegram:-100 (personal: False)"
    (schema,) = [t for t in model.tools_seen[0] or [] if t["function"]["name"] == "whoami"]
    assert schema["function"]["parameters"].get("properties", {}) == {}  # not the model's
    system = model.calls[0][0]["content"]
    assert "The probe is here, in a group." in system and "whoami" in system
    await app.loop.close()  # the after-turn hook runs in the background
    assert probe.hooks == [
        ("before", "telegram:-100", "telegram:-100", False),
        ("after", "telegram:-100", "telegram:-100", False),
    ]
    answer = await app.loop.handle(InboundMessage("telegram", "-100", "/probe hi", GROUP.sender))
    assert answer is not None and answer.content == "probe heard 'hi' from 77"
    new = await app.loop.handle(InboundMessage("cli", "direct", "/new", Sender("me")))
    assert new is not None and "The probe forgot nothing." in new.content
    assert probe.hooks[-1] == ("new", "cli:direct", "cli:direct", True)
    helped = await app.loop.handle(InboundMessage("cli", "direct", "/help", Sender("me")))
    assert helped is not None and "/probe" in helped.content


async def test_background_work_starts_and_stops_through_the_seam(home: Home) -> None:
    app, probe = with_probe(home, ScriptedProvider())
    app.add(Broken())
    with log_lines("ERROR") as lines:
        await app.start_features(Reach({"telegram"}, lambda session, sender: sender == "77"))
    assert probe.started == ({"telegram"}, True)
    # Logged with its reason, and the others started all the same:
    assert [line.split("\n")[0] for line in lines] == ["broken could not start"]
    await app.stop_features(grace_s=3)
    assert probe.stopped == 3


def test_a_feature_is_found_by_its_type(home: Home) -> None:
    app = make_app(home, ScriptedProvider())
    assert app.feature(Dreaming).scheduler.dream is app.feature(Dreaming).dream
    assert app.feature(Recall).name == "recall" and "search_history" in app.tools.names
    with pytest.raises(LookupError, match="Shell is not configured"):
        app.feature(Shell)  # tools.shell_enabled is off by default
    shell = make_app(home, ScriptedProvider(), tools={"shell_enabled": True})
    assert "exec" in shell.tools.names
    assert "allowed" in {command.name for command in shell.loop.commands.all()}


async def test_recall_adds_its_line_to_the_prompt(home: Home) -> None:
    model = ScriptedProvider()
    app = make_app(home, model)
    await app.loop.handle(InboundMessage("cli", "direct", "hello", Sender("me")))
    await app.loop.handle(GROUP)
    private, group = model.calls[0][0]["content"], model.calls[1][0]["content"]
    assert "search the older conversations with\n`search_history`." in private
    assert "`search_history` (here: this group's own)." in group


class Lookalike:
    """Has every part a feature has, without subclassing Feature."""

    name = "lookalike"

    def tools(self) -> list[Tool]:
        return []

    def commands(self) -> list[Command]:
        return [Command("lookalike", "never registered", Probe()._probe)]

    def prompt_section(self) -> None:
        return None

    async def after_turn(self, session: Session, context: ToolContext) -> None:
        raise AssertionError("never called")


class Nameless(Feature):
    def commands(self) -> list[Command]:
        return [Command("nameless", "never registered", Probe()._probe)]


def test_only_a_named_subclass_of_feature_is_added(home: Home) -> None:
    # Its hooks could not be told apart from the defaults: refused, not half added.
    app = make_app(home, ScriptedProvider())
    with pytest.raises(TypeError, match=r"Lookalike is not a Feature: subclass nanomem\.agent"):
        app.add(Lookalike())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="Nameless has no name: set its `name`"):
        app.add(Nameless())
    names = {command.name for command in app.loop.commands.all()}
    assert not names & {"lookalike", "nameless"}
    assert not any(isinstance(f, Nameless) for f in app.features)


class Wired(Feature):
    """Its hook is an attribute of the instance (a callable it was given), not a method."""

    name = "wired"

    def __init__(self) -> None:
        self.seen: list[str] = []

        async def note(session: Session, context: ToolContext) -> str:
            self.seen.append(session.key)
            return "The wired feature saw it."

        self.before_new = note


async def test_a_hook_given_to_the_instance_is_called(home: Home) -> None:
    app = make_app(home, ScriptedProvider())
    wired = Wired()
    app.add(wired)
    new = await app.loop.handle(InboundMessage("cli", "direct", "/new", Sender("me")))
    assert new is not None and "The wired feature saw it." in new.content
    assert wired.seen == ["cli:direct"]


class Reader(Feature):
    """Reads `.xyz` files as text, or cannot (`broken`): a stand-in for voice's transcription."""

    name = "reader"

    def __init__(self) -> None:
        self.broken = False
        self.read: list[tuple[str, ...]] = []

    async def read_media(self, msg: InboundMessage) -> MediaText | None:
        mine = tuple(m for m in msg.media if m.endswith(".xyz"))
        if not mine:
            return None
        self.read.append(mine)
        if self.broken:
            raise Unreadable("The reader is out of ink.")
        return MediaText(f"[xyz] words of {mine[0]}", preface="read: words")


def reader_app(home: Home, *replies: str) -> tuple[App, Reader, ScriptedProvider]:
    provider = ScriptedProvider([text(reply) for reply in replies])
    app = make_app(home, provider)
    reader = Reader()
    app.add(reader)
    return app, reader, provider


async def test_a_features_reading_of_a_file_is_stored_once_with_the_message(home: Home) -> None:
    app, reader, provider = reader_app(home, "Got it.")
    msg = InboundMessage("cli", "direct", "look", media=("media/a.xyz", "media/b.zip"))
    reply = await app.loop.handle(msg)
    assert reply is not None and reply.content == "read: words\n\nGot it."
    assert reader.read == [("media/a.xyz",)]
    assert provider.calls[0][-1]["content"].endswith("look\n\n[xyz] words of media/a.xyz")
    session = await app.sessions.get("cli:direct")
    user = session.messages[-2]
    assert user["preface"] == "read: words" and "unread" not in user
    # A message without files asks no feature.
    await app.loop.handle(InboundMessage("cli", "direct", "plain"))
    assert reader.read == [("media/a.xyz",)]


async def test_a_reply_sent_again_after_a_crash_keeps_its_preface(home: Home) -> None:
    # A crash after the reply was saved, before it was recorded: the replay sends it again.
    app, reader, provider = reader_app(home, "Got it.", "Never said.")
    msg = InboundMessage(
        "telegram", "42", "look", media=("media/a.xyz",), id=InboundMessage.inbox_id(3), seq=3
    )
    first = await app.loop.handle(msg)
    again = await app.loop.handle(replace(msg, replayed=True))
    assert first is not None and again is not None
    assert again.content == first.content == "read: words\n\nGot it."
    assert len(provider.calls) == 1 and len(reader.read) == 1


async def test_files_that_cannot_be_read_are_said_kept_and_read_again_by_retry(
    home: Home,
) -> None:
    app, reader, provider = reader_app(home, "Now I see.")
    reader.broken = True
    msg = InboundMessage("cli", "direct", "look", media=("media/a.xyz",))
    reply = await app.loop.handle(msg)
    assert reply is not None and reply.content == "The reader is out of ink."
    assert provider.calls == []
    session = await app.sessions.get("cli:direct")
    user, note = session.messages[-2:]
    assert user["unread"] == ["media/a.xyz"] and note["failed"] == "media"

    reader.broken = False
    again = await app.loop.handle(InboundMessage("cli", "direct", "/retry"))
    assert again is not None and again.content == "read: words\n\nNow I see."
    assert provider.calls[0][-1]["content"].endswith("look\n\n[xyz] words of media/a.xyz")
    retried = session.messages[-2]
    assert "unread" not in retried and retried["preface"] == "read: words"
    done = await app.loop.handle(InboundMessage("cli", "direct", "/retry"))
    assert done is not None and "Nothing to retry" in done.content


async def test_a_replayed_message_whose_files_could_not_be_read_is_read_again(home: Home) -> None:
    # A crash after the message and its failed note were saved, before the line went out.
    app, reader, provider = reader_app(home, "Now I see.", "Never said.")
    reader.broken = True
    msg = InboundMessage(
        "telegram", "42", "look", media=("media/a.xyz",), id=InboundMessage.inbox_id(7), seq=7
    )
    first = await app.loop.handle(msg)
    assert first is not None and first.content == "The reader is out of ink."
    again = await app.loop.handle(replace(msg, replayed=True))  # still unreadable: said again
    assert again is not None and again.content == "The reader is out of ink."
    assert provider.calls == []  # no turn on a message without its files' text

    reader.broken = False
    read = await app.loop.handle(replace(msg, replayed=True))
    assert read is not None and read.content == "read: words\n\nNow I see."
    (asked,) = provider.calls
    assert asked[-1]["content"].endswith("look\n\n[xyz] words of media/a.xyz")
    # Replayed once more (the reply was not recorded): the answer made is sent, no new turn.
    once_more = await app.loop.handle(replace(msg, replayed=True))
    assert once_more is not None and once_more.content == "read: words\n\nNow I see."
    assert len(provider.calls) == 1 and reader.read == [("media/a.xyz",)] * 3


class Teller(Feature):
    """Says a line after every turn, at once: a stand-in for voice's spoken reply."""

    name = "teller"

    def __init__(self, bus: MessageBus) -> None:
        self.bus = bus

    async def after_turn(self, session: Session, context: ToolContext) -> None:
        channel, _, chat = session.key.partition(":")
        await self.bus.publish_outbound(OutboundMessage(channel, chat, Text("after the turn")))


async def test_what_an_after_turn_hook_sends_goes_out_after_the_reply(home: Home) -> None:
    # Through the inbox, as in the gateway: recording the reply there takes a thread hop, in
    # which a hook begun with the turn would have queued its line first.
    app = build_app(settings_for(home), home, ScriptedProvider([text("The reply.")]), durable=True)
    app.add(Teller(app.bus))
    try:
        await app.loop.take(await stored(app.bus, "42", "hello"))
        box, said = app.bus.outbox("telegram"), []
        while "after the turn" not in said:
            if isinstance((out := await box.get()).part, Text):  # not the streamed pieces
                said.append(out.content)
        assert said == ["The reply.", "after the turn"]
    finally:
        await app.loop.close()
        await app.aclose()

import asyncio
import json
import random
from dataclasses import replace
from pathlib import Path

from nanomem.agent.bus import InboundMessage
from nanomem.agent.commands import NOTHING_TO_STOP, STOPPED
from nanomem.agent.loop import NOTHING_TO_RETRY
from nanomem.agent.outbound import Delta, DeltaEnd, OutboundMessage, Progress, Text
from nanomem.app import App
from nanomem.audience import Sender
from nanomem.home import Home
from nanomem.log import register_secrets, shown_so_far
from nanomem.providers.provider import ProviderError, Reply, RetryingProvider
from nanomem.providers.scripted import ScriptedProvider, call, text
from tests.conftest import make_app, survivors
from tests.helpers import until


def msg(content: str, chat: str = "direct") -> InboundMessage:
    return InboundMessage("cli", chat, content, Sender("user"))


async def test_a_turn_is_answered_and_persisted(home: Home) -> None:
    provider = ScriptedProvider([text("Hello!")])
    app = make_app(home, provider)
    reply = await app.loop.handle(msg("hi"))
    assert reply is not None and reply.part == Text("Hello!")
    session = await app.sessions.get("cli:direct")
    assert [m["role"] for m in session.messages] == ["user", "assistant"]
    assert session.messages[0]["content"].endswith("\n\nhi")


async def test_system_prompt_is_byte_identical_and_runtime_is_in_the_user_message(
    home: Home,
) -> None:
    provider = ScriptedProvider()
    app = make_app(home, provider)
    await app.loop.handle(msg("first"))
    await app.loop.handle(msg("second"))
    first, second = provider.calls
    assert first[0]["role"] == "system" and first[0] == second[0]
    assert "[runtime ·" in first[-1]["content"] and "channel cli" in first[-1]["content"]
    assert "[runtime" not in first[0]["content"]
    # The earlier user message is replayed exactly as it was sent (stable absolute time).
    assert second[1] == first[1]


async def test_memory_file_changes_reach_the_system_prompt(home: Home) -> None:
    provider = ScriptedProvider()
    app = make_app(home, provider)
    await app.loop.handle(msg("one"))
    (app.workspace / "USER.md").write_text("# User\n- Name: Ada Lovelace\n")
    await app.loop.handle(msg("two"))
    assert "Ada Lovelace" not in provider.calls[0][0]["content"]
    assert "Ada Lovelace" in provider.calls[1][0]["content"]


async def test_unknown_command_never_reaches_the_model(home: Home) -> None:
    provider = ScriptedProvider()
    app = make_app(home, provider)
    reply = await app.loop.handle(msg("/frobnicate now"))
    assert reply is not None and reply.content == "Unknown command /frobnicate — try /help."
    assert provider.calls == []
    assert (await app.sessions.get("cli:direct")).messages == []
    await app.loop.handle(msg("frobnicate now"))  # control: a message does reach the model
    assert len(provider.calls) == 1


async def test_help_lists_the_commands(home: Home) -> None:
    app = make_app(home, ScriptedProvider())
    reply = await app.loop.handle(msg("/help"))
    assert reply is not None
    for name in ("/help", "/new", "/stop"):
        assert name in reply.content


async def test_new_starts_a_fresh_conversation_but_keeps_the_transcript(home: Home) -> None:
    provider = ScriptedProvider()
    app = make_app(home, provider)
    await app.loop.handle(msg("remember the blue door"))
    reply = await app.loop.handle(msg("/new"))
    assert reply is not None and reply.content.startswith("New session started.")
    await app.loop.handle(msg("what now"))
    assert [m["role"] for m in provider.calls[-1]] == ["system", "user"]
    session = await app.sessions.get("cli:direct")
    assert len(session.messages) == 4  # the transcript keeps everything


async def test_oversized_message_is_refused_and_changes_nothing(home: Home) -> None:
    provider = ScriptedProvider()
    app = make_app(home, provider, agent={"max_message_chars": 100})
    reply = await app.loop.handle(msg("x" * 101))
    assert reply is not None and reply.part.style == "error" and "too long" in reply.content
    assert provider.calls == []
    assert (await app.sessions.get("cli:direct")).messages == []
    await app.loop.handle(msg("x" * 100))  # control: one character less is taken and saved
    assert len(provider.calls) == 1
    assert len((await app.sessions.get("cli:direct")).messages) == 2


async def test_provider_failure_gives_a_short_message_and_stores_no_error(home: Home) -> None:
    provider = ScriptedProvider([ProviderError("auth", "401 invalid key sk-live-123")])
    app = make_app(home, provider)
    reply = await app.loop.handle(msg("hi"))
    assert reply is not None and reply.part.style == "error"
    assert "needs an API key, and no key is set" in reply.content and "sk-live" not in reply.content
    session = await app.sessions.get("cli:direct")
    assert [m["role"] for m in session.messages] == ["user", "assistant"]
    note = session.messages[-1]  # ours, marked as such: never the error's text
    assert note["failed"] == "auth" and "sk-live" not in note["content"]


async def test_where_the_model_runs_is_told_to_the_owner_alone(home: Home) -> None:
    """The model's address and the log's path are the owner's: a group, or someone the owner
    let in, hears only that the model could not be reached."""
    failures = [ProviderError("unreachable", "connection refused") for _ in range(3)]
    app = make_app(home, ScriptedProvider(failures), llm={"api_base": "http://10.1.2.3:8000/v1"})
    owner = Sender("4242", is_owner=True)
    asked = [
        InboundMessage("telegram", "4242", "hi", owner),
        InboundMessage("telegram", "-100200", "hi", replace(owner, shared_room=True)),
        InboundMessage("telegram", "777", "hi", Sender("777")),
    ]
    replies = [await app.loop.handle(m) for m in asked]
    assert all(r is not None and "could not reach the model" in r.content for r in replies)
    told = [r.content if r is not None else "" for r in replies]
    assert "http://10.1.2.3:8000/v1" in told[0] and "nanomem.log" in told[0]
    for other in told[1:]:
        assert "10.1.2.3" not in other and "nanomem.log" not in other
        assert "I could not reach the model service. Check the network" in other


async def test_iteration_limit_ends_with_a_clear_message(home: Home) -> None:
    provider = ScriptedProvider([call("list_dir", {}) for _ in range(5)])
    app = make_app(home, provider, agent={"max_iterations": 2})
    reply = await app.loop.handle(msg("loop forever"))
    assert reply is not None and "stopped after 2 tool steps" in reply.content
    assert len(provider.calls) == 2


async def test_tool_progress_is_reported(home: Home) -> None:
    provider = ScriptedProvider([call("list_dir", {"path": "memory"}), text("done")])
    app = make_app(home, provider)
    seen = []

    async def progress(out):  # type: ignore[no-untyped-def]
        seen.append(out)

    await app.loop.handle(msg("look"), progress=progress)
    progress_lines = [p.part for p in seen if not isinstance(p.part, Delta)]
    assert progress_lines == [Progress("list_dir(path='memory')", "list_dir")]


async def test_same_chat_is_serial_and_in_order(home: Home) -> None:
    provider = ScriptedProvider(latency=0.05)
    app = make_app(home, provider)
    replies = await asyncio.gather(*(app.loop.handle(msg(f"m{i}")) for i in range(5)))
    contents = [r.content for r in replies if r]
    assert len(contents) == 5
    assert all(c.endswith(f"\n\nm{i}") for i, c in enumerate(contents))
    session = await app.sessions.get("cli:direct")
    users = [m["content"].rsplit("\n", 1)[-1] for m in session.messages if m["role"] == "user"]
    assert users == [f"m{i}" for i in range(5)]
    # Each call saw all earlier exchanges: nothing overlapped.
    assert [len(c) for c in provider.calls] == [2, 4, 6, 8, 10]


async def test_different_chats_run_concurrently_up_to_the_limit(home: Home) -> None:
    running = 0
    peak = 0

    async def slow(messages):  # type: ignore[no-untyped-def]
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await asyncio.sleep(0.05)
        running -= 1
        return text("ok")

    provider = ScriptedProvider([slow] * 12)
    app = make_app(home, provider, agent={"max_concurrent_turns": 4})
    await asyncio.gather(*(app.loop.handle(msg("hi", chat=f"c{i}")) for i in range(12)))
    assert peak == 4


async def test_stop_cancels_the_running_turn_and_keeps_the_session_consistent(home: Home) -> None:
    tool_started = asyncio.Event()

    async def hang(messages):  # type: ignore[no-untyped-def]
        tool_started.set()
        await asyncio.sleep(3600)

    provider = ScriptedProvider([call("list_dir", {}, call_id="c1"), hang])
    app = make_app(home, provider)
    turn = asyncio.create_task(app.loop.handle(msg("slow task")))
    await asyncio.wait_for(tool_started.wait(), 5)
    stop = await app.loop.handle(msg("/stop"))
    assert stop is not None and stop.content == "Stopped."
    assert await turn is None
    again = await app.loop.handle(msg("/stop"))
    assert again is not None and again.content == "Nothing is running."
    provider.add(text("fresh answer"))
    reply = await app.loop.handle(msg("next"))
    assert reply is not None and reply.content == "fresh answer"
    sent = provider.calls[-1]
    call_ids = {c["id"] for m in sent for c in m.get("tool_calls") or ()}
    result_ids = {m["tool_call_id"] for m in sent if m["role"] == "tool"}
    assert call_ids == result_ids == {"c1"}


async def test_stop_during_a_tool_seals_the_call(home: Home) -> None:
    started = asyncio.Event()
    argv = ["sleep", f"30.{random.randrange(10**6):06d}"]  # this test's own, by its command line
    app = make_app(
        home,
        ScriptedProvider([call("exec", {"command": " ".join(argv)}, "c7")]),
        tools={"shell_enabled": True, "shell_approval": "off"},
    )

    async def watch(out):  # type: ignore[no-untyped-def]
        started.set()

    turn = asyncio.create_task(app.loop.handle(msg("run it"), progress=watch))
    await asyncio.wait_for(started.wait(), 5)
    await until(lambda: survivors(argv))  # the command runs: the stop comes during the tool
    await app.loop.handle(msg("/stop"))
    assert await turn is None
    session = await app.sessions.get("cli:direct")
    tool = [m for m in session.messages if m["role"] == "tool"]
    assert len(tool) == 1 and tool[0]["tool_call_id"] == "c7"
    assert "Cancelled" in tool[0]["content"]


async def test_a_tool_call_round_trip_through_the_loop(home: Home) -> None:
    provider = ScriptedProvider(
        [call("write_file", {"path": "notes.md", "content": "buy milk"}), text("Saved.")]
    )
    app = make_app(home, provider)
    reply = await app.loop.handle(msg("note: buy milk"))
    assert reply is not None and reply.content == "Saved."
    assert (app.workspace / "notes.md").read_text() == "buy milk"
    tool_message = provider.calls[1][-1]
    assert tool_message["role"] == "tool" and "Wrote 8 characters" in tool_message["content"]
    assert json.loads(provider.calls[1][-2]["tool_calls"][0]["function"]["arguments"]) == {
        "path": "notes.md",
        "content": "buy milk",
    }


async def stop_once_there(app: App, every_s: float = 0.01) -> OutboundMessage | None:
    """/stop, sent until the chat has a turn to stop (one sent before changes nothing)."""
    async with asyncio.timeout(10):
        while (stop := await app.loop.handle(msg("/stop"))) is not None and (
            stop.content == NOTHING_TO_STOP
        ):
            await asyncio.sleep(every_s)
    return stop


async def test_a_stop_right_after_sending_still_keeps_the_message(home: Home) -> None:
    provider = ScriptedProvider(latency=30)
    app = make_app(home, provider)
    turn = asyncio.create_task(app.loop.handle(msg("keep me")))
    stop = await stop_once_there(app, every_s=0)  # as early as /stop can reach the turn
    assert stop is not None and stop.content == "Stopped."
    assert await turn is None
    stored = await type(app.sessions)(app.sessions.directory).get("cli:direct")  # from disk
    assert [m["content"].rsplit("\n", 1)[-1] for m in stored.messages] == ["keep me"]


async def test_a_replayed_message_whose_turn_had_ended_is_not_asked_again(home: Home) -> None:
    provider = ScriptedProvider([text("said before the crash")])
    app = make_app(home, provider)
    first = InboundMessage(
        "telegram", "42", "hello", Sender("42"), id=InboundMessage.inbox_id(7), seq=7
    )
    await app.loop.handle(first)
    replayed = replace(first, replayed=True)
    reply = await app.loop.handle(replayed)
    assert reply is not None and reply.content == "said before the crash"
    assert len(provider.calls) == 1  # the model was not asked a second time
    session = await app.sessions.get("telegram:42")
    assert [m["role"] for m in session.messages] == ["user", "assistant"]
    assert session.messages[0]["in"] == "in-7"


async def test_a_turn_a_crash_cut_short_goes_on_from_where_it_was(home: Home) -> None:
    provider = ScriptedProvider([text("finished now")])
    app = make_app(home, provider)
    msg = InboundMessage("telegram", "42", "list the files", Sender("42"), id="in-9", seq=9)
    session = await app.sessions.get("telegram:42")
    user = {**app.context.user_message(msg), "in": "in-9"}
    started = call("list_dir", {"path": "."}, call_id="c1").as_message()
    await app.sessions.append(session, [user, started])  # then the process died
    reply = await app.loop.handle(replace(msg, replayed=True))
    assert reply is not None and reply.content == "finished now"
    sent = provider.calls[0]
    assert [m["role"] for m in sent[-3:]] == ["user", "assistant", "tool"]
    assert sent[-1]["tool_call_id"] == "c1" and sent[-1]["content"].startswith("Cancelled")
    roles = [m["role"] for m in session.messages]
    assert roles == ["user", "assistant", "tool", "assistant"]  # the question saved once


async def test_a_stop_during_a_failed_save_does_not_stop_the_next_message(
    home: Home, tmp_path: Path
) -> None:
    app = make_app(home, ScriptedProvider())
    await app.loop.handle(msg("one"))
    session = await app.sessions.get("cli:direct")
    kept = session.path.read_bytes()
    gate = app.sessions._write_lock(session)  # held: the next save waits here
    await gate.acquire()
    turn = asyncio.create_task(app.loop.handle(msg("two")))
    stop = await stop_once_there(app)
    assert stop is not None and stop.content == STOPPED
    session.path.unlink()
    session.path.mkdir()  # the waiting save now fails
    gate.release()
    failed = await asyncio.wait_for(turn, 10)
    assert failed is not None and failed.part.style == "error"
    session.path.rmdir()
    session.path.write_bytes(kept)
    answered = await app.loop.handle(msg("three"))
    assert answered is not None and answered.content.endswith("three")


async def streamed_turn(
    app: App, text_: str
) -> tuple[OutboundMessage | None, list[OutboundMessage]]:
    pieces: list[OutboundMessage] = []

    async def progress(out: OutboundMessage) -> None:
        if isinstance(out.part, Delta):
            pieces.append(out)

    return await app.loop.handle(msg(text_), progress=progress), pieces


async def test_a_step_s_text_ends_before_the_next_step_writes(home: Home) -> None:
    look = replace(call("list_dir", {"path": "memory"}), content="Let me look. ")
    app = make_app(home, ScriptedProvider([look, text("Found it.")]))
    seen: list[OutboundMessage] = []

    async def show(out: OutboundMessage) -> None:
        seen.append(out)

    await app.loop.handle(msg("where?"), progress=show)
    parts = [out.part for out in seen]
    assert parts.count(DeltaEnd(0)) == 1 and not any(
        isinstance(p, DeltaEnd) and p.step for p in parts
    )
    end = parts.index(DeltaEnd(0))
    assert {p.step for p in parts[:end] if isinstance(p, Delta)} == {0}
    assert {p.step for p in parts[end:] if isinstance(p, Delta)} == {1}


async def test_a_reply_streams_in_pieces_before_it_is_whole(home: Home) -> None:
    app = make_app(home, ScriptedProvider([text("One two three four five six seven.")]))
    reply, pieces = await streamed_turn(app, "count")
    assert reply is not None and len(pieces) > 3
    streamed = "".join(p.content for p in pieces)
    assert reply.content.startswith(streamed) and streamed  # the rest comes with the reply
    assert pieces[-1].part.so_far == streamed and pieces[0].part.step == 0
    quiet = make_app(home, ScriptedProvider([text("no stream")]), llm={"stream": False})
    assert (await streamed_turn(quiet, "x"))[1] == []


async def test_a_secret_is_never_streamed_even_in_part(home: Home) -> None:
    secret = "sk-stream-secret-0123456789abcdef"
    register_secrets([secret])
    said = f"The key is {secret}, and I should never have said so in so many words, sorry."
    app = make_app(home, ScriptedProvider([text(said)]))
    reply, pieces = await streamed_turn(app, "tell me")
    streamed = "".join(p.content for p in pieces)
    assert "sk-stream" not in streamed and "The key is ***, and" in streamed
    assert reply is not None and reply.content == said.replace(secret, "***")


class HalfThenFail:
    """Streams half an answer, then the connection drops."""

    def __init__(self) -> None:
        self.calls = 0

    async def complete(
        self, messages, tools=None, *, max_tokens=None, tool_choice=None, on_text=None, **_
    ) -> Reply:  # type: ignore[no-untyped-def]
        self.calls += 1
        if on_text is not None:
            await on_text("Half an ")
            await on_text("answer")
        raise ProviderError("unreachable", "the stream was cut")


async def test_a_stream_cut_short_keeps_what_was_shown_and_is_not_retried(home: Home) -> None:
    model = HalfThenFail()
    app = make_app(home, ScriptedProvider())
    app.loop.provider = RetryingProvider(model, max_retries=3, base_delay=0)
    reply, pieces = await streamed_turn(app, "go on")
    assert model.calls == 1  # the person saw text: no retry could take it back
    assert "".join(p.content for p in pieces) == shown_so_far("Half an answer")
    assert reply is not None and reply.part.style == "reply" and reply.part.cut_short
    assert reply.content.startswith("Half an answer\n\n(I could not reach the model")
    session = await app.sessions.get("cli:direct")
    assert session.messages[-1] == session.messages[-1] | {
        "role": "assistant",
        "content": "Half an answer",
        "interrupted": True,
    }


async def test_stopping_mid_stream_keeps_the_part_that_was_shown(home: Home) -> None:
    release, shown = asyncio.Event(), asyncio.Event()

    class Slow:
        async def complete(
            self,
            messages,
            tools=None,
            *,
            max_tokens=None,
            tool_choice=None,
            on_text=None,
            options=None,
        ) -> Reply:  # type: ignore[no-untyped-def]
            assert on_text is not None
            await on_text("The first part")
            shown.set()
            await release.wait()
            return text("never")

    app = make_app(home, ScriptedProvider())
    app.loop.provider = Slow()
    turn = asyncio.create_task(streamed_turn(app, "slowly"))
    await until(lambda: "cli:direct" in app.loop._running)
    await until(shown.is_set)  # the first part was shown: the stop comes mid-stream
    stop = await app.loop.handle(msg("/stop"))
    assert stop is not None and stop.content == STOPPED
    assert (await turn)[0] is None
    session = await app.sessions.get("cli:direct")
    assert session.messages[-1]["content"] == "The first part"
    assert session.messages[-1]["interrupted"] is True


async def test_a_failed_turn_is_recorded_honestly_and_retry_runs_it_again(home: Home) -> None:
    provider = ScriptedProvider([ProviderError("unreachable", "down"), text("Here it is.")])
    app = make_app(home, provider)
    failed = await app.loop.handle(msg("what is the capital of Peru?"))
    assert failed is not None and failed.part.style == "error"
    session = await app.sessions.get("cli:direct")
    note = session.messages[-1]
    assert note["role"] == "assistant" and note["failed"] == "unreachable"
    assert "no reply was given" in note["content"]
    retried = await app.loop.handle(msg("/retry"))
    assert retried is not None and retried.content == "Here it is."
    sent = provider.calls[-1]
    assert sent[-1]["content"].endswith("what is the capital of Peru?")  # asked afresh
    assert not any("no reply was given" in str(m.get("content")) for m in sent)
    again = await app.loop.handle(msg("/retry"))
    assert again is not None and again.content == NOTHING_TO_RETRY
    await app.loop.handle(msg("thanks"))
    later = provider.calls[-1]  # the next turn's prompt says the first attempt got no reply
    assert any("no reply was given" in str(m.get("content")) for m in later)
    roles = [m["role"] for m in session.messages]
    assert roles == ["user", "assistant", "assistant", "user", "assistant"]


async def test_a_replayed_turn_overtaken_by_another_process_is_asked_afresh(home: Home) -> None:
    provider = ScriptedProvider([text("yes, 42")])
    app = make_app(home, provider)
    msg_id = InboundMessage.inbox_id(11)
    replayed = InboundMessage(
        "telegram", "42", "is it 42?", Sender("42"), id=msg_id, seq=11, replayed=True
    )
    session = await app.sessions.get("telegram:42")
    started = {**app.context.user_message(replayed), "in": msg_id}  # then the gateway died
    meanwhile = [  # a `chat -m` on the same session answered its own question meanwhile
        {"role": "user", "content": "what time is it?"},
        {"role": "assistant", "content": "noon"},
    ]
    await app.sessions.append(session, [started, *meanwhile])
    reply = await app.loop.handle(replayed)
    assert reply is not None and reply.content == "yes, 42"  # not the other turn's "noon"
    assert provider.calls[0][-1]["content"].endswith("is it 42?")
    roles = [m["role"] for m in session.messages]
    assert roles == ["user", "user", "assistant", "user", "assistant"]  # asked again, at the end

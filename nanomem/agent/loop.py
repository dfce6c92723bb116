"""AgentLoop: the glue around react() — bus → command or turn → session → bus."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

from loguru import logger

from nanomem.agent.answering import Answering
from nanomem.agent.bus import InboundMessage, MessageBus
from nanomem.agent.channel import ChatQueues
from nanomem.agent.client_turn import ClientRun
from nanomem.agent.commands import (
    NOTHING_TO_STOP,
    STOPPED,
    Answer,
    Command,
    CommandSet,
    UnknownCommand,
)
from nanomem.agent.context import ContextBuilder
from nanomem.agent.feature import ReadMedia, Unreadable
from nanomem.agent.intake import Intake
from nanomem.agent.outbound import (
    STOPPING,
    STOPPING_NOTE,
    Delta,
    DeltaEnd,
    OutboundMessage,
    Progress,
    Text,
    TurnEnded,
    TurnStarted,
    describe_call,
    file_outlet,
)
from nanomem.agent.paused_turns import ClientTurns
from nanomem.agent.react_loop import ReactResult, StepText, react, seal_tool_calls
from nanomem.agent.replay import finished_reply
from nanomem.agent.retries import count_attempt, keep_for_retry
from nanomem.agent.templates import Templates
from nanomem.audience import audience_of, owner_alone
from nanomem.config import Settings
from nanomem.home import shown_path
from nanomem.locks import KeyedLocks
from nanomem.log import redact, shown_so_far
from nanomem.memory import Budget, Session, SessionStore, to_wire
from nanomem.providers import (
    Provider,
    ProviderError,
    ToolCall,
    charged_to,
    endpoint,
    key_source,
    route,
)
from nanomem.text.plural import plural
from nanomem.tools import ToolContext, ToolRegistry, stop_all

BeforeTurn = Callable[[Session, ToolContext], Awaitable[None]]
AfterTurn = Callable[[Session, ToolContext], Awaitable[None]]
# The turns a call finished, for their after-turn hooks: begun once the reply is out.
Finished = list[tuple[Session, ToolContext]]
# Where the pieces of a turn go while it runs (deltas, progress lines, questions go on the bus).
Show = Callable[[OutboundMessage], Awaitable[None]]
NewHook = Callable[[Session, ToolContext], Awaitable[str | None]]
# `/stop <name>`: stops what a feature runs under that name (a background task) for this
# message's sender; its answer, or None when the name is not the feature's.
StopNamed = Callable[[InboundMessage, str], Awaitable[str | None]]


class Deferred(Exception):
    """The loop is stopping: the message is left for the next start."""


class AgentLoop:
    def __init__(
        self,
        *,
        bus: MessageBus,
        sessions: SessionStore,
        context: ContextBuilder,
        provider: Provider,
        tools: ToolRegistry,
        templates: Templates,
        budget: Budget,
        settings: Settings,
        log_file: Path | None = None,  # named in the errors that say the details are there
    ) -> None:
        self.bus, self.sessions, self.context = bus, sessions, context
        self.log_file = log_file
        self.provider, self.tools, self.templates = provider, tools, templates
        self.budget, self.settings = budget, settings
        self.commands = CommandSet()
        self.before_turn: list[BeforeTurn] = []  # awaited once the prompt's size is known
        self.read_media: list[ReadMedia] = []  # awaited while a message with files is saved
        self.after_turn: list[AfterTurn] = []  # run in the background once the reply is out
        self.before_new: list[NewHook] = []  # awaited by /new before the session is reset
        self.stop_named: list[StopNamed] = []  # asked by `/stop <name>`, in turn
        self._locks = KeyedLocks()  # for direct calls (answer); the bus's chats are queued
        self._chats = ChatQueues("turns")
        self.answering = Answering()  # what background work tells a chat waits for
        self._room = asyncio.Semaphore(bus.maxsize)
        self._turn_slots = asyncio.Semaphore(settings.agent.max_concurrent_turns)
        self._running: dict[str, asyncio.Task[OutboundMessage]] = {}
        self._starting: set[str] = set()  # turns whose message is still being saved
        self._stop_before_start: set[str] = set()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._draining = False
        longest = settings.agent.max_message_chars
        self.clients = ClientTurns(sessions, templates, self.between_turns, longest)  # the API's
        self.intake = Intake(sessions, context, templates, settings, self.clients, self.read_media)
        self._register_builtin_commands()

    async def run(self) -> None:
        """Serve the bus until cancelled: what was queued before the loop ran first, then every
        message straight from its channel (MessageBus.serve)."""
        try:
            while self.bus.queued:
                await self.take(await self.bus.next_inbound(prepared=False))
            self.bus.serve(self.take)
            await asyncio.Event().wait()
        finally:
            self.bus.serve(None)

    async def take(self, msg: InboundMessage) -> None:
        """Per-chat order, kept here once: a chat's messages run one after another, in the
        order they came (one worker task per busy chat, nothing for an idle one), chats
        concurrently. An immediate command (/stop, /help) runs at once, never behind the
        turn it may be about. A flood waits here, at the door, for room."""
        await self._room.acquire()
        if self._immediate(msg):
            task = self._spawn(self._serve(msg))
            task.add_done_callback(lambda _: self._room.release())
            return
        self.bus.waiting += 1

        async def job() -> None:
            self.bus.waiting -= 1
            try:
                await self._serve(msg)
            finally:
                self._room.release()

        self._chats.submit(msg.session_key, job)

    def _immediate(self, msg: InboundMessage) -> bool:
        """Answered without the chat's session: an immediate command, or an unknown one."""
        try:
            found = self.commands.resolve(msg.content)
        except UnknownCommand:
            return True
        return bool(found and found[0].immediate)

    async def _serve(self, msg: InboundMessage) -> None:
        if self._draining or not await count_attempt(self.bus, msg):
            return  # stopping (it stays in the inbox for the next start), or parked
        finished: Finished = []
        started = False  # the channel was told the turn began (TurnStarted)
        with self.answering.answering(msg.session_key):
            try:
                if msg.prepare is not None:  # the channel's own work on it (a download)
                    ready = await msg.prepare(msg)
                    if ready is None:
                        return  # the channel answered it itself
                    msg = replace(ready, prepare=None)
                if msg.channel in self.bus.turns:
                    await self._tell(msg, TurnStarted(self.commands.named(msg.content)))
                    started = True
                reply = await self._handle(msg, self.bus.publish_outbound, finished)
                if reply is None and started:  # cut short: told before /stop answers
                    await self._tell(msg, TurnEnded(stopped=True))
                    started = False
                # Recorded before it is sent: a crash from here on re-sends it, never loses it.
                await self.bus.answered(msg, reply)
            except Deferred:  # stopping before its turn began: not the message's fault
                await self.bus.give_back(msg.seq)
                if started:  # no answer in this run: it stays in the inbox for the next start
                    await self._tell(msg, TurnEnded(stopped=True))
                return
            except Exception as exc:
                logger.opt(exception=exc).error(
                    "failed to handle a message for {}", msg.session_key
                )
                if msg.seq is None:  # nothing keeps it: the person hears of it, and may resend
                    reply = OutboundMessage.answering(msg, Text(INTERNAL_ERROR, "error"))
                else:  # kept in the inbox and tried again (agent/retries.py); never dropped
                    reply = await keep_for_retry(self.bus, msg, exc)
            if reply is not None:
                await self.bus.publish_outbound(reply)
            if started:
                await self._tell(msg, TurnEnded())
        self._after(finished)  # queued behind the reply: what they send comes after it

    async def _tell(self, msg: InboundMessage, part: TurnStarted | TurnEnded) -> None:
        """A turn's start or end, in order with its chat's messages (never stored)."""
        await self.bus.publish_outbound(OutboundMessage(msg.channel, msg.chat_id, part, msg.id))

    def _after(self, finished: Finished) -> None:
        for session, turn in finished:
            for after in self.after_turn:
                self._spawn(after(session, turn))

    async def answer(self, msg: InboundMessage, show: Show) -> OutboundMessage | None:
        """The direct call, for a channel that answers on the connection that asked (the API):
        the reply, its pieces to `show` meanwhile; None when a /stop cut the turn short.
        Cancelling the caller cancels the turn (what was said is kept, as with /stop). Counted
        among the loop's work, so a graceful stop lets it finish within the grace period."""

        async def answered() -> OutboundMessage | None:
            try:
                return await self.handle(msg, show)
            except Deferred:
                stopping = Text(STOPPING_NOTE, "error", category=STOPPING)
                return OutboundMessage.answering(msg, stopping)

        return await self._spawn(answered())

    def stop_taking(self) -> None:
        """Begin no new turn (running ones go on); what waits stays in the inbox."""
        self._draining = True

    async def handle(
        self, msg: InboundMessage, progress: Show | None = None
    ) -> OutboundMessage | None:
        """One inbound message → its reply (None when a /stop cut the turn short); an
        internal error becomes a short error reply (the person is there to read it)."""
        finished: Finished = []
        try:
            return await self._handle(msg, progress, finished)
        except Deferred:
            raise
        except Exception:
            logger.exception("failed to handle a message for {}", msg.session_key)
            return OutboundMessage.answering(msg, Text(INTERNAL_ERROR, "error"))
        finally:
            self._after(finished)  # they run once the caller has the reply

    async def _handle(
        self, msg: InboundMessage, progress: Show | None, finished: Finished
    ) -> OutboundMessage | None:
        limit = self.settings.agent.max_message_chars
        if len(msg.content) > limit:
            text = f"That message is too long ({len(msg.content)} characters; limit {limit})."
            return OutboundMessage.answering(msg, Text(text, "error"))
        try:
            found = self.commands.resolve(msg.content)
        except UnknownCommand as exc:
            text = f"Unknown command /{exc.name} — try /help."
            return OutboundMessage.answering(msg, Text(text, "error", command=exc.name))
        if found and found[0].immediate:
            self._check_taking()
            return await command_reply(msg, *found)
        async with (
            self._locks.hold(msg.session_key),
            self.sessions.lease(msg.session_key),
            self._turn_slots,
        ):
            self._check_taking()
            if found and found[0].handler is not None:  # a command: a line of text
                msg = await self._as_stored(msg)
                if (refused := await self._admitted(msg)) is not None:
                    return refused
                return await command_reply(msg, *found)
            # /retry is a whole turn too
            return await self._stoppable_turn(msg, progress, finished, retry=bool(found))

    async def _as_stored(self, msg: InboundMessage) -> InboundMessage:
        """A chat its session records as a room (agent/intake.py) stays one, whatever it says."""
        if msg.sender.shared_room or not (await self.sessions.get(msg.session_key)).is_room:
            return msg
        return replace(msg, sender=replace(msg.sender, shared_room=True))

    @asynccontextmanager
    async def between_turns(self, key: str) -> AsyncIterator[None]:
        """Hold a chat's session between its turns: no turn of it runs meanwhile, here or in
        another process. For what background work adds to a chat's transcript."""
        async with self._locks.hold(key), self.sessions.lease(key):
            yield

    def _check_taking(self) -> None:
        if self._draining:
            raise Deferred

    async def _stoppable_turn(
        self, msg: InboundMessage, progress: Show | None, finished: Finished, *, retry: bool = False
    ) -> OutboundMessage | None:
        # What the person said is saved before the turn exists, so neither a /stop nor a
        # shutdown can lose it: the turn may be cut short, the message never is.
        key = msg.session_key
        self._starting.add(key)  # from here a /stop stops the turn before it begins
        try:
            msg = await self._as_stored(msg)
            if (refused := await self._admitted(msg)) is not None:
                return refused
            intake = self.intake.retried(msg) if retry else self.intake.acknowledge(msg)
            saving = asyncio.ensure_future(intake)
            try:
                session, at = await asyncio.shield(saving)
            except asyncio.CancelledError:
                await saving
                raise
        except Unreadable as exc:  # kept in the session: /retry reads its files again
            return OutboundMessage.answering(msg, Text(exc.line, "error"))
        finally:
            self._starting.discard(key)
            # Cleared on every path: a save that failed must not stop the chat's next message.
            stopped = key in self._stop_before_start
            self._stop_before_start.discard(key)
        if stopped:
            return None  # a /stop came while the message was being saved
        if at is None:
            nothing = Text(NOTHING_TO_RETRY, "command", command="retry")
            return OutboundMessage.answering(msg, nothing)
        if (earlier_reply := finished_reply(session.messages, at)) is not None:
            # Replayed after its turn ended: sent as it was made, with its preface.
            return OutboundMessage.answering(
                msg, Text(prefaced(session.messages[at], earlier_reply))
            )
        if (paused := self.clients.paused(session, at)) is not None:
            return OutboundMessage.answering(msg, paused)  # a retried request that paused
        task = asyncio.create_task(self._turn(msg, session, at, progress, finished))
        self._running[key] = task
        try:
            return await task
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if task.cancelled() and current is not None and not current.cancelling():
                return None  # /stop cancelled only the turn; /stop's own reply says so
            raise
        finally:
            self._running.pop(msg.session_key, None)

    async def _turn(
        self,
        msg: InboundMessage,
        session: Session,
        at: int,
        progress: Show | None,
        finished: Finished,
    ) -> OutboundMessage:
        turn = replace(self._context_of(msg), outlet=file_outlet(msg, progress))
        shown_from = session.replay_from
        system = await self._system_message(session, turn.shared_room)
        for hook in self.before_turn:
            await hook(session, turn)
        # Archiving (by a hook, or a consolidation just done) adds history the prompt must show.
        while session.replay_from != shown_from:
            shown_from = session.replay_from
            system = await self._system_message(session, turn.shared_room)
        user = to_wire([session.messages[at]])[0]
        # Counted as sent, images included: they take room, and usage counts them.
        # A paused turn going on shows the model again the images its request brought.
        media = msg.media or tuple(session.messages[at].get("media") or ())
        sent = await self.context.with_images(user, media)
        # A turn a crash interrupted goes on from where it was, its tool results included.
        partial = session.messages[at + 1 :]
        if seals := seal_tool_calls(partial)[len(partial) :]:
            await self.sessions.append(session, seals)
        # A failed attempt's note is for later turns: a retry asks the model afresh.
        resumed = to_wire([m for m in session.messages[at + 1 :] if not m.get("failed")])
        # An API client's tools, instructions and options (None: any other message).
        run = self.clients.run_for(msg)
        fixed = self._fixed(system["content"], [sent, *resumed], run)
        whole = fixed + session.tokens_between(session.replay_from, at)
        if not self.budget.settled(self.budget.calibration.apply(whole)):
            session.system_tokens = self.budget.count_system(system["content"])
            fixed = self._fixed(system["content"], [sent, *resumed], run)
        history, history_tokens = session.history(self.budget.prompt_limit - fixed, end=at)
        exact = self.budget.exact  # how `fixed` and the history were counted

        async def report(call: ToolCall) -> None:
            if progress is not None:
                line = describe_call(call)
                await progress(OutboundMessage.answering(msg, Progress(line, call.name)))

        result = ReactResult(text=None)
        limits = self.settings.agent
        try:
            with charged_to(msg.session_key, "turn", secrets.token_hex(6)):
                await (react if run is None else run.react)(
                    self.provider,
                    [system, *history, sent, *resumed],
                    self.tools,
                    limits.max_iterations,
                    context=turn,
                    out=result,
                    on_tool_call=report,
                    on_text=self._streamer(msg, progress),
                    show_images=self.context.tool_images,
                )
        except ProviderError as exc:
            return await self._failed(msg, session, result, exc)
        except asyncio.CancelledError:
            # What the person saw of a reply cut short stays, so the next turn knows it.
            shown = [interrupted(result.streamed)] if result.streamed else []
            await asyncio.shield(self._save(session, seal_tool_calls(result.messages) + shown))
            raise
        await self._save(session, result.messages)
        if result.usage:
            actual = result.usage[0].prompt_tokens
            self.budget.observe(fixed + history_tokens, actual, exact=exact)
        finished.append((session, turn))
        if run is not None and (answer := self.clients.outcome(msg, run, result)) is not None:
            return OutboundMessage.answering(msg, answer)
        if result.text is None:
            text = self.templates.render(
                "iteration_limit.md.j2", max_iterations=limits.max_iterations
            )
            return OutboundMessage.answering(msg, Text(text, "error"))
        reply = prefaced(session.messages[at], redact(result.text))
        cut = result.finish_reason == "length"  # the model stopped at max_tokens
        return OutboundMessage.answering(msg, Text(reply, truncated=cut))

    def _context_of(self, msg: InboundMessage) -> ToolContext:
        """Whom a turn works for: handed to every tool call and hook, never read from ambient
        state."""
        groups_see_personal = self.settings.memory.groups_see_personal
        room = msg.sender.shared_room
        return ToolContext(msg.sender, audience_of(msg.session_key, room, groups_see_personal))

    def _fixed(self, system: str, messages: list[dict[str, Any]], run: ClientRun | None) -> int:
        """Tokens of what every prompt of the turn carries besides the replayed history."""
        return (
            self.budget.count_system(system)  # remembered by text: a lookup
            + sum(self.budget.count(m) for m in messages)
            + self.budget.count_tools(self.tools.schema_text)
            + (run.tokens(self.budget) if run is not None else 0)
        )

    async def _admitted(self, msg: InboundMessage) -> OutboundMessage | None:
        """None, or the refusal of what an API client asked; a paused turn the message does
        not go on with is closed (agent/paused_turns.py)."""
        return await self.clients.before(msg, lambda: self._offered(msg))

    def _offered(self, msg: InboundMessage) -> set[str]:
        """The names of our tools offered to the message's chat."""
        return {schema["function"]["name"] for schema in self.tools.schemas(self._context_of(msg))}

    def _streamer(self, msg: InboundMessage, progress: Show | None) -> StepText | None:
        """Pieces of the reply go out as they arrive, each with the step's text so far."""
        if progress is None or not self.settings.llm.stream:
            return None
        written: dict[int, str] = {}  # per step: the text so far, as the model wrote it
        shown: dict[int, str] = {}  # ... and what of it went out (masked, never half a secret)
        ended: set[int] = set()

        async def show(step: int, piece: str) -> None:
            if step not in written and shown and (last := max(shown)) not in ended:
                ended.add(last)  # a new model call: the text of the one before is complete
                await progress(OutboundMessage.answering(msg, DeltaEnd(last)))
            text = written[step] = written.get(step, "") + piece
            safe = shown_so_far(text)
            if len(safe) > len(before := shown.get(step, "")):
                shown[step] = safe
                delta = safe[len(before) :]
                await progress(OutboundMessage.answering(msg, Delta(delta, safe, step)))

        return show

    async def _failed(
        self, msg: InboundMessage, session: Session, result: ReactResult, exc: ProviderError
    ) -> OutboundMessage:
        logger.warning(
            "turn for {} failed after {}: {}", msg.session_key, plural(exc.attempts, "attempt"), exc
        )
        owner = owner_alone(msg.sender)  # not an address to show a group
        note = self.templates.render(
            "provider_error.md.j2",
            category=exc.category,
            model=self.settings.llm.model,
            key_source=key_source(self.settings.llm),
            proxy=route(self.settings.llm).proxy if owner and exc.category == "unreachable" else "",
            url=endpoint(self.settings.llm) if owner else "",
            log=shown_path(self.log_file) if owner and self.log_file is not None else "",
        )
        # Saved as ours, not the model's words: the next turn's prompt says no reply was given.
        failed = {
            "role": "assistant",
            "content": self.templates.render("turn_failed.md.j2", category=exc.category),
            "failed": exc.category,
        }
        shown = [interrupted(exc.shown)] if exc.shown else [failed]
        await self._save(session, seal_tool_calls(result.messages) + shown)
        if exc.shown:  # what was shown stands, with a note; never a second, different reply
            text = f"{redact(exc.shown)}\n\n({note})"
            cut = Text(text, category=exc.category, cut_short=True)
            return OutboundMessage.answering(msg, cut)
        return OutboundMessage.answering(msg, Text(note, "error", category=exc.category))

    async def _save(self, session: Session, messages: list[dict[str, Any]]) -> None:
        await self.sessions.append(session, messages)  # which masks known secrets

    async def _system_message(self, session: Session, room: bool) -> dict[str, Any]:
        text = await self.context.system_prompt(session.key, room)
        session.system_tokens = self.budget.count_system(text)
        return {"role": "system", "content": text}

    def _spawn(self, coro: Awaitable[Any]) -> asyncio.Task[Any]:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._finished)
        return task

    def _finished(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            logger.opt(exception=task.exception()).error("background task failed")

    async def close(self, grace_s: float = 10.0) -> None:
        """Let in-flight work finish for up to `grace_s`, then cancel what is left."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + grace_s
        await self._chats.drain(grace_s)
        still: set[asyncio.Task[Any]] = set()
        if self._tasks:
            left = max(0.0, deadline - loop.time())
            _, still = await asyncio.wait(set(self._tasks), timeout=left)
        stop_all()  # the grace is over: a document still being parsed ends now, its turn too
        for task in still:
            task.cancel()
        if still:
            await asyncio.wait(still, timeout=2.0)
        await self._chats.cancel()
        await self.clients.stop()

    def _register_builtin_commands(self) -> None:
        register = self.commands.register
        register(Command("help", "show the commands", self._cmd_help, immediate=True))
        register(
            Command("new", "start a new conversation (earlier ones stay in memory)", self._cmd_new)
        )
        stop = Command(
            "stop", "stop the reply in progress", self._cmd_stop, usage="[<id>]", immediate=True
        )
        register(stop)
        register(Command("retry", "run your last unanswered message again", None))

    async def _cmd_help(self, msg: InboundMessage, args: str) -> str:
        listed = [command for command in self.commands.all() if command.listed]
        return self.templates.render("help.md.j2", commands=listed)

    async def _cmd_new(self, msg: InboundMessage, args: str) -> str:
        session = await self.sessions.get(msg.session_key)
        chat = self._context_of(msg)
        notes = [note for hook in self.before_new if (note := await hook(session, chat))]
        await self.sessions.update_state(session, replay_from=len(session.messages))
        return "\n".join(["New session started.", *notes])

    async def _cmd_stop(self, msg: InboundMessage, args: str) -> str:
        if args:  # `/stop <id>`: something a feature runs in the background
            for stop in self.stop_named:
                if (answer := await stop(msg, args)) is not None:
                    return answer
            return NOTHING_NAMED.format(name=args)
        task = self._running.get(msg.session_key)
        if msg.session_key in self._starting:
            self._stop_before_start.add(msg.session_key)
            self.context.stop_reading(msg.session_key)  # a PDF's parser is killed
            return STOPPED
        if task is None or task.done():
            return NOTHING_TO_STOP
        task.cancel()
        # Its end (TurnEnded) goes out before this answer: what it showed stays above it.
        await asyncio.wait({task}, timeout=STOP_WAIT_S)
        return STOPPED


STOP_WAIT_S = 10.0  # the longest /stop waits for the turn it cut to save what was said
NOTHING_NAMED = "Nothing called {name} runs in this chat; /stop alone stops the reply."
NOTHING_TO_RETRY = "Nothing to retry: your last message was answered."
INTERNAL_ERROR = "Something went wrong on my side; the details are in the log."


async def command_reply(msg: InboundMessage, command: Command, args: str) -> OutboundMessage:
    """A command's answer is the runtime's own text, not the model's: marked so every channel
    can show it as written (plain text, its own line breaks), not as Markdown."""
    if (refused := command.refusal(msg)) is not None:  # the one owner check of every command
        return OutboundMessage.answering(msg, Text(refused, "error", command=command.name))
    assert command.handler is not None  # a command without one is a turn (_handle runs it)
    result = await command.handler(msg, args)
    text, buttons = (result.text, result.buttons) if isinstance(result, Answer) else (result, ())
    return OutboundMessage.answering(msg, Text(text, "command", buttons, command.name))


def interrupted(text: str) -> dict[str, Any]:
    """The part of a reply the person saw before it was cut short, as the assistant's."""
    return {"role": "assistant", "content": text, "interrupted": True}


def prefaced(user: dict[str, Any], reply: str) -> str:
    """A reply as sent: after the line a feature put before it ("heard: ..."), if any."""
    preface = user.get("preface")
    return f"{preface}\n\n{reply}" if preface else reply

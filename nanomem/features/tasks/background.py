"""Background tasks: `spawn` hands a long job to a turn of its own while the chat goes on.

A task is a ReAct run in a session of its own (`<chat>#task-<id>`), with the chat's tools but
`spawn` (no nesting) and the chat's context: the same sender and audience, so a group's task is
a group turn (no personal memory, the group's files) and a shell command it wants is asked
about in its chat like any other. When it ends (done, failed, the step limit, /stop, a
restart), its chat is told: a message where the chat's channel can take one unasked (through
the inbox in the gateway, so a crash re-sends it), and an aside in the chat's transcript,
appended between its turns, so the next turn knows what the task found. The record under the
home (records.py) says which tasks run and whether their chat was told; at start, what a process
that is gone left running is told as interrupted, once.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from dataclasses import dataclass, field, replace
from typing import Any

from loguru import logger

from nanomem.agent import (
    Admits,
    AgentLoop,
    Command,
    ContextBuilder,
    Feature,
    HealthReport,
    InboundMessage,
    MessageBus,
    OutboundMessage,
    Reach,
    ReactResult,
    Templates,
    Text,
    anyone,
    react,
    seal_tool_calls,
)
from nanomem.audience import Sender
from nanomem.features.tasks.records import State, TaskRecord, TaskStore, now_iso
from nanomem.features.tasks.report import listing, named, report
from nanomem.log import redact
from nanomem.memory import SessionStore
from nanomem.providers import Provider, ProviderError, charged_to
from nanomem.tools import Tool, ToolContext, ToolError, ToolOutput, ToolRegistry

INBOX_CHANNEL = "tasks"  # the inbox's name for results on their way to a chat
SPAWN = "spawn"
TELL_S = 10.0  # at stop: how long tasks cut short may take to tell their chat
LABEL_CHARS = 60


@dataclass
class Running:
    record: TaskRecord
    out: ReactResult = field(default_factory=lambda: ReactResult(text=None))
    task: asyncio.Task[None] | None = None
    stopped: bool = False  # by /stop (else a cancel is the process stopping)
    # Set once the turn that spawned it has its reply ("started task …") queued to the chat.
    replied: asyncio.Event | None = None

    def progress(self) -> TaskRecord:
        return replace(self.record, steps=steps(self.out), tokens=tokens(self.out))


def steps(out: ReactResult) -> int:
    return sum(1 for m in out.messages if m.get("role") == "assistant")


def tokens(out: ReactResult) -> int:
    return sum(u.prompt_tokens + u.completion_tokens for u in out.usage)


class ToolsBut(ToolRegistry):
    """The core's tools, live (tools added later included), without one of them."""

    def __init__(self, tools: ToolRegistry, hidden: str) -> None:
        super().__init__(max_output_chars=tools.max_output_chars)
        self.inner, self.hidden = tools, hidden

    @property
    def names(self) -> list[str]:
        return [name for name in self.inner.names if name != self.hidden]

    def schemas(self, context: ToolContext | None = None) -> list[dict[str, Any]]:
        offered = self.inner.schemas(context)  # those offered to the task's chat
        return [s for s in offered if s["function"]["name"] != self.hidden]

    def is_read_only(self, name: str) -> bool:
        return name != self.hidden and self.inner.is_read_only(name)

    async def run(self, name: str, raw_arguments: str, context: ToolContext) -> ToolOutput:
        if name == self.hidden:
            text = f"Error: {name} is not available inside a background task; do the job here."
            return ToolOutput(text)
        return await self.inner.run(name, raw_arguments, context)


class BackgroundTasks(Feature):
    name = "tasks"

    def __init__(
        self,
        store: TaskStore,
        *,
        loop: AgentLoop,
        sessions: SessionStore,
        context: ContextBuilder,
        provider: Provider,
        tools: ToolRegistry,
        templates: Templates,
        bus: MessageBus,
        limit: int,
        max_iterations: int,
    ) -> None:
        self.store, self.loop, self.sessions, self.context = store, loop, sessions, context
        self.provider, self.templates, self.bus = provider, templates, bus
        self.tools_inside = ToolsBut(tools, SPAWN)
        self.limit, self.max_iterations = limit, max_iterations
        self.pushing: frozenset[str] = frozenset()  # channels told unasked (set by start)
        self.admits: Admits = anyone
        self.ended: list[TaskRecord] = []  # this process's tasks that ended, in that order
        self._running: dict[str, Running] = {}
        # The asyncio tasks until they return: a task leaves `_running` before it has told
        # its chat, and `wait` must not return in between.
        self._alive: set[asyncio.Task[None]] = set()
        self._reserved = 0  # spawns between the cap's check and their task
        # Telling what processes that are gone left (started by `start`); done once told.
        self.orphans_told: asyncio.Task[None] | None = None

    # -- what the chat sees ------------------------------------------------------------------

    def tools(self) -> list[Tool]:
        return [Tool.from_function(self.spawn, SPAWN)]

    def commands(self) -> list[Command]:
        summary = "list this chat's background tasks (/stop <id> stops one)"
        return [Command("tasks", summary, self._cmd_tasks, immediate=True)]

    def prompt_section(self) -> str:
        return "tasks.md.j2"

    async def spawn(self, context: ToolContext, task: str, label: str = "") -> str:
        """Hand a long job (research, many reads or steps) to a helper that works in the
        background with your tools while this chat goes on; its result is posted in this chat
        when it ends. `task`: the whole job with everything it needs (the helper does not see
        this conversation) and what to report. `label`: a few words naming it."""
        session = context.session
        if session is None:
            raise ToolError("spawn works only in a chat")
        job = task.strip()
        if not job:
            raise ToolError("task is empty: say what the job is")
        if len(self._running) + self._reserved >= self.limit:
            raise ToolError(
                f"{len(self._running)} background tasks run already "
                f"(agent.max_background_tasks = {self.limit}); wait for one to end, or do "
                "this job here"
            )
        label = redact(" ".join(label.split())[:LABEL_CHARS] or " ".join(job.split())[:40])
        self._reserved += 1
        try:  # shielded: a /stop of the turn must not leave a recorded task that never runs
            record = await asyncio.shield(self._begin(session, context, job, label))
        finally:
            self._reserved -= 1
        return (
            f"started {named(record)}. Its result will be posted in this chat when it ends: "
            "tell the person it started, and do not wait for it."
        )

    async def _begin(self, session: str, context: ToolContext, job: str, label: str) -> TaskRecord:
        await self.store.claim_run()
        sender = context.sender
        record = TaskRecord(
            uuid.uuid4().hex[:4], label, session, sender.id, sender.name, self.store.run, now_iso()
        )
        record = replace(record, room=context.shared_room)
        record = await self.store.add(record)
        running = self._running[record.id] = Running(record)
        running.replied = self.loop.answering.replied(session)
        running.task = asyncio.create_task(self._run(running, job, context), name=record.id)
        self._alive.add(running.task)
        running.task.add_done_callback(self._alive.discard)
        logger.info("task {} started in {}: {}", record.id, session, label)
        return record

    async def _cmd_tasks(self, msg: InboundMessage, args: str) -> str:
        return listing(await self._of_chat(msg.session_key))

    async def records(self) -> list[TaskRecord]:
        """Every chat's tasks (the web page): as recorded, with the progress of those running
        here."""
        records = await asyncio.to_thread(self.store.read)
        return [self._running[r.id].progress() if r.id in self._running else r for r in records]

    async def _of_chat(self, session: str) -> list[TaskRecord]:
        return [r for r in await self.records() if r.session == session]

    async def stop_named(self, msg: InboundMessage, name: str) -> str | None:
        """`/stop <id>`: only a task of this chat (another chat's is not found here); in a
        group, only by whoever started it or the owner."""
        wanted = name.strip().lower().removeprefix("task").strip(" -")
        found = [r for r in await self._of_chat(msg.session_key) if r.id == wanted]
        if not found:
            return None
        return self.stop_task(found[0], msg.sender)

    def stop_task(self, record: TaskRecord, sender: Sender) -> str:
        """Stop a running task (`/stop <id>`, the web page's Stop): what the asker is told."""
        if not record.running:
            return f"{named(record)} has ended already ({record.state})."
        if (sender.shared_room or record.is_room) and not (
            sender.is_owner or sender.id == record.started_by
        ):
            return f"Only whoever started {named(record)}, or the owner, can stop it."
        running = self._running.get(record.id)
        if running is None or running.task is None:
            return f"{named(record)} runs in another nanomem process; stop it there."
        running.stopped = True
        running.task.cancel()
        return f"Stopping {named(record)}; this chat is told when it has stopped."

    # -- running a task ----------------------------------------------------------------------

    async def _run(self, running: Running, job: str, context: ToolContext) -> None:
        record, out = running.record, running.out
        state: State = "done"
        result = ""
        try:
            # It begins once the chat has "started task …" queued: what it asks or tells the
            # chat comes after that, never before.
            if running.replied is not None:
                await running.replied.wait()
            await self._work(record, job, context, out)
            if out.text is None:
                state = "limit"
            else:
                result = out.text
        except asyncio.CancelledError:
            state = "stopped" if running.stopped else "interrupted"
            if (task := asyncio.current_task()) is not None:
                task.uncancel()  # cut short, it still tells its chat
        except ProviderError as exc:
            logger.warning("task {} failed: {}", record.id, exc)
            state, result = "failed", f"the model call failed ({exc.category})"
        except Exception:
            logger.exception("task {} failed", record.id)
            state, result = "failed", "something went wrong on my side; the details are in the log"
        ended = replace(running.progress(), state=state, result=redact(result), ended_at=now_iso())
        self._running.pop(record.id, None)
        logger.info("task {} in {}: {}", record.id, record.session, state)
        try:
            await self.store.update(
                record.id,
                state=ended.state,
                result=ended.result,
                ended_at=ended.ended_at,
                steps=ended.steps,
                tokens=ended.tokens,
            )
            await self._tell(ended)
        except Exception:  # its record still says untold: the next start tells it
            logger.exception("task {}: could not tell {}", record.id, record.session)
        self.ended.append(ended)

    async def _work(
        self, record: TaskRecord, job: str, context: ToolContext, out: ReactResult
    ) -> None:
        key = record.task_session
        async with self.sessions.lease(key):
            session = await self.sessions.get(key)
            instruction = self.templates.render(
                "task.md.j2", id=record.id, label=record.label, time=record.started_at, task=job
            )
            user = {"role": "user", "content": instruction}
            await self.sessions.append(session, [user])
            # The chat's own prompt (its audience decides what memory it shows).
            prompt = await self.context.system_prompt(record.session, record.is_room)
            system = {"role": "system", "content": prompt}
            try:
                with charged_to(record.session, "task"):  # the chat that started it
                    await react(
                        self.provider,
                        [system, user],
                        self.tools_inside,
                        self.max_iterations,
                        context=context,
                        out=out,
                        show_images=self.context.tool_images,
                    )
            finally:  # what it did is kept, even when it was cut short
                await asyncio.shield(self.sessions.append(session, seal_tool_calls(out.messages)))

    # -- telling the chat --------------------------------------------------------------------

    async def _tell(self, record: TaskRecord) -> None:
        """The chat hears how the task ended: a message where its channel takes one unasked
        (kept in the inbox until delivered, where there is one), and an aside in its
        transcript between its turns. Then the record says told: twice rather than never."""
        text = self.report(record)
        channel, _, chat = record.session.partition(":")
        if self._reaches(record):
            message = OutboundMessage(channel, chat, Text(text))
            if self.bus.inbox is not None:
                item = (chat, {"task": record.id}, Sender(record.started_by))
                (seq,) = await self.bus.receive(INBOX_CHANNEL, [item])
                message = replace(message, seq=seq)
                await self.bus.answer_for(seq, message)
            await self.bus.publish_outbound(message)
        async with self.loop.between_turns(record.session):
            session = await self.sessions.get(record.session)
            if not any(m.get("task") == record.id for m in session.messages[-500:]):
                aside = {"role": "assistant", "content": text, "aside": True, "task": record.id}
                await self.sessions.append(session, [aside])
        await self.store.update(record.id, told=True)

    def _reaches(self, record: TaskRecord) -> bool:
        """Its chat takes a message unasked here, from whoever started it."""
        channel = record.session.partition(":")[0]
        return channel in self.pushing and self.admits(record.session, record.started_by)

    async def _tell_orphans(self) -> None:
        """Results a crash kept from being delivered go out again; tasks a process that is
        gone left running are told as interrupted. The gateway (the one with the inbox)
        tells every chat; `nanomem chat` only its own, leaving the rest to the gateway."""
        for pending in await self.bus.unfinished(INBOX_CHANNEL):
            await self.bus.forget(pending.seq)  # stored, not answered: its record tells it
        for record in await self.store.orphans():
            if self.bus.inbox is None and not self._reaches(record):
                continue
            try:
                await self._tell(record)
            except Exception:
                logger.exception("task {}: could not tell {}", record.id, record.session)

    def health(self) -> dict[str, HealthReport]:
        """How many tasks run in this process, against the limit."""
        return {"tasks": HealthReport({"running": len(self._running), "limit": self.limit})}

    @property
    def running(self) -> int:
        """Tasks running in this process."""
        return len(self._running)

    def report(self, record: TaskRecord) -> str:
        """What its chat is told of how the task ended."""
        return report(record, self.max_iterations)

    async def wait(self) -> list[TaskRecord]:
        """Every task of this process ended and told (`nanomem chat -m` before it exits);
        those that ended, in that order."""
        while self._alive:
            await asyncio.gather(*self._alive, return_exceptions=True)
        return list(self.ended)

    # -- lifecycle ---------------------------------------------------------------------------

    async def start(self, reach: Reach) -> None:
        self.pushing, self.admits = frozenset(reach.pushing), reach.admits
        # In the background: a chat busy in another process must not hold up the start.
        self.orphans_told = asyncio.create_task(self._tell_orphans(), name="tasks-orphans")

    async def stop(self, grace_s: float) -> None:
        """Tasks may finish within `grace_s`; the rest are cut short and tell their chat (or,
        if even that cannot be done now, the next start tells it)."""
        tasks = set(self._alive)
        if tasks:
            _, left = await asyncio.wait(tasks, timeout=grace_s)
            for task in left:
                task.cancel()
            if left:
                _, still = await asyncio.wait(left, timeout=TELL_S)
                for task in still:
                    task.cancel()
                await asyncio.gather(*still, return_exceptions=True)
        if self.orphans_told is not None:
            self.orphans_told.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.orphans_told
        self.store.release_run()

"""The terminal channel: prompt_toolkit input, rich output, Ctrl-C cancels the running turn."""

from __future__ import annotations

import asyncio
import functools
import signal
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from html import escape as html_escape
from pathlib import Path
from typing import TYPE_CHECKING, Any

from prompt_toolkit import PromptSession, print_formatted_text
from prompt_toolkit.formatted_text import HTML
from prompt_toolkit.history import FileHistory
from prompt_toolkit.key_binding import KeyBindings, KeyPressEvent

from nanomem.agent import (
    STOPPED,
    BaseChannel,
    Capabilities,
    Delta,
    DeltaEnd,
    File,
    InboundMessage,
    MessageBus,
    OutboundMessage,
    Progress,
    Question,
    Text,
)
from nanomem.audience import Sender
from nanomem.text.escapes import strip_escapes
from nanomem.text.masking import redact

if TYPE_CHECKING:
    from rich.console import Console

    from nanomem.agent import Unread

EXIT_WORDS = {"/exit", "/quit", "exit", "quit"}
UNREAD_POLL_S = 1.0  # a reminder fired by the gateway shows in an open chat within this


class MaskedHistory(FileHistory):
    """The prompt's history file: a line is written with known secrets masked, as the session
    stores it (a pasted API key must not wait in a file for the up arrow)."""

    def store_string(self, string: str) -> None:
        super().store_string(redact(string))


def _key_bindings() -> KeyBindings:
    bindings = KeyBindings()

    @bindings.add("c-c")
    def _interrupt(event: KeyPressEvent) -> None:
        # Ctrl-C clears a half-typed line; on an empty line it leaves, like a shell.
        buffer = event.app.current_buffer
        if buffer.text:
            buffer.reset()
        else:
            event.app.exit(exception=EOFError())

    @bindings.add("escape", "enter")
    def _newline(event: KeyPressEvent) -> None:
        event.app.current_buffer.insert_text("\n")

    return bindings


@contextmanager
def typeahead_kept() -> Iterator[None]:
    """Between prompts, keys typed ahead wait unechoed for the next prompt, which reads them as
    typed: no echo over the spinner or the reply, and Ctrl-D is a key, not the line discipline's
    end of file (which would be spent on no reader). Ctrl-C still signals, so it stops a reply.
    prompt_toolkit sets its raw mode over this for each prompt and puts this back after."""
    try:
        import termios

        fd = sys.stdin.fileno()
        saved = termios.tcgetattr(fd)
    except (ImportError, OSError, ValueError):  # not a terminal (or no termios): nothing to keep
        yield
        return
    quiet = [*saved[:6], list(saved[6])]
    quiet[0] &= ~termios.ICRNL  # Enter arrives as prompt_toolkit's raw mode would read it
    quiet[3] &= ~(termios.ECHO | termios.ICANON | termios.IEXTEN)
    quiet[6][termios.VMIN], quiet[6][termios.VTIME] = 1, 0
    termios.tcsetattr(fd, termios.TCSANOW, quiet)  # TCSANOW: never drop what was typed
    try:
        yield
    finally:
        termios.tcsetattr(fd, termios.TCSANOW, saved)


class TerminalChannel(BaseChannel):
    name = "cli"
    # Redraws the reply as it grows (rich's Live region); choices as a hint line or a y/N prompt.
    # A file is named where it lies: the person is at this machine.
    capabilities = Capabilities(
        streams=True, edits=True, buttons=True, files=True, markup="markdown"
    )

    def __init__(
        self,
        *,
        history_file: Path,
        chat_id: str = "direct",
        console: Console | None = None,
        workspace: Path | None = None,
        unread: Unread | None = None,
    ) -> None:
        self.chat_id = chat_id
        self.workspace = workspace
        self.unread = unread  # what the gateway said here unasked while nobody looked
        # The terminal is the owner's, and they sit at this prompt: they can answer a question
        # (may this shell command run?). A session its first message made a group chat
        # (`nanomem chat -m ... --room`) stays one: the core reads the session's stored word.
        self.sender = Sender("user", is_owner=True, can_answer=True)
        self.history_file = history_file
        self._console = console
        self._bus: MessageBus | None = None
        self._waiting: dict[str, asyncio.Future[OutboundMessage]] = {}
        self._views: dict[str, LiveReply] = {}  # replies being written, by message id
        self._asking: set[asyncio.Task[None]] = set()  # questions waiting at the prompt
        self._prompting = False  # the prompt waits for a line: what comes unasked goes above it

    @property
    def console(self) -> Console:
        if self._console is None:
            from rich.console import Console  # after the prompt shows: startup speed

            self._console = Console(highlight=False)
        return self._console

    async def start(self, bus: MessageBus) -> None:
        self._bus = bus

    async def stop(self) -> None:
        for future in self._waiting.values():
            future.cancel()
        self._waiting.clear()
        for task in self._asking:
            task.cancel()

    async def send(self, msg: OutboundMessage) -> None:
        # What a model or a file wrote never acts on the terminal (a title, the clipboard, a
        # cleared screen): control sequences go (here, and as each part is shown), the plain
        # text stays. rich passes ESC through.
        part = msg.part
        if isinstance(part, Delta):
            view = self._views.get(msg.reply_to or "")
            if view is not None:
                view.grow(part)
            return
        if isinstance(part, DeltaEnd):
            if (view := self._views.get(msg.reply_to or "")) is not None:
                view.end(part.step)
            return
        if isinstance(part, Progress):
            line = f"  ↳ {strip_escapes(part.line)}"
            self.console.print(line, style="dim", markup=False, highlight=False)
            return
        if isinstance(part, File):
            await self._above_prompt(lambda: self._show_file(part))
            return
        if not isinstance(part, Text | Question):
            return
        msg = replace(msg, part=replace(part, text=strip_escapes(part.text)))
        if isinstance(part, Question):
            # Asked in a task of its own: its answer comes back through this same chat, which
            # the core sends one message at a time.
            task = asyncio.create_task(self._ask(msg))
            self._asking.add(task)
            task.add_done_callback(self._asking.discard)
            return
        future = self._waiting.pop(msg.reply_to or "", None)
        if future is not None and not future.done():
            future.set_result(msg)
        else:  # unasked (a background task's result)
            await self._above_prompt(lambda: self._render(msg))

    async def _above_prompt(self, show: Callable[[], None]) -> None:
        """Shown now; above the prompt while it waits for a line."""
        if self._prompting:
            from prompt_toolkit.application import run_in_terminal

            def quietly() -> None:
                # run_in_terminal puts the terminal in cooked mode, where a Ctrl-D typed
                # meanwhile is spent on no reader and keys are echoed over what is shown.
                with typeahead_kept():
                    show()

            await run_in_terminal(quietly)
        else:
            show()

    def _show_file(self, part: File) -> None:
        """Where the file is, whole (a path to open or copy), and its caption."""
        # One line, never wrapped: to copy whole.
        line = f"📎 {strip_escapes(str(part.where(self.workspace)))}"
        self.console.print(line, markup=False, emoji=False, highlight=False, soft_wrap=True)
        if part.caption:
            caption = strip_escapes(part.caption)
            self.console.print(caption, markup=False, emoji=False, highlight=False)
        self.console.print()

    async def run_until_exit(
        self, model: str = "", on_ready: Callable[[], None] | None = None
    ) -> None:
        """Chat until the person leaves; `on_ready` runs once the first prompt is drawn."""
        self.history_file.parent.mkdir(parents=True, exist_ok=True)
        prompt: PromptSession[str] = PromptSession(
            history=MaskedHistory(str(self.history_file)), key_bindings=_key_bindings()
        )
        print_formatted_text(
            HTML(
                f"<b>nanomem</b> · {html_escape(model)} · session cli:{html_escape(self.chat_id)}\n"
                "<style fg='ansibrightblack'>/help for commands · Esc+Enter for a new line · "
                "Ctrl-C stops a reply · Ctrl-D exits</style>"
            )
        )
        loop = asyncio.get_running_loop()

        def after_first_draw() -> None:
            # prompt_toolkit calls pre_run just before it draws: run on_ready one turn later.
            nonlocal on_ready
            if on_ready is not None:
                loop.call_soon(on_ready)
                on_ready = None

        watching = asyncio.create_task(self._watch_unread(), name="terminal-unread")
        try:
            with typeahead_kept():
                await self._prompt_loop(prompt, after_first_draw)
        finally:
            watching.cancel()
            await asyncio.gather(watching, return_exceptions=True)
        self.console.print("[dim]bye[/dim]")

    async def _prompt_loop(self, prompt: PromptSession[str], pre_run: Callable[[], None]) -> None:
        while True:
            self._prompting = True
            try:
                text = await prompt.prompt_async("you › ", pre_run=pre_run)
            except (EOFError, KeyboardInterrupt):
                break
            finally:
                self._prompting = False
            if not text.strip():
                continue
            if text.strip().lower() in EXIT_WORDS:
                break
            await self._exchange(text)

    async def _watch_unread(self) -> None:
        """What waits from while nobody looked is shown first; then, while the chat is open,
        what the gateway says here unasked (a reminder firing) within UNREAD_POLL_S."""
        if self.unread is None:
            return
        session = f"{self.name}:{self.chat_id}"
        away = True
        while True:
            if await asyncio.to_thread(self.unread.waiting, session):
                texts = await asyncio.to_thread(self.unread.take, session)
                if texts:
                    await self._above_prompt(functools.partial(self._show_unread, texts, away))
            away = False
            await asyncio.sleep(UNREAD_POLL_S)

    def _show_unread(self, texts: list[str], away: bool) -> None:
        from channels.terminal.markdown import Literal

        if away:
            self.console.print("While you were away:", style="bold", markup=False)
        for text in texts:
            self.console.print(Literal(strip_escapes(text)))
            self.console.print()

    async def _exchange(self, text: str) -> None:
        """Send one message and show its reply as it is written; Ctrl-C meanwhile sends /stop."""
        msg = await self._publish(text)
        reply = self._expect(msg)
        interrupted = asyncio.Event()
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGINT, interrupted.set)
        view = self._views[msg.id] = LiveReply(self.console)
        try:
            with view:
                interrupt = asyncio.ensure_future(interrupted.wait())
                waits: set[asyncio.Future[Any]] = {reply, interrupt}
                await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
                interrupt.cancel()
                if not reply.done():
                    stop = await self._expect(await self._publish("/stop"))
                    if stop.content == STOPPED:
                        reply.cancel()
                        view.keep_shown()  # what was seen stays (the session keeps it too)
                        self.console.print("[yellow]⏹ cancelled[/yellow]")
                        return
                    await reply  # nothing was running any more: the reply is on its way
        finally:
            del self._views[msg.id]
            loop.remove_signal_handler(signal.SIGINT)
        self._render(reply.result(), shown=view.finish())

    async def _ask(self, question: OutboundMessage) -> None:
        """A question from the running turn (may this shell command run?): y/N/always at the
        prompt, sent back as the matching button's command (its buttons come in that order:
        yes, always if offered, no)."""
        views = list(self._views.values())
        for view in views:
            view.pause()
        try:
            self._render(question)
            options = "y/N/always" if len(question.buttons) > 2 else "y/N"
            prompt: PromptSession[str] = PromptSession()
            try:
                said = (await prompt.prompt_async(f"allow? [{options}] › ")).strip().lower()
            except (EOFError, KeyboardInterrupt):
                said = ""
            choice = {"y": 0, "yes": 0}.get(said, -1)
            if said in ("a", "always") and len(question.buttons) > 2:
                choice = 1
            answer = await self._expect(await self._publish(question.buttons[choice].command))
            self._render(answer)
        finally:
            for view in views:
                view.resume()

    async def _publish(self, text: str) -> InboundMessage:
        assert self._bus is not None, "start() must be called first"
        msg = InboundMessage(self.name, self.chat_id, text, self.sender)
        self._expect(msg)
        await self._bus.publish_inbound(msg)
        return msg

    def _expect(self, msg: InboundMessage) -> asyncio.Future[OutboundMessage]:
        future = self._waiting.get(msg.id)
        if future is None:
            future = self._waiting[msg.id] = asyncio.get_running_loop().create_future()
        return future

    def _render(self, msg: OutboundMessage, shown: str = "") -> None:
        """A reply, a command's answer or an error, as Markdown that keeps every line and
        `<id>` as written; `shown`: what of it is on the screen already (printed as written)."""
        # ~0.1 s of imports (rich's Markdown): not before the first reply.
        from channels.terminal.markdown import Literal

        content = msg.content
        after = bool(shown) and content.startswith(shown)
        if after:
            content = content[len(shown) :]
        style = msg.part.style if isinstance(msg.part, Text) else "reply"
        if content.strip():
            rest = Literal(content, style="red" if style == "error" else "none")
            if after and not rest.opens_with_blank_line:
                self.console.print()  # blocks apart, as one Markdown would draw them
            self.console.print(rest)
        if msg.buttons:  # the terminal has no buttons: say what to type instead
            hint = " ".join(f"[{b.label}: {b.command}]" for b in msg.buttons)
            self.console.print(hint, style="dim", markup=False, highlight=False)
        self.console.print()


class LiveReply:
    """The reply while it is written: a spinner, then the text so far as Markdown. Finished
    blocks are printed once, above; only the block being written is redrawn in place (only this
    region, never the screen), so a long reply does not make each redraw slower."""

    def __init__(self, console: Console, refresh_per_second: int = 20) -> None:
        self.console = console
        self.refresh_per_second = refresh_per_second
        self.steps: dict[int, StepText] = {}  # each model call's text so far
        self._live: Any = None

    def __enter__(self) -> LiveReply:
        from rich.live import Live
        from rich.spinner import Spinner

        # Transient: the region is cleared at the end and the rest printed once, whole.
        self._live = Live(
            Spinner("dots", "[dim]thinking…[/dim]"),
            console=self.console,
            refresh_per_second=self.refresh_per_second,
            transient=True,
            vertical_overflow="crop",
        )
        self._live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._live.__exit__(*exc)

    def pause(self) -> None:
        """Clear the region while the person answers a question at the prompt."""
        self._live.stop()

    def resume(self) -> None:
        self._live.start()

    def grow(self, piece: Delta) -> None:
        from channels.terminal.markdown import Literal, tail

        first = not self.steps
        for earlier in [s for s in self.steps if s < piece.step]:
            self.end(earlier)  # a new model call: the one before has written all it will
        step = self.steps.setdefault(piece.step, StepText())
        step.raw = piece.so_far
        step.fresh_lines = step.fresh_lines or "\n" in piece.piece
        now = time.monotonic()
        # Looked for once a line is complete.
        if step.fresh_lines and now - step.looked >= step.pause:
            step.looked, step.fresh_lines = now, False
            self._print(step, *step.finished())
            # A look costs what the block being written costs to parse (40 ms for a paragraph
            # of 3,000 lines): looked at most a tenth of the time, never more than a redraw.
            step.pause = max(1 / self.refresh_per_second, 10 * (time.monotonic() - now))
        room = max(3, self.console.size.height - 3)
        shown = tail(step.pending(room * max(20, self.console.size.width)), room)
        # The first words are drawn at once; later ones with the next refresh (≤ 50 ms).
        self._live.update(Literal(shown), refresh=first)

    def end(self, number: int) -> None:
        """A step's text is complete: what is left of it is printed."""
        step = self.steps.get(number)
        if step is not None:
            rest = step.raw[step.done :]
            self._print(step, rest, strip_escapes(rest))

    def keep_shown(self) -> None:
        """A reply stopped halfway: everything shown so far stays on the screen."""
        for number in sorted(self.steps):
            self.end(number)

    def finish(self) -> str:
        """Text before tool calls stays; the last step is the reply itself: what of it is on
        the screen already."""
        numbers = sorted(self.steps)
        for number in numbers[:-1]:
            self.end(number)
        return self.steps[numbers[-1]].shown if numbers else ""

    def _print(self, step: StepText, raw: str, text: str) -> None:
        """Print `text`, shown from the next `raw` characters of the step, for good."""
        from channels.terminal.markdown import Literal

        step.done += len(raw)
        if not text.strip():
            return
        shown = Literal(text)
        if step.shown and not shown.opens_with_blank_line:
            self.console.print()  # blocks apart, as one Markdown would draw them
        step.shown += text
        self.console.print(shown)


@dataclass
class StepText:
    """One model call's text: as sent so far (`raw`, control sequences not yet removed), and
    how much of it is printed for good (`done` of raw, `shown` as shown)."""

    raw: str = ""
    done: int = 0
    shown: str = ""
    fresh_lines: bool = False  # a line was completed since the last look for finished blocks
    looked: float = 0.0
    pause: float = 0.0  # until the next look

    def finished(self) -> tuple[str, str]:
        """The whole top-level blocks not yet printed that nothing written later can change,
        as sent and as shown."""
        from channels.terminal.markdown import finished_lines, split_lines

        pending = self.raw[self.done :]
        # Control sequences never span a line: the raw text's lines are the shown text's.
        count = finished_lines(strip_escapes(pending))
        raw = split_lines(pending, count)[0] if count else ""
        return raw, strip_escapes(raw)

    def pending(self, limit: int) -> str:
        """The block being written, its last `limit` characters (with its first line)."""
        from channels.terminal.markdown import is_fence

        pending = self.raw[self.done :]
        if len(pending) > limit:
            first = pending[: pending.find("\n") + 1]
            pending = (first if is_fence(first) else "") + pending[-limit:]
        return strip_escapes(pending)

"""Loopback OpenAI-compatible chat-completions server for tests and benchmarks.

The server runs aiohttp on its own event loop in a daemon thread, so async tests, blocking
(pexpect) tests and benchmarks can all script it the same way. It only binds 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from types import TracebackType
from typing import Any, Literal

from aiohttp import web

StepKind = Literal["reply", "tool_calls", "error", "hang", "raw"]
ToolArgs = dict[str, Any] | str
_HOST = "127.0.0.1"
_SLEPT = web.RequestKey("slept", float)  # scripted latency a request waited out


@dataclass(frozen=True)
class Step:
    """One scripted response; every chat-completions request consumes exactly one."""

    kind: StepKind
    text: str | None = None  # reply text, assistant text beside tool calls, or error message
    calls: tuple[tuple[str, ToolArgs, str | None], ...] = ()  # (name, arguments, call_id)
    status: int = 200
    retry_after: float | None = None
    latency: float = 0.0
    usage: dict[str, Any] | None = None
    # When the request streams (`"stream": true`):
    pieces: int = 3  # content chunks the text is split into (tool arguments likewise)
    pause: float = 0.0  # seconds between chunks
    cut_after: int | None = None  # drop the connection after this many chunks (no [DONE])
    # After this many chunks, wait for FakeOpenAI.release(); a request that does not stream
    # waits for it before any answer.
    hold_after: int | None = None
    content_type: str = "application/json"  # of a raw body
    finish: str | None = None  # the finish_reason instead of "stop" / "tool_calls" ("length")

    @classmethod
    def reply(
        cls,
        text: str,
        *,
        latency: float = 0.0,
        usage: dict[str, Any] | None = None,
        pieces: int = 3,
        pause: float = 0.0,
        cut_after: int | None = None,
        hold_after: int | None = None,
    ) -> Step:
        """A plain assistant text reply; the streaming options apply to streamed requests."""
        return cls(
            "reply",
            text=text,
            latency=latency,
            usage=usage,
            pieces=pieces,
            pause=pause,
            cut_after=cut_after,
            hold_after=hold_after,
        )

    @classmethod
    def tool_call(
        cls,
        name: str,
        arguments: ToolArgs,
        *,
        call_id: str | None = None,
        text: str | None = None,
        latency: float = 0.0,
        cut_after: int | None = None,
        usage: dict[str, Any] | None = None,
    ) -> Step:
        """An assistant message with a single tool call (string arguments pass through)."""
        call = (name, arguments, call_id)
        return cls(
            "tool_calls",
            text=text,
            calls=(call,),
            latency=latency,
            cut_after=cut_after,
            usage=usage,
        )

    @classmethod
    def tool_calls(
        cls, calls: list[tuple[str, ToolArgs]], *, latency: float = 0.0, pause: float = 0.0
    ) -> Step:
        """An assistant message with several tool calls."""
        named = tuple((n, a, None) for n, a in calls)
        return cls("tool_calls", calls=named, latency=latency, pause=pause)

    @classmethod
    def error(
        cls,
        status: int,
        message: str = "scripted error",
        *,
        retry_after: float | None = None,
        latency: float = 0.0,
    ) -> Step:
        """An HTTP error with an OpenAI-style error body."""
        return cls("error", text=message, status=status, retry_after=retry_after, latency=latency)

    @classmethod
    def raw(cls, body: str, *, status: int = 200) -> Step:
        """`body` sent verbatim as the JSON response (malformed answers, `"\\ud83d"` escapes)."""
        return cls("raw", text=body, status=status)

    @classmethod
    def raw_events(cls, *chunks: str) -> Step:
        """A stream of these `data:` payloads verbatim, then `data: [DONE]` (malformed chunks)."""
        body = "".join(f"data: {chunk}\n\n" for chunk in (*chunks, "[DONE]"))
        return cls("raw", text=body, content_type="text/event-stream")

    @classmethod
    def hang(cls, seconds: float) -> Step:
        """Sit on the request for `seconds`, then reply "late"."""
        return cls("hang", text="late", latency=seconds)


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text"
        )
    return ""


def echo_step(request: dict[str, Any]) -> Step:
    """Default fallback: echo the text of the last user message."""
    users = [m for m in request.get("messages") or [] if isinstance(m, dict)]
    users = [m for m in users if m.get("role") == "user"]
    return Step.reply("echo: " + (_text_of(users[-1].get("content")) if users else ""))


def _pieces(text: str, n: int) -> list[str]:
    size = max(1, -(-len(text) // n))
    return [text[i : i + size] for i in range(0, len(text), size)]


def _error_response(status: int, message: str, retry_after: float | None = None) -> web.Response:
    headers = {"Retry-After": f"{retry_after:g}"} if retry_after is not None else None
    body = {"error": {"message": message, "type": "scripted", "code": status}}
    return web.json_response(body, status=status, headers=headers)


# A real OGG/Opus recording (tests/fixtures/voice-note.oga): what /v1/audio/speech answers.
SPEECH_FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "voice-note.oga"


@dataclass(frozen=True)
class AudioStep:
    """One scripted answer of /v1/audio/transcriptions or /v1/audio/speech."""

    text: str = ""  # the transcript (transcriptions)
    status: int = 200  # not 2xx: an OpenAI-style error with `text` as its message
    latency: float = 0.0


@dataclass(frozen=True)
class AudioRequest:
    """What an /audio/... request carried: the multipart fields and file, or the JSON body."""

    path: str  # "transcriptions" or "speech"
    fields: dict[str, str]  # form fields, or the JSON body's (as strings)
    filename: str | None
    content_type: str | None
    data: bytes  # the uploaded file's bytes
    auth: str | None


class FakeOpenAI:
    """Scriptable OpenAI chat-completions server on 127.0.0.1, thread-safe from any thread.
    It also serves /v1/audio/transcriptions (scripted transcripts, `transcript`) and
    /v1/audio/speech (a real OGG/Opus file), recording every audio request."""

    def __init__(self, *, model_latency: float = 0.0) -> None:
        self.model_latency = model_latency
        self.base_url = ""
        self._lock = threading.Lock()
        self._script: deque[Step] = deque()
        self._fallback: Callable[[dict[str, Any]], Step] | None = None
        self._requests: list[dict[str, Any]] = []
        self._busy_seconds = 0.0  # handling requests, scripted latency excluded
        self._auth: list[str | None] = []
        self._call_seq = 0
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop_event: asyncio.Event | None = None
        self._startup_error: BaseException | None = None
        self._inflight: set[asyncio.Task[Any]] = set()  # touched only on the server loop
        self._release: asyncio.Event | None = None  # lets a held stream go on
        self._held = 0  # streams waiting for release() right now
        self._streams_finished = 0
        self._transcripts: deque[AudioStep] = deque()
        self._speech: deque[AudioStep] = deque()
        self._audio: list[AudioRequest] = []
        self.default_transcript = "hello"  # when nothing is scripted

    def start(self) -> FakeOpenAI:
        """Start the server thread and block until it is listening."""
        with self._lock:
            if self._thread is not None:
                raise RuntimeError("FakeOpenAI already started")
            ready = threading.Event()
            self._startup_error = None
            self._thread = threading.Thread(
                target=lambda: asyncio.run(self._serve(ready)), name="fake-openai", daemon=True
            )
            self._thread.start()
        if not ready.wait(10):
            raise RuntimeError("FakeOpenAI did not start within 10 s")
        if self._startup_error is not None:
            self.stop()
            raise RuntimeError("FakeOpenAI failed to start") from self._startup_error
        return self

    def stop(self) -> None:
        """Shut down promptly (in-flight requests are cancelled) and join the thread."""
        with self._lock:
            thread, loop, stop_event = self._thread, self._loop, self._stop_event
            self._thread = None
        if thread is None:
            return
        if loop is not None and stop_event is not None:
            with contextlib.suppress(RuntimeError):  # loop already closed
                loop.call_soon_threadsafe(stop_event.set)
        thread.join(timeout=10)

    def __enter__(self) -> FakeOpenAI:
        return self.start()

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def add(self, step: Step) -> None:
        """Append a prebuilt step to the script."""
        with self._lock:
            self._script.append(step)

    def reply(
        self,
        text: str,
        *,
        latency: float = 0.0,
        usage: dict[str, Any] | None = None,
        pieces: int = 3,
        pause: float = 0.0,
        cut_after: int | None = None,
        hold_after: int | None = None,
    ) -> None:
        """Script a text reply (see Step for the streaming options)."""
        self.add(
            Step.reply(
                text,
                latency=latency,
                usage=usage,
                pieces=pieces,
                pause=pause,
                cut_after=cut_after,
                hold_after=hold_after,
            )
        )

    def tool_call(
        self,
        name: str,
        arguments: ToolArgs,
        *,
        call_id: str | None = None,
        text: str | None = None,
        latency: float = 0.0,
        cut_after: int | None = None,
        usage: dict[str, Any] | None = None,
    ) -> None:
        """Script one tool call; a str `arguments` is sent verbatim (may be malformed JSON)."""
        step = Step.tool_call(
            name,
            arguments,
            call_id=call_id,
            text=text,
            latency=latency,
            cut_after=cut_after,
            usage=usage,
        )
        self.add(step)

    def tool_calls(
        self, calls: list[tuple[str, ToolArgs]], *, latency: float = 0.0, pause: float = 0.0
    ) -> None:
        """Script several tool calls in one assistant message."""
        self.add(Step.tool_calls(calls, latency=latency, pause=pause))

    def error(
        self,
        status: int,
        message: str = "scripted error",
        *,
        retry_after: float | None = None,
        latency: float = 0.0,
    ) -> None:
        """Script an HTTP error response."""
        self.add(Step.error(status, message, retry_after=retry_after, latency=latency))

    def raw(self, body: str, *, status: int = 200) -> None:
        """Script a response body sent verbatim (e.g. `{"choices": []}`)."""
        self.add(Step.raw(body, status=status))

    def raw_events(self, *chunks: str) -> None:
        """Script a stream of these chunks sent verbatim, then `[DONE]`."""
        self.add(Step.raw_events(*chunks))

    def hang(self, seconds: float) -> None:
        """Script a response that arrives only after `seconds`."""
        self.add(Step.hang(seconds))

    def set_fallback(self, fn: Callable[[dict[str, Any]], Step] | None) -> None:
        """Set fn(request_json) -> Step used when the script is empty (None: echo)."""
        with self._lock:
            self._fallback = fn

    def pending(self) -> int:
        """Number of scripted steps not yet consumed."""
        with self._lock:
            return len(self._script)

    def clear(self) -> None:
        """Drop the remaining script and recorded requests; the fallback is kept."""
        with self._lock:
            self._script.clear()
            self._requests.clear()
            self._auth.clear()

    def release(self) -> None:
        """Let a stream held by `hold_after` go on (from any thread)."""
        loop, event = self._loop, self._release
        if loop is not None and event is not None:
            loop.call_soon_threadsafe(event.set)

    @property
    def held(self) -> int:
        """Streams waiting at their `hold_after` for release() right now."""
        with self._lock:
            return self._held

    @property
    def streams_finished(self) -> int:
        """Streamed responses sent to their end (counted as [DONE] goes out), cut ones not."""
        with self._lock:
            return self._streams_finished

    @property
    def requests(self) -> list[dict[str, Any]]:
        """Snapshot of received chat-completions bodies, in arrival order."""
        with self._lock:
            return list(self._requests)

    def transcript(self, text: str, *, latency: float = 0.0) -> None:
        """Script the next transcription's text."""
        with self._lock:
            self._transcripts.append(AudioStep(text, latency=latency))

    def transcription_error(self, status: int, message: str = "scripted failure") -> None:
        with self._lock:
            self._transcripts.append(AudioStep(message, status))

    def speech_error(self, status: int, message: str = "scripted failure") -> None:
        with self._lock:
            self._speech.append(AudioStep(message, status))

    @property
    def audio_requests(self) -> list[AudioRequest]:
        """Snapshot of the /audio/... requests received, in arrival order."""
        with self._lock:
            return list(self._audio)

    @property
    def auth_headers(self) -> list[str | None]:
        """Snapshot of the Authorization header of each request, parallel to `requests`."""
        with self._lock:
            return list(self._auth)

    async def _serve(self, ready: threading.Event) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop_event = asyncio.Event()
        self._release = asyncio.Event()
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_get("/v1/models", self._models)
        app.router.add_post("/v1/_drain", self._drain)
        app.router.add_post("/v1/audio/transcriptions", self._transcription)
        app.router.add_post("/v1/audio/speech", self._speak)
        runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
        try:
            await runner.setup()
            # Big backlog so a burst of concurrent benchmark connections is never refused.
            await web.TCPSite(runner, _HOST, 0, backlog=1024).start()
            self.base_url = f"http://{_HOST}:{runner.addresses[0][1]}/v1"
        except BaseException as exc:
            self._startup_error = exc
            ready.set()
            await runner.cleanup()
            return
        ready.set()
        await self._stop_event.wait()
        for task in list(self._inflight):
            task.cancel()
        await runner.cleanup()

    async def _models(self, request: web.Request) -> web.Response:
        model = {"id": "fake", "object": "model", "created": 0, "owned_by": "nanomem-tests"}
        return web.json_response({"object": "list", "data": [model]})

    async def _drain(self, request: web.Request) -> web.Response:
        """The requests' sizes and the server's own busy time so far, forgotten as they are
        handed out: how a benchmark sees what was sent, and what the model's side cost, when
        the server runs in a process of its own."""
        with self._lock:
            taken, self._requests = self._requests, []
            busy, self._busy_seconds = self._busy_seconds, 0.0
            self._auth.clear()
        sizes = [{"messages": len(body.get("messages") or [])} for body in taken]
        return web.json_response({"requests": sizes, "busy_seconds": busy})

    async def _transcription(self, request: web.Request) -> web.Response:
        """OpenAI's POST /audio/transcriptions: multipart `file` and `model`; JSON `{"text"}`."""
        form = await request.post()
        upload = form.get("file")
        fields = {k: v for k, v in form.items() if isinstance(v, str)}
        if not isinstance(upload, web.FileField) or "model" not in fields:
            return _error_response(400, "file and model are required")
        data = upload.file.read()
        with self._lock:
            self._audio.append(
                AudioRequest(
                    "transcriptions",
                    fields,
                    upload.filename,
                    upload.content_type,
                    data,
                    request.headers.get("Authorization"),
                )
            )
            step = self._transcripts.popleft() if self._transcripts else None
        step = step or AudioStep(self.default_transcript)
        await asyncio.sleep(step.latency)
        if step.status >= 300:
            return _error_response(step.status, step.text)
        if fields.get("response_format") == "text":
            return web.Response(text=step.text)
        return web.json_response({"text": step.text})

    async def _speak(self, request: web.Request) -> web.Response:
        """OpenAI's POST /audio/speech: JSON `model`, `input`, `voice`; the audio's bytes."""
        body = await request.json()
        fields = {k: str(v) for k, v in body.items()}
        with self._lock:
            self._audio.append(
                AudioRequest(
                    "speech", fields, None, None, b"", request.headers.get("Authorization")
                )
            )
            step = self._speech.popleft() if self._speech else AudioStep()
        if step.status >= 300:
            return _error_response(step.status, step.text)
        if not {"model", "input", "voice"} <= fields.keys():
            return _error_response(400, "model, input and voice are required")
        kind = "audio/ogg" if fields.get("response_format") == "opus" else "audio/mpeg"
        return web.Response(body=SPEECH_FIXTURE.read_bytes(), content_type=kind)

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        task = asyncio.current_task()
        assert task is not None
        self._inflight.add(task)
        started = time.perf_counter()
        try:
            return await self._answer(request)
        finally:
            self._inflight.discard(task)
            busy = time.perf_counter() - started - request.get(_SLEPT, 0.0)
            with self._lock:
                self._busy_seconds += busy

    async def _answer(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        try:
            body = json.loads(raw)
        except ValueError:
            return _error_response(400, "request body is not valid JSON")
        if not isinstance(body, dict):
            return _error_response(400, "request body must be a JSON object")
        with self._lock:
            self._requests.append(body)
            self._auth.append(request.headers.get("Authorization"))
            step = self._script.popleft() if self._script else None
            fallback = self._fallback or echo_step
        if step is None:
            try:
                step = fallback(body)
            except Exception as exc:
                return _error_response(500, f"fallback raised {exc!r}")
        delay = step.latency + self.model_latency
        if delay > 0:
            asleep = time.perf_counter()
            await asyncio.sleep(delay)
            request[_SLEPT] = time.perf_counter() - asleep
        if step.hold_after is not None and not body.get("stream"):
            await self._hold()  # a request that does not stream: its whole answer waits
        if step.kind == "error":
            return _error_response(step.status, step.text or "", step.retry_after)
        if step.kind == "raw":
            return web.Response(
                text=step.text or "", status=step.status, content_type=step.content_type
            )

        message: dict[str, Any] = {"role": "assistant", "content": step.text}
        finish = "stop"
        if step.kind == "tool_calls":
            message["tool_calls"] = [self._call_json(*call) for call in step.calls]
            finish = "tool_calls"
        finish = step.finish or finish
        usage = step.usage or self._estimate_usage(len(raw), message)
        head = {
            "id": f"chatcmpl-{uuid.uuid4().hex[:24]}",
            "created": int(time.time()),
            "model": body.get("model", "fake"),
        }
        if body.get("stream"):
            include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
            return await self._stream(
                request, head, message, step, finish, usage if include_usage else None
            )
        choice = {"index": 0, "message": message, "finish_reason": finish}
        return web.json_response(
            {**head, "object": "chat.completion", "choices": [choice], "usage": usage}
        )

    async def _hold(self) -> None:
        """Wait for release() (a held stream's next chunk, or a whole held answer)."""
        if self._release is None:
            return
        with self._lock:
            self._held += 1
        try:
            await self._release.wait()
        finally:
            with self._lock:
                self._held -= 1
        self._release.clear()

    def _call_json(self, name: str, arguments: ToolArgs, call_id: str | None) -> dict[str, Any]:
        with self._lock:
            self._call_seq += 1
            seq = self._call_seq
        args = arguments if isinstance(arguments, str) else json.dumps(arguments)
        return {
            "id": call_id or f"call_{seq}",
            "type": "function",
            "function": {"name": name, "arguments": args},
        }

    @staticmethod
    def _estimate_usage(request_bytes: int, message: dict[str, Any]) -> dict[str, int]:
        """About four bytes a token, of the whole request (tool schemas count, as they do at
        real providers); sized from the bytes, so it costs nothing per message."""
        out = len(message["content"] or "") + sum(
            len(c["function"]["arguments"]) for c in message.get("tool_calls", [])
        )
        p, c = request_bytes // 4, out // 4
        return {"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c}

    async def _stream(
        self,
        request: web.Request,
        head: dict[str, Any],
        message: dict[str, Any],
        step: Step,
        finish: str,
        usage: dict[str, Any] | None,
    ) -> web.StreamResponse:
        """The reply as server-sent events: content deltas, then each tool call (id and name
        first, its arguments in pieces), the finish reason, and usage in a chunk of its own."""

        def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
            choice = {"index": 0, "delta": delta, "finish_reason": finish_reason}
            return {**head, "object": "chat.completion.chunk", "choices": [choice]}

        text = message["content"]
        events = [chunk({"role": "assistant", "content": "" if text is not None else None})]
        events += [chunk({"content": piece}) for piece in _pieces(text or "", step.pieces)]
        for i, call in enumerate(message.get("tool_calls", [])):
            fn = call["function"]
            first = {"name": fn["name"], "arguments": ""}
            events.append(chunk({"tool_calls": [{**call, "index": i, "function": first}]}))
            events += [
                chunk({"tool_calls": [{"index": i, "function": {"arguments": piece}}]})
                for piece in _pieces(fn["arguments"], step.pieces)
            ]
        events.append(chunk({}, finish))
        if usage is not None:
            events.append(
                {**head, "object": "chat.completion.chunk", "choices": [], "usage": usage}
            )

        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for number, event in enumerate(events):
            if number == step.cut_after:
                # The connection drops mid-reply: no finish reason, no [DONE], no last chunk.
                if request.transport is not None:
                    request.transport.abort()
                return resp
            if number == step.hold_after:
                await self._hold()
            if number and step.pause:
                await asyncio.sleep(step.pause)
            await resp.write(f"data: {json.dumps(event)}\n\n".encode())
        with self._lock:  # counted before [DONE] goes out: a client can never be ahead of it
            self._streams_finished += 1
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp


# A model that also does nanomem's memory work (Dream, consolidation summaries), so a run that
# archives and dreams for real can be checked line by line (the chaos suite uses it).

FACT_PREFIX = "- learned: history entry "
_ENTRY_RE = re.compile(r"^### entry (\d+) · (.+?) · (.+)$", re.MULTILINE)


def fact_line(cursor: int, timestamp: str, session: str) -> str:
    """The one memory line the memory-aware model adds for a history entry it was shown."""
    return f"{FACT_PREFIX}{cursor} at {timestamp} from {session}"


def _user_texts(request: dict[str, Any]) -> list[str]:
    messages = [m for m in request.get("messages") or [] if isinstance(m, dict)]
    return [_text_of(m.get("content")) for m in messages if m.get("role") == "user"]


def memory_step(request: dict[str, Any]) -> Step | None:
    """Dream's analysis (templates/dream_analyse.md.j2), Dream's edit loop (dream_edit.md.j2:
    one `append_memory` per fact, then a final text) and a consolidation summary
    (consolidate.md.j2); None for anything else, such as a chat turn."""
    users = _user_texts(request)
    if not users:
        return None
    first = users[0]  # Dream's prompt is its first user message; tool results follow it
    if "## Your task (analysis only" in first:
        facts = [fact_line(int(c), ts, s.strip()) for c, ts, s in _ENTRY_RE.findall(first)]
        return Step.reply("NEW:\n" + "\n".join(facts) if facts else "NOTHING TO CHANGE")
    if "## Analysis of the new history" in first:
        analysis = first.split("## Current memory files", 1)[0]
        facts = [line for line in analysis.splitlines() if line.startswith(FACT_PREFIX)]
        done = sum(1 for m in request["messages"] if m.get("role") == "tool")
        if done < len(facts):
            arguments = {"file": "memory/MEMORY.md", "line": facts[done]}
            return Step.tool_call("append_memory", arguments)
        return Step.reply(f"Added {len(facts)} facts to memory/MEMORY.md.")
    if "Summarise everything above" in users[-1]:
        said = [u.strip().splitlines()[-1][:160] for u in users[:-1] if u.strip()]
        return Step.reply("\n".join(f"- the person wrote: {line}" for line in said))
    return None


def memory_aware(
    chat: Callable[[dict[str, Any]], Step] = echo_step, *, latency: float = 0.0
) -> Callable[[dict[str, Any]], Step]:
    """A fallback: memory work answered at once, chat turns by `chat` after `latency` s."""

    def answer(request: dict[str, Any]) -> Step:
        if (step := memory_step(request)) is not None:
            return step
        step = chat(request)
        return replace(step, latency=step.latency + latency)

    return answer


def main() -> None:
    """Serve the echo fallback (or SchemaModel's answers) from a process of its own
    (benchmarks: the model's CPU is then not charged to the process being measured). Prints
    the base URL, then serves until killed."""
    import argparse
    import signal

    parser = argparse.ArgumentParser()
    parser.add_argument("--latency", type=float, default=0.0)
    parser.add_argument(
        "--schema-model", action="store_true", help="answer as tests/fakes/schema_model.py does"
    )
    args = parser.parse_args()
    server = FakeOpenAI(model_latency=args.latency).start()
    if args.schema_model:
        from tests.fakes.schema_model import SchemaModel

        server.set_fallback(SchemaModel())
    print(server.base_url, flush=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with contextlib.suppress(KeyboardInterrupt):
        stop.wait()
    server.stop()


if __name__ == "__main__":
    main()

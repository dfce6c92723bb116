"""Follow one Telegram message call by call, from the Bot API update to the model's `complete`.

The real gateway in-process (durable inbox, python-telegram-bot against the loopback Bot API,
a scripted model), one private message. Recorded while it travels: who created each task
(with our frames at that moment), every asyncio queue hand-off (put and get), and our frames
when the model is called. Walking back from the model call gives the path in segments, one per
task; a segment ends where the task was created or where it took the message from a queue.
Prints the frames of each segment (ours: nanomem/ and channels/) and the counts.

    python tests/benchmarks/trace_hops.py
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import _common  # before any nanomem import: repository root on sys.path, litellm offline

from nanomem.app import build_app
from nanomem.config import load_settings
from nanomem.gateway.service import Gateway
from nanomem.providers.scripted import ScriptedProvider
from tests.fakes.telegram_server import FakeTelegram

OURS = (str(_common.REPO / "nanomem"), str(_common.REPO / "channels"))
OWNER = 42


def our_frames() -> list[str]:
    """Our frames on the stack now, outermost first, as `module.function`."""
    frames, frame = [], sys._getframe(2)
    while frame is not None:
        name = frame.f_code.co_filename
        if name.startswith(OURS):
            module = Path(name).relative_to(_common.REPO).with_suffix("")
            frames.append(f"{'.'.join(module.parts)}.{frame.f_code.co_qualname}")
        frame = frame.f_back
    return frames[::-1]


@dataclass
class Trace:
    t0: float = 0.0
    created: dict[int, tuple[float, int | None, list[str]]] = field(default_factory=dict)
    puts: list[tuple[float, int, int, int | None, list[str]]] = field(default_factory=list)
    gets: list[tuple[float, int, int, int | None]] = field(default_factory=list)
    model: tuple[int | None, list[str]] | None = None
    kept: list[Any] = field(default_factory=list)  # tasks and items: their ids stay theirs


TRACE = Trace()


def current() -> int | None:
    try:
        task = asyncio.current_task()
    except RuntimeError:
        return None
    return None if task is None else id(task)


def install(loop: asyncio.AbstractEventLoop) -> None:
    def factory(loop: asyncio.AbstractEventLoop, coro: Any, **kwargs: Any) -> asyncio.Task[Any]:
        task = asyncio.Task(coro, loop=loop, **kwargs)
        TRACE.kept.append(task)
        TRACE.created[id(task)] = (time.monotonic(), current(), our_frames())
        return task

    loop.set_task_factory(factory)
    put_nowait, get_nowait = asyncio.Queue.put_nowait, asyncio.Queue.get_nowait

    def traced_put(self: asyncio.Queue[Any], item: Any) -> None:
        TRACE.kept.append(item)
        TRACE.puts.append((time.monotonic(), id(self), id(item), current(), our_frames()))
        put_nowait(self, item)

    def traced_get(self: asyncio.Queue[Any]) -> Any:
        item = get_nowait(self)
        TRACE.gets.append((time.monotonic(), id(self), id(item), current()))
        return item

    asyncio.Queue.put_nowait = traced_put  # type: ignore[method-assign]
    asyncio.Queue.get_nowait = traced_get  # type: ignore[method-assign]


class TracedModel(ScriptedProvider):
    async def complete(self, *args: Any, **kwargs: Any) -> Any:
        if TRACE.model is None:
            TRACE.model = (current(), our_frames())
        return await super().complete(*args, **kwargs)


def walk() -> list[tuple[str, list[str]]]:
    """The segments from the update to the model call, first first."""
    assert TRACE.model is not None
    segments: list[tuple[str, list[str]]] = []
    task, frames, at, how = TRACE.model[0], TRACE.model[1], time.monotonic(), "model call"
    while task is not None:
        segments.append((how, frames))
        born, creator, creator_frames = TRACE.created.get(task, (0.0, None, []))
        if born > TRACE.t0:  # a task of this message: it began where it was created
            task, frames, at, how = creator, creator_frames, born, "task created"
            continue
        # A long-lived task (a loop): it took the message from a queue, or fetched it itself.
        taken = [g for g in TRACE.gets if g[3] == task and g[0] <= at and g[0] > TRACE.t0]
        if not taken:
            break
        _, queue, item, _ = taken[-1]
        put = [p for p in TRACE.puts if p[1] == queue and p[2] == item and p[0] <= taken[-1][0]]
        if not put:
            break
        at, _, _, task, frames = put[-1]
        how = "queue hand-off"
    return segments[::-1]


async def main() -> None:
    install(asyncio.get_running_loop())
    with tempfile.TemporaryDirectory() as tmp, FakeTelegram() as fake:
        home = _common.new_home(Path(tmp))
        settings = load_settings(
            home.config,
            {
                "llm": {"model": "openai/fake"},
                "gateway": {"port": 0},
                "dream": {"enabled": False},
                "telegram": {
                    "enabled": True,
                    "token": fake.token,
                    "base_url": fake.base_url,
                    "base_file_url": fake.base_file_url,
                    "allow_from": [OWNER],
                },
            },
        )
        app = build_app(settings, home, TracedModel(), durable=True)
        gateway = Gateway.from_app(app)
        running = asyncio.create_task(gateway.run())
        await asyncio.sleep(1.5)  # polling has begun (a measurement, not a test: no deadline)
        TRACE.t0 = time.monotonic()
        fake.send_text(OWNER, "hello")
        await asyncio.to_thread(fake.wait_for_messages, OWNER, 1, 30.0)
        gateway.request_stop()
        await running
    segments = walk()
    frames = sum(len(f) for _, f in segments)
    handoffs = sum(1 for how, _ in segments if how == "queue hand-off")
    spawns = sum(1 for how, _ in segments if how == "task created")
    for number, (how, chain) in enumerate(segments, 1):
        print(f"\n{number}. up to the {how}:")
        for depth, frame in enumerate(chain):
            print(f"   {'  ' * min(depth, 12)}{frame}")
    print(f"\nour frames on the way: {frames}; queue hand-offs: {handoffs}; tasks: {spawns}")


if __name__ == "__main__":
    asyncio.run(main())

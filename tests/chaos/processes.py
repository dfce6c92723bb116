"""The real `nanomem` commands as child processes of the harness, each logging to a file of its
own, every one of them killed when the harness leaves (by any path)."""

from __future__ import annotations

import atexit
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.telegram_server import FakeTelegram

NANOMEM = [sys.executable, "-m", "nanomem"]
STOP_WAIT_S = 90.0  # a SIGTERM'd gateway gets this long (grace period and all) before SIGKILL


@dataclass(frozen=True)
class Sizes:
    """Settings that make a short run archive and dream for real: with the system prompt and
    tools at about 1,250 tokens and a turn at about 320, every turn after a chat's first
    starts a consolidation, which archives all but the last turn."""

    context_window_tokens: int = 8192
    max_tokens: int = 512
    consolidate_at: float = 0.25
    consolidate_to: float = 0.2
    keep_recent_turns: int = 1
    dream_batch: int = 20
    grace_s: float = 5.0


def home_env(home: Path, llm: FakeOpenAI, sizes: Sizes, **extra: str) -> dict[str, str]:
    """The environment every process of a run shares: one home, the loopback model."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("NANOMEM_")}
    env.update(
        NANOMEM_HOME=str(home),
        LITELLM_LOCAL_MODEL_COST_MAP="True",
        HF_HUB_OFFLINE="1",
        NANOMEM_LLM__MODEL="openai/fake",
        NANOMEM_LLM__API_BASE=llm.base_url,
        NANOMEM_LLM__API_KEY="sk-chaos-0123456789",
        NANOMEM_LLM__TIMEOUT_S="30",
        NANOMEM_LLM__CONTEXT_WINDOW_TOKENS=str(sizes.context_window_tokens),
        NANOMEM_LLM__MAX_TOKENS=str(sizes.max_tokens),
        NANOMEM_MEMORY__CONSOLIDATE_AT=f"{sizes.consolidate_at:g}",
        NANOMEM_MEMORY__CONSOLIDATE_TO=f"{sizes.consolidate_to:g}",
        NANOMEM_MEMORY__KEEP_RECENT_TURNS=str(sizes.keep_recent_turns),
        NANOMEM_DREAM__MAX_BATCH_SIZE=str(sizes.dream_batch),
        NANOMEM_DREAM__MAX_ITERATIONS=str(min(100, sizes.dream_batch + 5)),  # one append a step
        NANOMEM_GATEWAY__GRACE_S=f"{sizes.grace_s:g}",
    )
    env.update(extra)
    return env


def gateway_env(env: dict[str, str], telegram: FakeTelegram, chats: list[int]) -> dict[str, str]:
    return env | {
        "NANOMEM_TELEGRAM__ENABLED": "true",
        "NANOMEM_TELEGRAM__TOKEN": telegram.token,
        "NANOMEM_TELEGRAM__BASE_URL": telegram.base_url,
        "NANOMEM_TELEGRAM__BASE_FILE_URL": telegram.base_file_url,
        "NANOMEM_TELEGRAM__ALLOW_FROM": json.dumps(chats),
        "NANOMEM_GATEWAY__PORT": "0",
    }


@dataclass
class Child:
    name: str
    proc: subprocess.Popen[bytes]
    log: Path

    def output(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")


class Children:
    """Every process the harness started; `kill_all` runs on any exit, atexit included."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self._live: dict[int, subprocess.Popen[bytes]] = {}
        self._lock = threading.Lock()
        self._count = 0
        self._closed = False
        atexit.register(self.kill_all)

    def start(self, name: str, args: list[str], env: dict[str, str]) -> Child:
        """Start a command; RuntimeError once `kill_all` ran (a worker thread may still ask)."""
        with self._lock:
            if self._closed:
                raise RuntimeError("the run is over")
            self._count += 1
            log = self.log_dir / f"{self._count:03d}-{name}.log"
        with log.open("wb") as out:
            # A session of its own: a Ctrl-C at the harness's terminal reaches the harness only,
            # which then ends its children itself (by pid, never by name).
            proc = subprocess.Popen(
                args, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        with self._lock:
            self._live[proc.pid] = proc
        return Child(name, proc, log)

    def reap(self, child: Child, timeout: float) -> int:
        """Wait for a child to end (SIGKILL after `timeout`); its exit code, 124 if killed."""
        try:
            code = child.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            child.proc.kill()
            child.proc.wait(10)
            code = 124
        with self._lock:
            self._live.pop(child.proc.pid, None)
        return code

    def run(self, name: str, args: list[str], env: dict[str, str], timeout: float = 180) -> Child:
        """Run one command to its end; `returncode` is on `child.proc`."""
        child = self.start(name, args, env)
        self.reap(child, timeout)
        return child

    def kill_all(self) -> None:
        with self._lock:
            live, self._live, self._closed = list(self._live.values()), {}, True
        for proc in live:
            if proc.poll() is None:
                proc.kill()
            proc.wait(10)


class Gateway:
    """`nanomem gateway` on the run's home, started again and again."""

    def __init__(self, children: Children, env: dict[str, str], telegram: FakeTelegram) -> None:
        self.children, self.env, self.telegram = children, env, telegram
        self.child: Child | None = None
        self.starts = 0
        self.hung_stops = 0  # SIGTERMs that needed a SIGKILL after STOP_WAIT_S
        self.exit_codes: list[int] = []

    @property
    def running(self) -> bool:
        return self.child is not None and self.child.proc.poll() is None

    def start(self) -> None:
        self.starts += 1
        self.child = self.children.start(
            f"gateway-{self.starts:02d}", [*NANOMEM, "gateway"], self.env
        )

    def wait_polling(self, timeout: float) -> bool:
        """Until this process asked the Bot API for updates (the sign it is up)."""
        before = self.telegram.getupdates_count
        return _wait(lambda: self.telegram.getupdates_count > before or not self.running, timeout)

    def signal(self, sig: signal.Signals) -> int:
        """Send `sig` and reap the process; its exit code (-9 for a SIGKILL)."""
        child, self.child = self.child, None
        if child is None:
            return 0
        if child.proc.poll() is None:
            child.proc.send_signal(sig)
        code = self.children.reap(child, 10 if sig == signal.SIGKILL else STOP_WAIT_S)
        self.hung_stops += code == 124
        self.exit_codes.append(code)
        return code

    def logs(self) -> str:
        return "".join(
            p.read_text(encoding="utf-8", errors="replace")
            for p in sorted(self.children.log_dir.glob("*-gateway-*.log"))
        )


def _wait(done: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if done():
            return True
        time.sleep(0.05)
    return done()

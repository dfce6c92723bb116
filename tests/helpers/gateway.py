"""`nanomem gateway` in a subprocess, its stderr collected line by line, and what tests ask of
it: the sessions it stored, the texts it sent, the agent API it serves."""

from __future__ import annotations

import asyncio
import json
import re
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from nanomem.cli.onboard import onboard
from nanomem.home import Home
from nanomem.memory.session import Session, SessionStore, session_filename
from tests.conftest import NANOMEM, cli_env
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.telegram_server import FakeTelegram
from tests.helpers import WAIT_S

ALLOWED = list(range(1000, 1020))  # the Telegram users every gateway here lets in
API_KEY = "nm-api-key-for-tests-0123456789"  # the agent API's key in the tests that enable it


class GatewayProcess:
    """The real `nanomem gateway`, its stderr collected line by line; without Telegram when
    `telegram` is None (it then serves what terminal chats leave for later)."""

    def __init__(
        self,
        home: Home,
        telegram: FakeTelegram | None,
        llm: FakeOpenAI,
        *,
        command: list[str] | None = None,  # another gateway's command (tests/helpers/line_gateway)
        **env: str,
    ) -> None:
        self.home = home
        settings = {
            "NANOMEM_GATEWAY__PORT": "0",
            "NANOMEM_DREAM__ENABLED": "false",  # no scheduled run may consume scripted replies
        }
        if telegram is not None:
            settings |= {
                "NANOMEM_TELEGRAM__ENABLED": "true",
                "NANOMEM_TELEGRAM__TOKEN": telegram.token,
                "NANOMEM_TELEGRAM__BASE_URL": telegram.base_url,
                "NANOMEM_TELEGRAM__BASE_FILE_URL": telegram.base_file_url,
                "NANOMEM_TELEGRAM__ALLOW_FROM": json.dumps(ALLOWED),
            }
        self.env = cli_env(home, llm, **(settings | env))
        self.proc = subprocess.Popen(
            command or [*NANOMEM, "gateway"],
            env=self.env,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        found = self.wait_for_line(r"health at https?://[\d.]+:(\d+)/health", timeout=60)
        self.port = int(found.group(1))
        if telegram is not None:
            self.wait_for_line(r"telegram: running")

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append(line)

    def wait_for_line(self, pattern: str, timeout: float = WAIT_S) -> re.Match[str]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in list(self.lines):
                if found := re.search(pattern, line):
                    return found
            if self.proc.poll() is not None and not self._reader.is_alive():
                break
            time.sleep(0.05)
        raise AssertionError(f"no line matching {pattern!r} in:\n{''.join(self.lines)}")

    def logged(self) -> str:
        """Everything in the home's log files (what a person reading the log would see)."""
        return "".join(p.read_text(errors="replace") for p in self.home.logs.glob("*"))

    def health(self) -> tuple[int, dict[str, Any]]:
        url = f"http://127.0.0.1:{self.port}/health"
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                return response.status, json.load(response)
        except urllib.error.HTTPError as exc:
            return exc.code, json.load(exc)

    def __enter__(self) -> GatewayProcess:
        return self

    def __exit__(self, kind: type[BaseException] | None, *_: object) -> None:
        """Stopped after the block; a gateway that does not stop cleanly fails the block."""
        code = self.stop()
        if kind is None:
            assert code == 0, "".join(self.lines)

    def stop(self, sig: int | None = signal.SIGTERM, timeout: float = WAIT_S) -> int:
        """Send `sig` (None: it was sent already) and wait for the exit code."""
        if sig is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
        code = self.proc.wait(timeout)
        self._reader.join(5)
        return code


def onboarded(factory: pytest.TempPathFactory, name: str) -> Home:
    """A new home, onboarded: the home of a gateway a whole test module shares."""
    home = Home(factory.mktemp(name) / "home")
    onboard(home)
    return home


def load_session(home: Home, key: str) -> Session:
    return asyncio.run(SessionStore(home.sessions).get(key))


def texts(messages: list[dict[str, Any]]) -> list[str]:
    return [m.get("text", "") for m in messages]


def user_texts(request: dict[str, Any]) -> list[str]:
    return [str(m.get("content")) for m in request["messages"] if m.get("role") == "user"]


def post(
    gateway: GatewayProcess,
    body: bytes | None,
    key: str | None = API_KEY,
    path: str = "chat/completions",
) -> tuple[int, dict[str, Any]]:
    headers = {"Content-Type": "application/json"}
    if key is not None:
        headers["Authorization"] = f"Bearer {key}"
    request = urllib.request.Request(
        f"http://127.0.0.1:{gateway.port}/v1/{path}",
        data=body,
        headers=headers,
        method="POST" if body is not None else "GET",
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.load(response)
    except urllib.error.HTTPError as exc:
        return exc.code, json.load(exc)


def break_session(home: Home, chat: int) -> Path:
    """The chat's session file becomes a directory: every load of it raises."""
    path = home.sessions / session_filename(f"telegram:{chat}")
    path.mkdir(parents=True)
    return path


def retrying_gateway(
    home: Home, telegram: FakeTelegram, llm: FakeOpenAI, **env: str
) -> GatewayProcess:
    """A gateway that retries a failed message quickly, and parks it after three attempts."""
    settings = {"NANOMEM_AGENT__RETRY_FIRST_S": "0.3", "NANOMEM_AGENT__MAX_ATTEMPTS": "3"}
    return GatewayProcess(home, telegram, llm, **(settings | env))

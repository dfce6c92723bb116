"""Slow clients against the real `nanomem gateway`: raw sockets that send their headers a byte at
a time (slowloris), more connections than the gateway takes, and a body that stalls."""

from __future__ import annotations

import contextlib
import json
import os
import resource
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from nanomem.home import Home
from tests.conftest import NANOMEM, cli_env
from tests.fakes.openai_server import FakeOpenAI, echo_step
from tests.fakes.telegram_server import FakeTelegram
from tests.helpers import wait_until
from tests.helpers.gateway import GatewayProcess, onboarded
from tests.helpers.loopback import loopback

pytestmark = pytest.mark.slow

CAP = 120  # gateway.max_connections
TIMEOUT_S = 3.0  # gateway.read_timeout_s
KEY = "nm-slow-client-test-key-0123456789"
HEADERS = b"GET /health HTTP/1.1\r\nHost: gateway\r\n" + b"X-Slow: " + b"z" * 100_000


def closed_by_peer(sock: socket.socket) -> bool:
    try:
        return sock.recv(1) == b""
    except BlockingIOError:
        return False
    except OSError:  # reset
        return True


class Slowloris:
    """`count` connections that send their headers one byte per tick, for ever."""

    def __init__(self, port: int, count: int, *, reconnect: bool = False) -> None:
        self.port, self.reconnect = port, reconnect
        self.socks = [self._connect() for _ in range(count)]
        self.closed = 0  # connections the gateway closed
        self._sent: dict[socket.socket, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _connect(self) -> socket.socket:
        sock = socket.create_connection(("127.0.0.1", self.port))
        sock.setblocking(False)
        return sock

    def open_ones(self) -> list[socket.socket]:
        return [s for s in self.socks if s.fileno() != -1]

    def _run(self) -> None:
        while not self._stop.is_set():
            for index, sock in enumerate(list(self.socks)):
                if sock.fileno() == -1:
                    continue
                if closed_by_peer(sock):
                    sock.close()
                    self.closed += 1
                    if self.reconnect:
                        self.socks[index] = self._connect()
                    continue
                sent = self._sent.get(sock, 0)
                try:
                    sock.send(HEADERS[sent : sent + 1])
                    self._sent[sock] = sent + 1
                except OSError:
                    pass  # seen as closed at the next tick
            self._stop.wait(0.1)  # the attacker's pace, not a wait for the gateway

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)
        for sock in self.socks:
            sock.close()


@pytest.fixture(scope="module")
def servers() -> Iterator[tuple[FakeTelegram, FakeOpenAI]]:
    with loopback(echo_step) as both:
        yield both


@pytest.fixture(scope="module")
def gateway(
    servers: tuple[FakeTelegram, FakeOpenAI], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[GatewayProcess]:
    home = onboarded(tmp_path_factory, "slow")
    with GatewayProcess(
        home,
        *servers,
        NANOMEM_GATEWAY__MAX_CONNECTIONS=str(CAP),
        NANOMEM_GATEWAY__READ_TIMEOUT_S=str(TIMEOUT_S),
        NANOMEM_API__ENABLED="true",
        NANOMEM_API__KEYS=json.dumps([KEY]),
    ) as process:
        process.wait_for_line(r"api: running")
        yield process


def new_lines(gateway: GatewayProcess, since: int) -> list[str]:
    return gateway.lines[since:]


def open_descriptors(gateway: GatewayProcess) -> int:
    return len(os.listdir(f"/proc/{gateway.proc.pid}/fd"))


def test_a_flood_beyond_the_cap_never_keeps_health_out_and_slow_ones_are_closed(
    gateway: GatewayProcess,
) -> None:
    logged = len(gateway.lines)
    before = open_descriptors(gateway)
    flood = Slowloris(gateway.port, CAP + 40)
    try:
        # Newcomers take the place of the longest waiting: never more than the cap open, and
        # a quick request always gets in.
        for _ in range(3):
            assert gateway.health()[0] == 200
            assert open_descriptors(gateway) <= before + CAP
        # Still trickling, the rest are closed once their headers are overdue.
        wait_until(lambda: flood.closed == CAP + 40, TIMEOUT_S + 10, "slow clients closed")
    finally:
        flood.stop()
    status, _ = gateway.health()
    assert status == 200
    lines = new_lines(gateway, logged)
    assert len(lines) <= 2 and "Traceback" not in "".join(lines), lines


def test_health_and_telegram_keep_answering_through_a_slowloris(
    gateway: GatewayProcess, servers: tuple[FakeTelegram, FakeOpenAI]
) -> None:
    telegram = servers[0]
    logged = len(gateway.lines)
    attack = Slowloris(gateway.port, CAP + 40, reconnect=True)  # reopens what is closed
    try:
        for _ in range(3):
            status, body = gateway.health()
            assert status == 200 and body["status"] == "ok"
        telegram.send_text(1001, "still there?")
        (reply,) = telegram.wait_for_messages(1001, 1, timeout=30)
        assert reply["text"].endswith("still there?")
        wait_until(lambda: attack.closed >= CAP + 40, TIMEOUT_S + 10, "slow clients closed")
        assert gateway.health()[0] == 200
    finally:
        attack.stop()
    lines = [line for line in new_lines(gateway, logged) if "connection" in line.lower()]
    assert len(lines) <= 1, lines


def test_a_stalled_body_is_answered_408_and_closed(gateway: GatewayProcess) -> None:
    sock = socket.create_connection(("127.0.0.1", gateway.port))
    try:
        sock.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: gateway\r\n"
            b"Authorization: Bearer " + KEY.encode() + b"\r\n"
            b"Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n"
            b'{"messages": ['
        )
        sock.settimeout(TIMEOUT_S + 20)
        started = time.monotonic()
        answer = b""
        try:
            while chunk := sock.recv(65536):
                answer += chunk
        except ConnectionResetError:
            pass  # closed with the rest of the body unread
        assert answer.startswith(b"HTTP/1.1 408"), answer[:200]
        assert b"gateway.read_timeout_s" in answer
        assert time.monotonic() - started < TIMEOUT_S + 15  # closed, not held for ever
    finally:
        sock.close()


def test_a_body_trickled_in_just_under_the_timeout_is_answered_408(gateway: GatewayProcess) -> None:
    """The body's variant of slowloris: a byte every second never lets one read wait
    gateway.read_timeout_s, so a per-read timeout would hold the connection for ever
    (1,000 bytes: 17 minutes; api.max_body_mb: weeks)."""
    sock = socket.create_connection(("127.0.0.1", gateway.port))
    stop = threading.Event()

    def trickle() -> None:
        with contextlib.suppress(OSError):
            while not stop.wait(1.0):  # the attacker's pace, not a wait for the gateway
                sock.send(b" ")

    try:
        sock.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: gateway\r\n"
            b"Authorization: Bearer " + KEY.encode() + b"\r\n"
            b"Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n"
        )
        sender = threading.Thread(target=trickle, daemon=True)
        sender.start()
        sock.settimeout(TIMEOUT_S + 20)
        answer = b""
        with contextlib.suppress(ConnectionResetError, TimeoutError):
            while chunk := sock.recv(65536):
                answer += chunk
        assert answer.startswith(b"HTTP/1.1 408"), answer[:200]
        assert b"gateway.read_timeout_s" in answer
    finally:
        stop.set()
        sock.close()


def bare_gateway_env(home: Home) -> dict[str, str]:
    """The gateway with only the API: enough to start its HTTP server."""
    return cli_env(
        home,
        None,
        NANOMEM_LLM__MODEL="openai/fake",
        NANOMEM_API__ENABLED="true",
        NANOMEM_API__KEYS=json.dumps([KEY]),
        NANOMEM_GATEWAY__PORT="0",
    )


def descriptor_limit(soft: int, hard: int) -> Callable[[], None]:
    return lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_a_cap_the_descriptor_limit_cannot_hold_is_a_config_error(home: Home) -> None:
    env = bare_gateway_env(home)
    result = subprocess.run(
        [*NANOMEM, "gateway"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        preexec_fn=descriptor_limit(300, 300),  # ulimit -n 300: 256 connections would starve
    )
    assert result.returncode == 2, result.stderr
    assert "gateway.max_connections (256)" in result.stderr and "Traceback" not in result.stderr


def test_the_gateway_raises_its_soft_descriptor_limit_to_fit_the_cap(home: Home) -> None:
    env = bare_gateway_env(home)
    proc = subprocess.Popen(
        [*NANOMEM, "gateway"],
        env=env,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=descriptor_limit(300, 4096),
    )
    try:
        assert proc.stderr is not None
        for line in proc.stderr:  # ends if the gateway exits
            if "api: running" in line:
                break
        limits = Path(f"/proc/{proc.pid}/limits").read_text()
        soft = next(line for line in limits.splitlines() if line.startswith("Max open files"))
        assert int(soft.split()[3]) >= 256 + 256
    finally:
        proc.terminate()
        assert proc.wait(30) == 0

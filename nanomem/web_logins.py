"""What the home keeps for the web app's logins: the one-time codes `nanomem web-link` prints
(only their hashes, each valid ten minutes, consumed by the gateway's GET /login/<code>) and
the logins ended by a logout (refused until they would have expired anyway).

One file, web-logins.json, written whole (temp-then-rename) under the home's `web-logins`
lock by both the command and the gateway, so a link made while the gateway runs works at once.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import time
from pathlib import Path
from typing import Any

from nanomem.durable import atomic_write_text
from nanomem.home import Home
from nanomem.locks import in_thread_holding

VERSION = 1
LOCK = "web-logins"
CODE_BYTES = 24  # secrets.token_urlsafe: 192 bits, 32 characters
VALID_S = 600.0
MAX_CODES = 20  # unused codes kept; the oldest goes first
MAX_ENDED = 1000  # ended logins remembered; the soonest to expire goes first
# What token_urlsafe makes; anything else is refused before it is hashed.
CODE_SHAPE = re.compile(r"[A-Za-z0-9_-]{32}")


def _digest(code: str) -> str:
    return hashlib.sha256(code.encode()).hexdigest()


def _load(path: Path) -> dict[str, Any]:
    """The file's codes and ended logins; a missing or unreadable file holds none (a broken
    one costs at most a link to make again, so it never stops a login)."""
    empty: dict[str, Any] = {"version": VERSION, "codes": [], "ended": {}}
    try:
        state = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return empty
    if not isinstance(state, dict) or state.get("version") != VERSION:
        return empty
    codes, ended = state.get("codes"), state.get("ended")
    return {
        "version": VERSION,
        "codes": [
            c
            for c in (codes if isinstance(codes, list) else [])
            if isinstance(c, dict)
            and isinstance(c.get("sha256"), str)
            and _number(c.get("expires"))
        ],
        "ended": {
            k: v for k, v in (ended if isinstance(ended, dict) else {}).items() if _number(v)
        },
    }


def _number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _save(path: Path, state: dict[str, Any], now: float) -> None:
    state["codes"] = [c for c in state["codes"] if c["expires"] > now][-MAX_CODES:]
    ended = sorted((v, k) for k, v in state["ended"].items() if v > now)
    state["ended"] = {k: v for v, k in ended[-MAX_ENDED:]}
    atomic_write_text(path, json.dumps(state) + "\n", mode=0o600)


def new_code(home: Home, now: float | None = None) -> str:
    """A new one-time code, stored hashed; for `nanomem web-link` (blocking: takes the lock)."""
    import secrets

    code = secrets.token_urlsafe(CODE_BYTES)
    when = time.time() if now is None else now
    with home.lock(LOCK).hold_sync():
        state = _load(home.web_logins)
        state["codes"].append({"sha256": _digest(code), "expires": when + VALID_S})
        _save(home.web_logins, state, when)
    return code


def _take(path: Path, code: str, now: float) -> bool:
    state = _load(path)
    digest = _digest(code)
    found = [c for c in state["codes"] if hmac.compare_digest(c["sha256"], digest)]
    if not found:
        return False
    state["codes"] = [c for c in state["codes"] if c not in found]
    _save(path, state, now)  # used up whether it was still valid or not
    return any(c["expires"] > now for c in found)


async def consume(home: Home, code: str) -> bool:
    """Whether `code` is a valid unused one; it is used up either way."""
    if not CODE_SHAPE.fullmatch(code):
        return False
    return await in_thread_holding(home.lock(LOCK), _take, home.web_logins, code, time.time())


def _end(path: Path, session: str, expires: float, now: float) -> None:
    state = _load(path)
    state["ended"][session] = expires
    _save(path, state, now)


async def end_session(home: Home, session: str, expires: float) -> None:
    """Remember a logged-out login until `expires` (when its cookie would stop anyway)."""
    await in_thread_holding(home.lock(LOCK), _end, home.web_logins, session, expires, time.time())


async def ended_sessions(home: Home) -> set[str]:
    """The logins ended by a logout that have not expired yet."""
    state = await in_thread_holding(home.lock(LOCK), _load, home.web_logins)
    now = time.time()
    return {session for session, expires in state["ended"].items() if expires > now}

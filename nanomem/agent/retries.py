"""Messages whose handling failed inside nanomem: kept in the inbox, tried again with backoff,
parked for the owner after the last attempt. Never dropped.

The inbox holds the whole state (attempts, when the next is due, parked or not), so retries
survive a restart: one that fell due while the gateway was down runs at its start. `Retries`
hands each due message back to the channel it came from (`readmit`), which brings it in like a
replayed one, so a turn that had begun goes on from its saved state. A failed message does not
hold its chat back: the chat's later messages are answered meanwhile, and the late answer
quotes the message it answers.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from loguru import logger

from nanomem.agent.bus import InboundMessage, MessageBus
from nanomem.agent.outbound import OutboundMessage, Text
from nanomem.log import EACH, redact
from nanomem.text.escapes import strip_escapes
from nanomem.text.plural import plural

if TYPE_CHECKING:
    from nanomem.agent.inbox import Pending

GROWTH = 6  # 10 s, 1 min, 6 min, 36 min, then hourly: a passing fault is over by then
RETRY_CAP_S = 3600.0
SWEEP_S = 5.0  # how soon a retry the owner asked for from another process is noticed
RETRYING = "Something went wrong on my side with this message; I will try again shortly."
GIVEN_UP = "Something went wrong on my side with this message; the owner has been told."
PARKED = (
    "A message could not be answered after {attempts} and is parked (kept, not tried again): "
    "{where}, {when}, “{preview}” (last error: {error}; details in the log). "
    "Retry it with `nanomem inbox retry {seq}` or drop it with `nanomem inbox drop {seq}`."
)

# Hand a failed message back to its channel; False when the channel cannot take it now.
Readmit = Callable[["Pending"], Awaitable[bool]]


def retry_delay(attempts: int, *, max_attempts: int = 5, first_s: float = 10.0) -> float | None:
    """Seconds until the next attempt after `attempts` failed ones; None: park it."""
    if attempts >= max_attempts:
        return None
    return float(min(first_s * GROWTH ** (attempts - 1), RETRY_CAP_S))


def first_words(text: str, width: int = 60) -> str:
    """One line of a message for a listing, never a secret, nor a control sequence: it is a
    person's words, shown on the owner's terminal by `nanomem status` and `nanomem inbox`."""
    line = " ".join(strip_escapes(redact(text)).split())
    return line if len(line) <= width else line[: width - 1] + "…"


def _received(p: Pending) -> str:
    return p.received_at.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")


def parked_line(p: Pending) -> str:
    """One parked message, for `nanomem status` and `nanomem inbox`."""
    return (
        # Stripped again: a preview stored before first_words stripped sequences.
        f"#{p.seq} {p.channel}:{p.chat} · {_received(p)} · “{strip_escapes(p.preview)}” · "
        f"{plural(p.attempts, 'attempt')} · {p.last_error or 'unknown error'}"
    )


def parked_notice(p: Pending) -> str:
    """What the owner is told, once, when a message is parked."""
    return PARKED.format(
        attempts=plural(p.attempts, "attempt"),
        where=f"{p.channel}:{p.chat}",
        when=_received(p),
        preview=p.preview,
        error=p.last_error or "unknown",
        seq=p.seq,
    )


async def count_attempt(bus: MessageBus, msg: InboundMessage) -> bool:
    """Count an attempt at an inbox message before it starts (`MessageBus.begin`); False when
    its attempts were used up without one ever ending (a crash, a kill, a hang): it is parked
    instead, the person told here, the owner by the gateway, as for any parked message."""
    if msg.seq is None:
        return True
    try:
        parked = await bus.begin(msg.seq, first_words(msg.content))
    except Exception:  # the inbox busy past its timeout, say: answered all the same
        logger.exception("could not count an attempt at message {}", msg.seq)
        return True
    if parked is None:
        return True
    logger.bind(**{EACH: True}).error(
        "message {} ({}) is parked: none of its {} ever ended (a crash, a kill or a hang); "
        "`nanomem inbox retry {}` tries it again",
        msg.seq,
        msg.session_key,
        plural(parked.attempts, "attempt"),
        msg.seq,
    )
    note = replace(OutboundMessage.answering(msg, Text(GIVEN_UP, "error")), seq=None)
    await bus.publish_outbound(note)
    return False


async def keep_for_retry(
    bus: MessageBus, msg: InboundMessage, exc: BaseException
) -> OutboundMessage | None:
    """Record a failed attempt at an inbox message; the note for the person, the first time
    only (None after that: they were told). The error's text stays in the log."""
    assert msg.seq is not None
    kept = await record_failure(bus, msg.seq, exc, msg.content, msg.session_key)
    if kept is not None and kept.attempts != 1:
        return None
    text = RETRYING if kept is None or kept.parked_at is None else GIVEN_UP
    # Not the message's answer (seq None): delivering it leaves the message in the inbox.
    return replace(OutboundMessage.answering(msg, Text(text, "error")), seq=None)


async def record_failure(
    bus: MessageBus, seq: int, exc: BaseException, text: str, where: str, *, park: bool = False
) -> Pending | None:
    """Count a failed attempt in the inbox (parked at once with `park`: trying again would
    fail the same way) and log what follows; the message as it is now (None when that could
    not be recorded: it then stays for the next start)."""
    try:
        kept = await bus.failed(seq, type(exc).__name__, first_words(text), park=park)
    except Exception:
        logger.exception("could not record a failed attempt at message {} ({})", seq, where)
        return None
    if kept is None:
        return None
    if kept.parked_at is not None:  # once per message: never folded into a count
        logger.bind(**{EACH: True}).error(
            "message {} ({}) is parked after {}: `nanomem inbox retry {}` tries it again",
            seq,
            where,
            plural(kept.attempts, "failed attempt"),
            seq,
        )
    elif kept.next_at is not None:
        logger.warning(
            "message {} ({}) failed ({}); attempt {} at {}",
            seq,
            where,
            type(exc).__name__,
            kept.attempts + 1,
            kept.next_at.isoformat(timespec="seconds"),
        )
    return kept


class Retries:
    """Hands each failed message back to its channel when its next attempt is due."""

    def __init__(
        self, bus: MessageBus, readmit: dict[str, Readmit], sweep_s: float = SWEEP_S
    ) -> None:
        self.bus, self.readmit, self.sweep_s = bus, readmit, sweep_s
        # (seq, attempts) handed in: not again until that attempt has failed too.
        self._handed: set[tuple[int, int]] = set()

    async def run(self) -> None:
        await self._report()
        while True:
            try:
                wait = await self.sweep()
            except Exception:  # the inbox busy, say: looked at again shortly
                logger.exception("retries: could not read the inbox")
                wait = self.sweep_s
            # asyncio.timeout, not wait_for: wait_for in 3.11 can swallow a cancellation that
            # arrives as the event is set, and then the gateway's stop waits for ever.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(wait):
                    await self.bus.retry_wake.wait()
            self.bus.retry_wake.clear()

    async def _report(self) -> None:
        """At start, say what waits: a parked message waits for the owner."""
        assert self.bus.inbox is not None
        try:
            parked = len(await asyncio.to_thread(self.bus.inbox.parked))
        except Exception:
            return  # the sweep says why
        if parked:
            logger.warning(
                "inbox: {} parked after failing (`nanomem inbox` lists them)",
                "1 message is" if parked == 1 else f"{parked} messages are",
            )

    async def sweep(self) -> float:
        """Hand in what is due; seconds until the next is (at most `sweep_s`)."""
        assert self.bus.inbox is not None
        waiting = await asyncio.to_thread(self.bus.inbox.retrying)
        self._handed &= {(p.seq, p.attempts) for p in waiting}
        now, wait = datetime.now(UTC), self.sweep_s
        for pending in waiting:
            key = (pending.seq, pending.attempts)
            due = pending.next_at or now
            if key in self._handed or (readmit := self.readmit.get(pending.channel)) is None:
                continue  # under way; or its channel does not run here (kept for one that does)
            if due > now:
                wait = min(wait, (due - now).total_seconds())
                continue
            try:
                # Said once taken: a channel still starting refuses it, and the sweep when it
                # runs hands it in again (the line was written twice at every start).
                if await readmit(pending):
                    self._handed.add(key)
                    logger.info(
                        "retrying message {} ({}:{}), attempt {}",
                        pending.seq,
                        pending.channel,
                        pending.chat,
                        pending.attempts + 1,
                    )
            except Exception as exc:  # it cannot even be read back: an attempt like any other
                logger.exception("retries: {} could not take {}", pending.channel, pending.seq)
                where = f"{pending.channel}:{pending.chat}"
                await record_failure(self.bus, pending.seq, exc, pending.preview, where)
        return max(wait, 0.01)

"""What a replayed message finds in its session: where it was saved, and how far its turn got
before a crash (an answer to send again, or a turn to go on with)."""

from __future__ import annotations

from typing import Any

REPLAY_SEARCH = 2000  # a replayed message is among the last messages of its session


def find_message(messages: list[dict[str, Any]], message_id: str) -> int | None:
    """Where a user message with this inbox id was saved, if it was."""
    for index in range(len(messages) - 1, max(-1, len(messages) - 1 - REPLAY_SEARCH), -1):
        message = messages[index]
        if message.get("role") == "user" and message.get("in") == message_id:
            return index
    return None


def turn_after(messages: list[dict[str, Any]], at: int) -> list[dict[str, Any]]:
    """What the turn that began at `at` wrote: its messages up to the next user message
    (another process may have held turns of its own in the session since)."""
    end = next(
        (i for i in range(at + 1, len(messages)) if messages[i].get("role") == "user"),
        len(messages),
    )
    return messages[at + 1 : end]


def finished_reply(messages: list[dict[str, Any]], at: int) -> str | None:
    """The final answer of the turn that began at `at`, when it had ended before a crash.
    What was said in the chat between turns (`aside`: a background task's result) is not."""
    turn = [m for m in turn_after(messages, at) if not m.get("aside")]
    last = turn[-1] if turn else None
    if last is None or last.get("role") != "assistant" or last.get("tool_calls"):
        return None
    if last.get("failed"):
        return None  # a failed attempt: worth another
    return str(last.get("content") or "")

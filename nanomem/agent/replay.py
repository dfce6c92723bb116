"""What a replayed message finds in its session: where it was saved, and how far its turn got
before a crash (an answer to send again, or a turn to go on with)."""

from __future__ import annotations

from typing import Any

REPLAY_SEARCH = 2000  # a replayed message is among the last messages of its session


def newest_first(messages: list[dict[str, Any]]) -> range:
    """The indexes of the session's last REPLAY_SEARCH messages, newest first: how far back
    anything a turn looks for is searched, so a turn's work does not grow with its session."""
    return range(len(messages) - 1, max(-1, len(messages) - 1 - REPLAY_SEARCH), -1)


def find_message(messages: list[dict[str, Any]], message_id: str) -> int | None:
    """Where a user message with this inbox id was saved, if it was."""
    for index in newest_first(messages):
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
    # A turn paused on an API client's tools is not finished either: it waits (open_pause).
    if last is None or last.get("role") != "assistant" or last.get("tool_calls"):
        return None
    if last.get("failed"):
        return None  # a failed attempt: worth another
    return str(last.get("content") or "")


def last_user(messages: list[dict[str, Any]]) -> int | None:
    """Where the session's last user message is (within the search bound)."""
    for index in newest_first(messages):
        if messages[index].get("role") == "user":
            return index
    return None


def open_pause(messages: list[dict[str, Any]]) -> int | None:
    """Where the assistant message of a turn paused on an API client's tools is, while some
    call it waits for has no result: it is the session's last message but for tool results
    and asides, so this looks at the end only."""
    for index in newest_first(messages):
        message = messages[index]
        if message.get("role") == "tool" or message.get("aside"):
            continue
        if message.get("role") == "assistant" and waiting(messages, index):
            return index
        return None
    return None


def waiting(messages: list[dict[str, Any]], at: int) -> list[str]:
    """The ids of the client's calls the assistant message at `at` still waits for."""
    waits = messages[at].get("waits") or ()
    if not waits:
        return []
    answered = {m.get("tool_call_id") for m in messages[at + 1 :] if m.get("role") == "tool"}
    return [call_id for call_id in waits if call_id not in answered]

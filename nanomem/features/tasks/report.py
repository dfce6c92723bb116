"""What a chat is told of its background tasks: the result line, and the /tasks list."""

from __future__ import annotations

from datetime import UTC, datetime

from nanomem.features.tasks.records import TaskRecord
from nanomem.text.plural import plural


def tokens(count: int) -> str:
    """12.4k tokens, 850 tokens, 1.2M tokens."""
    if count < 1000:
        return plural(count, "token")
    if count < 1_000_000:
        return f"{count / 1000:.1f}k tokens"
    return f"{count / 1_000_000:.1f}M tokens"


def age(since: str, now: datetime | None = None) -> str:
    """How long ago an ISO time was, in its largest unit or two: 35 s, 4 min, 2 h 5 min."""
    try:
        then = datetime.fromisoformat(since)
    except ValueError:
        return "?"
    seconds = max(0, int(((now or datetime.now(UTC)) - then).total_seconds()))
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min"
    hours, minutes = divmod(seconds // 60, 60)
    if hours < 48:
        return f"{hours} h {minutes} min" if minutes else f"{hours} h"
    return f"{hours // 24} days"


def named(record: TaskRecord) -> str:
    return f"task {record.id} ({record.label})" if record.label else f"task {record.id}"


def cost(record: TaskRecord) -> str:
    return f"{plural(record.steps, 'step')} · {tokens(record.tokens)}"


def report(record: TaskRecord, max_iterations: int) -> str:
    """What the chat is told when the task ends (and what its transcript keeps of it)."""
    who = named(record)
    if record.state == "done":
        return f"{who} done · {cost(record)}\n\n{record.result}".rstrip()
    if record.state == "limit":
        return (
            f"{who} stopped at the step limit (agent.max_iterations = {max_iterations}) without "
            f"a result · {cost(record)}; ask again with a narrower job, or raise the limit"
        )
    if record.state == "failed":
        return f"{who} failed: {record.result} · {cost(record)}"
    if record.state == "stopped":
        return f"{who} was stopped (/stop) · {cost(record)}"
    return f"{who} was interrupted by a restart; ask again to rerun it"


def in_order(records: list[TaskRecord]) -> list[TaskRecord]:
    """Running tasks first, then the ones that ended, newest first (/tasks, the web page)."""
    running = [r for r in records if r.running]
    ended = sorted((r for r in records if not r.running), key=lambda r: r.ended_at, reverse=True)
    return running + ended


def state_of(record: TaskRecord) -> str:
    return {"limit": "step limit"}.get(record.state, record.state)


def listing(records: list[TaskRecord], now: datetime | None = None) -> str:
    """/tasks: the chat's running tasks, then the ones that ended, newest first."""
    if not records:
        return "No background tasks in this chat. The agent starts one for a long job."
    lines = []
    for record in in_order(records):
        if record.running:
            lines.append(
                f"{record.id}  running {age(record.started_at, now)} · "
                f"{plural(record.steps, 'step')}  {record.label}"
            )
        else:
            lines.append(
                f"{record.id}  {state_of(record)} {age(record.ended_at, now)} ago · "
                f"{cost(record)}  {record.label}"
            )
    if any(record.running for record in records):
        lines += ["", "/stop <id> stops a running one."]
    return "\n".join(lines)

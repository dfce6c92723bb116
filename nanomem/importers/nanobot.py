"""nanobot (github.com/HKUDS/nanobot): `~/.nanobot/workspace` holds SOUL.md, USER.md, AGENTS.md,
memory/MEMORY.md, memory/history.jsonl (`{"cursor", "timestamp": "YYYY-MM-DD HH:MM", "content"}`
per line; older installs: memory/HISTORY.md) and skills/<name>/SKILL.md; cron jobs are in
workspace/cron/jobs.json (older installs: ~/.nanobot/cron/jobs.json), `{"version", "jobs": [...]}`
with camelCase fields (nanobot/cron/types.py, nanobot/cron/service.py, nanobot/agent/memory.py,
nanobot/config/paths.py)."""

from __future__ import annotations

import re
from datetime import datetime
from pathlib import Path
from typing import Any

from nanomem.importers.found import (
    MAX_HISTORY,
    Found,
    Job,
    PastEntry,
    iso,
    iso_from_epoch,
    minutes_of,
    not_imported,
    obj,
    read_jobs,
    read_memory,
    read_skills,
    string,
    text_field,
)
from nanomem.importers.source import SourceTree, clean
from nanomem.text import untrusted_json

NAME = "nanobot"
DEFAULT_PATH = Path("~/.nanobot")
_LEGACY_ENTRY = re.compile(r"^\[(\d{4}-\d{2}-\d{2} \d{2}:\d{2})\]\s*", re.M)
INSTRUCTIONS = (
    "operating instructions written for {project}'s tools; copy what still applies by hand"
)


def read(tree: SourceTree) -> Found:
    found = Found(NAME, tree.root, skipped=tree.skipped)  # one list: what the tree refused too
    ws = "workspace" if tree.is_dir("workspace") else ""
    at = (lambda rel: f"{ws}/{rel}") if ws else (lambda rel: rel)
    read_memory(tree, found, at("SOUL.md"), "SOUL.md")
    read_memory(tree, found, at("USER.md"), "USER.md")
    read_memory(tree, found, at("memory/MEMORY.md"), "memory/MEMORY.md")
    for name in ("AGENTS.md", "HEARTBEAT.md", "TOOLS.md"):
        not_imported(tree, found, at(name), INSTRUCTIONS.format(project=NAME))
    if tree.exists(at("memory/history.jsonl")):
        _history_jsonl(tree, found, at("memory/history.jsonl"))
    elif tree.exists(at("memory/HISTORY.md")):
        _history_md(tree, found, at("memory/HISTORY.md"))
    read_skills(tree, found, at("skills"))
    for rel in dict.fromkeys([at("cron/jobs.json"), "cron/jobs.json"]):
        if tree.exists(rel):
            jobs(tree, found, rel)
            break
    not_imported(tree, found, at("sessions"), "chat transcripts: their summaries are in history")
    return found


def _history_jsonl(tree: SourceTree, found: Found, rel: str) -> None:
    data = tree.read_bytes_of(rel, 32 * 1024 * 1024)
    if data is None:
        return
    unreadable = 0
    for line in data.splitlines():
        if not line.strip():
            continue
        if len(found.history) >= MAX_HISTORY:
            found.skip(rel, f"past {MAX_HISTORY} entries; the rest not imported")
            break
        try:
            entry = untrusted_json.loads(line)
        except (ValueError, UnicodeDecodeError):
            entry = None
        when = _time(entry.get("timestamp")) if isinstance(entry, dict) else None
        content = entry.get("content") if isinstance(entry, dict) else None
        if when is None or not isinstance(content, str):
            unreadable += 1
            continue
        if content.strip():
            found.history.append(PastEntry(rel, when, clean(content).strip()))
    if unreadable:
        found.skip(rel, f"{unreadable} lines without a time and text; those not imported")


def _history_md(tree: SourceTree, found: Found, rel: str) -> None:
    text = tree.read_text(rel, 32 * 1024 * 1024)
    if not text:
        return
    starts = list(_LEGACY_ENTRY.finditer(text))
    for this, following in zip(starts, [*starts[1:], None], strict=True):
        end = following.start() if following else len(text)
        content = text[this.end() : end].strip()
        when = _time(this.group(1))
        if content and when and len(found.history) < MAX_HISTORY:
            found.history.append(PastEntry(rel, when, content))


def _time(text: object) -> str | None:
    if not isinstance(text, str):
        return None
    try:
        return iso(datetime.strptime(text.strip()[:16], "%Y-%m-%d %H:%M"))
    except ValueError:
        return None


def jobs(tree: SourceTree, found: Found, rel: str) -> None:
    read_jobs(tree, found, rel, _job)


def _job(found: Found, item: dict[str, Any], name: str, source: str) -> None:
    payload = obj(item.get("payload"))
    schedule = obj(item.get("schedule"))
    text = clean(text_field(payload, "message"))
    if item.get("enabled") is False:
        found.skip(source, "switched off there; not imported")
        return
    if not text:
        found.skip(source, "has no message for the agent; nothing to schedule")
        return
    key = text_field(item, "id") or name
    kind = schedule.get("kind")
    if kind == "at":
        when = iso_from_epoch(_ms(schedule, "atMs", "at_ms"))
        if when is None:
            found.skip(source, "a one-time job without a readable time")
            return
        found.jobs.append(Job(source, key, text, at=when))
    elif kind == "every":
        minutes = minutes_of(schedule.get("everyMs", schedule.get("every_ms")))
        if minutes is None:
            found.skip(source, "repeats at an interval that is not whole minutes")
            return
        found.jobs.append(Job(source, key, text, every_minutes=minutes))
    elif kind == "cron" and string(schedule.get("expr")):
        zone = string(schedule.get("tz"))
        found.jobs.append(Job(source, key, text, cron=string(schedule.get("expr")), timezone=zone))
    else:
        found.skip(source, f"a schedule of a kind nanomem has no form for ({str(kind)[:40]})")


def _ms(schedule: dict[str, Any], *names: str) -> float | None:
    for name in names:
        value = schedule.get(name)
        if isinstance(value, int | float) and not isinstance(value, bool):
            return value / 1000
    return None

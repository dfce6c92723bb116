"""OpenClaw (github.com/openclaw/openclaw): the state folder `~/.openclaw` holds the workspace
(`workspace/`: AGENTS.md, SOUL.md, USER.md, IDENTITY.md, TOOLS.md, HEARTBEAT.md, MEMORY.md,
memory/YYYY-MM-DD.md daily notes, skills/), managed skills (`skills/`), cron jobs
(`cron/jobs.json`, `{"version": 1, "jobs": [...]}` as src/cron/types.ts types them) and session
transcripts (`agents/<id>/sessions/`) (docs/concepts/agent-workspace.md,
docs/automation/cron-jobs.md)."""

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
    iso_from_text,
    minutes_of,
    not_imported,
    obj,
    read_jobs,
    read_memory,
    read_skills,
    string,
    text_field,
)
from nanomem.importers.nanobot import INSTRUCTIONS
from nanomem.importers.source import SourceTree, clean

NAME = "openclaw"
DEFAULT_PATH = Path("~/.openclaw")
_DAILY = re.compile(r"(\d{4}-\d{2}-\d{2})\.md")


def read(tree: SourceTree) -> Found:
    found = Found(NAME, tree.root, skipped=tree.skipped)  # one list: what the tree refused too
    ws = "workspace" if tree.is_dir("workspace") else ""
    at = (lambda rel: f"{ws}/{rel}") if ws else (lambda rel: rel)
    read_memory(tree, found, at("SOUL.md"), "SOUL.md")
    read_memory(tree, found, at("IDENTITY.md"), "SOUL.md")
    read_memory(tree, found, at("USER.md"), "USER.md")
    read_memory(tree, found, at("MEMORY.md"), "memory/MEMORY.md")
    for name in ("AGENTS.md", "TOOLS.md", "HEARTBEAT.md", "BOOT.md", "BOOTSTRAP.md"):
        not_imported(tree, found, at(name), INSTRUCTIONS.format(project="OpenClaw"))
    _notes(tree, found, at("memory"))
    read_skills(tree, found, at("skills"))
    if ws:
        read_skills(tree, found, "skills")  # managed skills, installed for every agent
        jobs(tree, found, "cron/jobs.json")
        not_imported(
            tree, found, "agents", "session transcripts; what lasts is in MEMORY.md and the notes"
        )
    return found


def _notes(tree: SourceTree, found: Found, rel: str) -> None:
    """Daily notes become history entries of their day; other notes go to memory/MEMORY.md."""
    notes = f"{rel}/YYYY-MM-DD.md"
    for name in tree.listdir(rel):
        path = f"{rel}/{name}"
        if daily := _DAILY.fullmatch(name):
            if len(found.history) >= MAX_HISTORY:
                found.skip(path, f"past {MAX_HISTORY} history entries; not imported")
                continue
            text = tree.read_text(path)
            day = datetime.strptime(daily.group(1), "%Y-%m-%d")
            if text and text.strip():
                found.history.append(PastEntry(path, iso(day), text.strip(), group=notes))
        elif name.endswith(".md") and not name.startswith("."):
            read_memory(tree, found, path, "memory/MEMORY.md")


def jobs(tree: SourceTree, found: Found, rel: str) -> None:
    read_jobs(tree, found, rel, _job)


def _job(found: Found, item: dict[str, Any], name: str, source: str) -> None:
    payload = obj(item.get("payload"))
    schedule = obj(item.get("schedule"))
    if item.get("enabled") is False:
        found.skip(source, "switched off there; not imported")
        return
    if payload.get("kind") == "systemEvent":
        text = text_field(payload, "text")
    elif payload.get("kind") == "agentTurn":
        text = text_field(payload, "message")
    else:  # a command, a webhook call: nanomem's schedules only give the agent a message
        kind = str(payload.get("kind"))[:40]
        found.skip(source, f"runs a {kind!r} job, not a message to the agent; kept as data only")
        return
    text, key = clean(text), text_field(item, "id") or name
    if not text:
        found.skip(source, "has no message for the agent; nothing to schedule")
        return
    rule = schedule.get("kind")
    if rule == "at" and (when := iso_from_text(schedule.get("at"))):
        found.jobs.append(Job(source, key, text, at=when))
    elif rule == "every" and (minutes := minutes_of(schedule.get("everyMs"))):
        found.jobs.append(Job(source, key, text, every_minutes=minutes))
    elif rule == "cron" and string(schedule.get("expr")):
        zone = string(schedule.get("tz"))
        found.jobs.append(Job(source, key, text, cron=string(schedule.get("expr")), timezone=zone))
    else:
        found.skip(source, "a schedule nanomem has no form for (or not readable)")

"""What a source holds, as the project readers (nanobot.py, openclaw.py, hermes.py) find it:
memory texts, skills, history entries and scheduled jobs, each named by where it came from.
Nothing here knows the home it will go to (that is plan.py)."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from nanomem.importers.source import Skipped, SourceTree

MAX_SKILLS = 200
MAX_SKILL_FILES = 50  # files of one skill (SKILL.md, references, scripts)
MAX_SKILL_DEPTH = 3
MAX_HISTORY = 20_000  # entries from one source
MAX_JOBS = 500
SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")

Target = Literal["SOUL.md", "USER.md", "memory/MEMORY.md"]


@dataclass(frozen=True)
class MemoryText:
    target: Target
    source: str  # where in PATH
    text: str


@dataclass(frozen=True)
class SkillFolder:
    name: str
    source: str
    files: dict[str, bytes]  # path within the skill → content


@dataclass(frozen=True)
class PastEntry:
    source: str
    timestamp: str  # the original time, ISO 8601 with an offset
    content: str
    kind: Literal["summary", "raw"] = "summary"
    group: str = ""  # how the dry run counts it (a folder of daily notes); default: source


@dataclass(frozen=True)
class Job:
    """A scheduled job we can represent: exactly one of at, every_minutes or cron."""

    source: str  # e.g. cron/jobs.json "morning news"
    key: str  # its id in the source: the imported schedule's id is derived from it
    text: str
    at: str | None = None
    every_minutes: int | None = None
    cron: str | None = None
    timezone: str = ""


@dataclass
class Found:
    project: str
    root: Path
    memory: list[MemoryText] = field(default_factory=list)
    skills: list[SkillFolder] = field(default_factory=list)
    history: list[PastEntry] = field(default_factory=list)
    jobs: list[Job] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)

    def skip(self, source: str, reason: str) -> None:
        self.skipped.append(Skipped(source, reason))


def read_memory(tree: SourceTree, found: Found, rel: str, target: Target) -> None:
    text = tree.read_text(rel)
    if text is not None and text.strip():
        found.memory.append(MemoryText(target, rel, text.strip()))


def not_imported(tree: SourceTree, found: Found, rel: str, reason: str) -> None:
    if tree.exists(rel):
        found.skip(rel, reason)


def read_skills(
    tree: SourceTree,
    found: Found,
    rel: str,
    *,
    depth: int = 1,
    bundled: frozenset[str] = frozenset(),
) -> None:
    """Every folder with a SKILL.md below `rel`, up to `depth` folders down (Hermes groups
    skills in category folders)."""
    for name in tree.listdir(rel):
        here = f"{rel}/{name}"
        if name.startswith(".") or not tree.is_dir(here):
            continue
        if tree.exists(f"{here}/SKILL.md"):
            if name in bundled:
                found.skip(here, "a skill bundled with the project, not one of yours")
            elif len(found.skills) >= MAX_SKILLS:
                found.skip(here, f"past {MAX_SKILLS} skills; not imported")
            elif not SAFE_NAME.fullmatch(name):
                found.skip(here, "its name is not a plain folder name; not imported")
            elif (skill := _skill(tree, found, here, name)) is not None:
                found.skills.append(skill)
        elif depth > 1:
            read_skills(tree, found, here, depth=depth - 1, bundled=bundled)


def _skill(tree: SourceTree, found: Found, rel: str, name: str) -> SkillFolder | None:
    files: dict[str, bytes] = {}
    pending = [""]
    while pending:
        inner = pending.pop()
        for entry in tree.listdir(f"{rel}/{inner}".rstrip("/")):
            path = f"{inner}/{entry}".lstrip("/")
            if entry.startswith(".") or not SAFE_NAME.fullmatch(entry):
                continue  # caches, editor files, names we would not write
            if tree.is_dir(f"{rel}/{path}"):
                if path.count("/") + 1 < MAX_SKILL_DEPTH:
                    pending.append(path)
                continue
            if len(files) >= MAX_SKILL_FILES:
                found.skip(f"{rel}/{path}", f"past {MAX_SKILL_FILES} files in one skill")
                continue
            data = tree.read_bytes_of(f"{rel}/{path}")
            if data is not None:
                files[path] = data
    if "SKILL.md" not in files:
        found.skip(rel, "its SKILL.md could not be read; the skill is not imported")
        return None
    return SkillFolder(name, rel, files)


def iso(moment: datetime) -> str:
    """ISO 8601 with an offset; a naive time is read as the machine's local time."""
    if moment.tzinfo is None:
        moment = moment.astimezone()
    return moment.isoformat(timespec="seconds")


def iso_from_text(text: object) -> str | None:
    """An ISO 8601 (or `YYYY-MM-DD HH:MM`) time as ISO 8601 with an offset; None if it is none."""
    if not isinstance(text, str) or len(text) > 64:
        return None
    try:
        return iso(datetime.fromisoformat(text.strip().replace("Z", "+00:00")))
    except ValueError:
        return None


def iso_from_epoch(seconds: object) -> str | None:
    if isinstance(seconds, bool) or not isinstance(seconds, int | float):
        return None
    try:
        return iso(datetime.fromtimestamp(seconds, UTC))
    except (OverflowError, OSError, ValueError):
        return None


def minutes_of(milliseconds: object) -> int | None:
    """A whole number of minutes from a millisecond interval; None when it is not one."""
    if isinstance(milliseconds, bool) or not isinstance(milliseconds, int):
        return None
    minutes, rest = divmod(milliseconds, 60_000)
    return minutes if minutes >= 1 and not rest else None


def obj(value: object) -> dict[str, Any]:
    """A JSON object from the source, or an empty one when it is anything else."""
    return value if isinstance(value, dict) else {}


def string(value: object) -> str:
    return value if isinstance(value, str) else ""


def text_field(data: dict[str, object], *names: str) -> str:
    for name in names:
        value = data.get(name)
        if isinstance(value, str) and value.strip():
            return value.strip()
    return ""


# One job of a source's jobs file: its JSON object, its name, and how the plan names it
# ("cron/jobs.json 'tea'").
JobReader = Callable[[Found, dict[str, Any], str, str], None]


def read_jobs(
    tree: SourceTree, found: Found, rel: str, job: JobReader, *, bare_list: bool = False
) -> None:
    """Hand each job of the JSON file `rel` (`{"jobs": [...]}`, or a bare list where the
    source writes one) to `job`, at most MAX_JOBS; what is not a job is skipped, said."""
    body = tree.read_json(rel)
    if body is None:
        return
    items = body.get("jobs") if isinstance(body, dict) else body if bare_list else None
    if not isinstance(items, list):
        found.skip(rel, 'not an object with a "jobs" list; no job imported')
        return
    for place, item in enumerate(items[:MAX_JOBS], 1):
        if not isinstance(item, dict):
            found.skip(f"{rel} #{place}", "not a JSON object")
            continue
        name = text_field(item, "name", "id")[:80] or f"#{place}"
        job(found, item, name, f"{rel} {name!r}")
    if len(items) > MAX_JOBS:
        found.skip(rel, f"{len(items) - MAX_JOBS} jobs past the first {MAX_JOBS} not imported")

"""An import planned against a home: what each found item becomes there (a section appended to a
memory file, a skill folder, history entries, schedules), what is already there from an earlier
run of the same import, and what is left out and why. Planning only reads; apply.py writes."""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from nanomem.features.schedules import Schedule, ScheduleError
from nanomem.importers.found import Found, Job, SkillFolder
from nanomem.importers.source import Skipped, clean
from nanomem.memory import Files, HistoryStore, NewEntry

_NAME_LINE = re.compile(r"(?m)^name:.*$")
_UNSAFE = re.compile(r"[^\w./-]|\.\.")  # in a workspace file's name
_BREAKS = re.compile(r"[\r\n\v\f\x85\u2028\u2029]+")
# An imported text longer than this (about 5,000 tokens) would weigh on every prompt: it is kept
# as a workspace file instead, and the memory file points to it.
MAX_PROMPT_CHARS = 20_000
MAX_ENTRY_CHARS = 16_000  # a longer history entry is kept as parts, as the Consolidator's are


@dataclass(frozen=True)
class Row:
    source: str
    target: str
    note: str = ""


@dataclass(frozen=True)
class SkillCopy:
    source: str
    name: str  # its folder in workspace/skills/
    files: dict[str, bytes]


@dataclass
class ImportPlan:
    project: str
    root: Path
    session: str  # the chat imported schedules belong to
    memory: Files = field(default_factory=dict)  # only the files that change
    files: dict[str, bytes] = field(default_factory=dict)  # workspace files (long texts)
    skills: list[SkillCopy] = field(default_factory=list)
    history: list[NewEntry] = field(default_factory=list)
    schedules: list[Schedule] = field(default_factory=list)
    rows: dict[str, list[Row]] = field(default_factory=dict)  # section → what goes where
    already: list[Row] = field(default_factory=list)  # brought in by an earlier run
    skipped: list[Skipped] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # what applying it did beyond the rows

    @property
    def empty(self) -> bool:
        return not (self.memory or self.files or self.skills or self.history or self.schedules)

    def add_row(self, section: str, row: Row) -> None:
        self.rows.setdefault(section, []).append(row)


def heading(project: str, source: str) -> str:
    """The heading an imported text goes under; also how a second run knows it is there."""
    return f"## Imported from {project}: {_line(clean(source))}"


def make_plan(
    found: Found,
    current: Files,
    workspace: Path,
    history: HistoryStore,
    session: str,
    scheduled: set[str],
) -> ImportPlan:
    """`current`: the home's memory files now; `scheduled`: the ids in schedules.json."""
    plan = ImportPlan(found.project, found.root, session, skipped=list(found.skipped))
    _memory(plan, found, current, workspace)
    _skills(plan, found, workspace / "skills")
    _history(plan, found, history)
    _schedules(plan, found, scheduled)
    if not plan.empty:
        _record(plan, current)
    return plan


MOVE_RECORD = "memory/MEMORY.md"


def _record(plan: ImportPlan, current: Files) -> None:
    """One line in memory/MEMORY.md that says the move happened: the agent learns that history
    and skills came from elsewhere, and every import makes a memory version, whose restore
    undoes all of it (the skills and schedules too, importers/undo.py)."""
    parts = [
        _count(len(plan.skills), "skill", "skills"),
        _count(len(plan.schedules), "schedule", "schedules"),
        _count(sum(e.part == 1 for e in plan.history), "history entry", "history entries"),
    ]
    brought = ", ".join(p for p in parts if p) or "memory files"
    day = datetime.now(UTC).astimezone().strftime("%Y-%m-%d")
    line = f"- {day}: moved in from {plan.project} ({brought})."
    before = (plan.memory.get(MOVE_RECORD) or current.get(MOVE_RECORD) or b"").decode(
        "utf-8", "replace"
    )
    plan.memory[MOVE_RECORD] = f"{before.rstrip()}\n\n{line}\n".lstrip("\n").encode("utf-8")
    plan.add_row("memory", Row("(a line recording the move)", MOVE_RECORD, line[2:]))


def trailer(plan: ImportPlan) -> str:
    """What the import brought beside the memory files, as trailers of its memory version:
    how a restore of that version finds what to take away with it."""
    lines = [f"Imported-from: {plan.project} {clean(str(plan.root)).replace(chr(10), ' ')}"]
    if plan.skills:
        lines.append("Imported-skills: " + " ".join(s.name for s in plan.skills))
    if plan.schedules:
        lines.append("Imported-schedules: " + " ".join(s.id for s in plan.schedules))
    if plan.files:
        lines.append("Imported-files: " + json.dumps(sorted(plan.files), ensure_ascii=False))
    return "\n".join(lines)


def _memory(plan: ImportPlan, found: Found, current: Files, workspace: Path) -> None:
    texts = {
        rel: (content or b"").decode("utf-8", errors="replace") for rel, content in current.items()
    }
    for piece in found.memory:
        title = heading(found.project, piece.source)
        text = texts.get(piece.target, "")
        if title in text.splitlines():
            plan.already.append(Row(piece.source, piece.target))
            continue
        body = piece.text
        if len(body) > MAX_PROMPT_CHARS:
            rel = f"imported/{found.project}/{_UNSAFE.sub('_', piece.source)}"
            data = f"{piece.text}\n".encode()
            there = _workspace_file(workspace, rel)
            if there is not None and there != data:
                reason = (
                    f"too long for the prompt, and the workspace has another {rel}; not imported"
                )
                plan.skipped.append(Skipped(piece.source, reason))
                continue
            if there is None:
                plan.files[rel] = data
                note = f"too long for every prompt ({len(body):,} characters): kept whole"
                plan.add_row("memory", Row(piece.source, f"workspace/{rel}", note))
            body = (
                f"The full text ({len(body):,} characters, too long for every prompt) is in "
                f"the workspace at {rel}: read it with read_file when it matters."
            )
        had = (current.get(piece.target) or b"").decode("utf-8", errors="replace")
        kept = f" after what it had ({len(had.splitlines())} lines, kept)" if had.strip() else ""
        texts[piece.target] = f"{text.rstrip()}\n\n{title}\n\n{body}\n".lstrip("\n")
        plan.memory[piece.target] = texts[piece.target].encode("utf-8")
        plan.add_row("memory", Row(piece.source, piece.target, f"appended under “{title}”{kept}"))


def _skills(plan: ImportPlan, found: Found, skills_dir: Path) -> None:
    if skills_dir.is_symlink():  # a shell command may have planted it: never written through
        reason = "the home's workspace/skills is a link, not a folder; no skill copied"
        plan.skipped += [Skipped(skill.source, reason) for skill in found.skills]
        return
    taken = {p.name for p in skills_dir.iterdir()} if skills_dir.is_dir() else set()
    for skill in found.skills:
        for name in (skill.name, f"{skill.name}-{found.project}"):
            if name in taken and _ours(skills_dir, name) in (
                skill.files["SKILL.md"],
                _renamed(skill, name),
            ):
                plan.already.append(Row(skill.source, f"skills/{name}"))
                break
            if name in taken:
                continue
            taken.add(name)
            files = skill.files | {"SKILL.md": _renamed(skill, name)}
            note = "" if name == skill.name else f"renamed: the home has a skill {skill.name}"
            plan.skills.append(SkillCopy(skill.source, name, files))
            plan.add_row("skills", Row(skill.source, f"skills/{name}", note))
            break
        else:
            plan.skipped.append(
                Skipped(
                    skill.source,
                    f"the home has skills {skill.name} and "
                    f"{skill.name}-{found.project} already; not copied",
                )
            )


def _ours(skills_dir: Path, name: str) -> bytes | None:
    """The home's SKILL.md of that name, read as the skills are (no link followed)."""
    return _workspace_file(skills_dir, f"{name}/SKILL.md")


def _workspace_file(root: Path, rel: str) -> bytes | None:
    """root/rel as the file tools read it; None when absent. A link (a shell command may plant
    one) reads as a file unlike any we would write."""
    from nanomem.tools import ToolError, read_text_below

    try:
        text = read_text_below(root, rel, 1 << 22)
    except ToolError:
        return b"\0a link or not a plain file"
    return None if text is None else text.encode("utf-8")


def _renamed(skill: SkillFolder, name: str) -> bytes:
    """SKILL.md with its front matter's name set to the folder's, so a renamed copy is not
    listed under the name of the skill it would otherwise shadow."""
    data = skill.files["SKILL.md"]
    if name == skill.name:
        return data
    text = data.decode("utf-8", errors="replace")
    if text.startswith("---") and (end := text.find("\n---", 3)) > 0:
        front = _NAME_LINE.sub(f"name: {name}", text[:end], count=1)
        return (front + text[end:]).encode("utf-8")
    return data


def _history(plan: ImportPlan, found: Found, history: HistoryStore) -> None:
    """Each entry as our entries are kept (parts of MAX_ENTRY_CHARS), with a `ref` made from
    its time and text: how a second run knows it is there, whatever masking changed in it."""
    if not found.history:
        return
    earlier = {e.ref for e in history.iter_backwards() if e.imported == found.project}
    counts: dict[str, list[str]] = {}
    repeated = 0
    session = f"import:{found.project}"
    for entry in found.history:
        pieces = _pieces(entry.content, MAX_ENTRY_CHARS)
        mark = hashlib.sha256(f"{entry.timestamp}\n{entry.content}".encode()).hexdigest()[:16]
        if f"import:{mark}" in earlier:
            repeated += 1
            continue
        plan.history += [
            NewEntry(
                session,
                piece,
                entry.kind,
                ref=f"import:{mark}",
                part=number,
                parts=len(pieces),
                timestamp=entry.timestamp,
                imported=found.project,
            )
            for number, piece in enumerate(pieces, 1)
        ]
        counts.setdefault(entry.group or entry.source, []).append(entry.timestamp)
    for source, stamps in counts.items():
        first, last = min(stamps)[:10], max(stamps)[:10]
        span = first if first == last else f"{first} … {last}"
        row = Row(source, "memory/history.jsonl", f"{_entries(len(stamps))}, {span}")
        plan.add_row("history", row)
    if repeated:
        plan.already.append(Row(f"{_entries(repeated)} of history", "memory/history.jsonl"))


def _count(count: int, one: str, more: str) -> str:
    return "" if not count else f"{count} {one if count == 1 else more}"


def _pieces(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


def _entries(count: int) -> str:
    return _count(count, "entry", "entries")


def _schedules(plan: ImportPlan, found: Found, scheduled: set[str]) -> None:
    now = datetime.now(UTC)
    for job in found.jobs:
        schedule_id = (
            "imp-" + hashlib.sha256(f"{found.project}:{job.key}".encode()).hexdigest()[:12]
        )
        if schedule_id in scheduled:
            plan.already.append(Row(job.source, "schedules.json"))
            continue
        try:
            schedule = _schedule(job, schedule_id, plan.session, now)
        except ScheduleError as exc:
            plan.skipped.append(Skipped(job.source, f"cannot be scheduled here: {exc}"))
            continue
        if schedule is None:
            plan.skipped.append(Skipped(job.source, "a one-time job whose time has passed"))
            continue
        scheduled.add(schedule_id)
        plan.schedules.append(schedule)
        plan.add_row("schedules", Row(job.source, plan.session, schedule.describe()))


def _schedule(job: Job, schedule_id: str, session: str, now: datetime) -> Schedule | None:
    data = {
        "id": schedule_id,
        "session": session,
        "text": job.text,
        "created_at": now.isoformat(timespec="seconds"),
        "timezone": job.timezone,
        "at": job.at,
        "every_minutes": job.every_minutes,
        "cron": job.cron,
    }
    schedule = Schedule.from_dict({k: v for k, v in data.items() if v is not None}, now)
    if schedule.at is not None and datetime.fromisoformat(schedule.at) <= now:
        return None
    return schedule


SECTIONS = {
    "memory": "Memory files (one memory version; `nanomem memory restore ID` undoes it)",
    "skills": "Skills (→ workspace/skills/)",
    "history": "History (→ memory/history.jsonl, marked imported, with their own times)",
    "schedules": "Schedules (→ schedules.json)",
}


def describe(plan: ImportPlan, *, applied: bool) -> str:
    """For a terminal: each item on one line (names from the source may hold line breaks; the
    caller strips control sequences)."""
    lines = [f"Import from {plan.project} at {_line(str(plan.root))}"]
    for section, title in SECTIONS.items():
        if rows := plan.rows.get(section):
            lines += ["", f"{title}:", *(_row(r) for r in rows)]
    if plan.already:
        lines += ["", "Already imported by an earlier run (left as they are):"]
        lines += [_row(Row(r.source, r.target)) for r in plan.already]
    if plan.skipped:
        lines += ["", "Not imported:"]
        lines += [f"  {_line(s.source)}: {_line(s.reason)}" for s in plan.skipped]
    if plan.notes and applied:
        lines += ["", *plan.notes]
    if plan.empty:
        lines += ["", "Nothing new to import."]
    elif not applied:
        lines += ["", "Dry run: nothing was changed. Run again with --apply to import."]
    return "\n".join(lines)


def _row(row: Row) -> str:
    note = f" ({_line(row.note)})" if row.note else ""
    return f"  {_line(row.source)} → {_line(row.target)}{note}"


def _line(text: str) -> str:
    return _BREAKS.sub(" ", text)

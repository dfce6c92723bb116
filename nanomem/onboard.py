"""The home folder: config.toml, workspace/ (a copy of workspace-template/), sessions/, logs/."""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from nanomem.durable import atomic_write_text
from nanomem.gitstore import GitStore
from nanomem.locks import FileLock
from nanomem.private import make_private
from nanomem.templates import Templates, bundled_dir


@dataclass(frozen=True)
class Home:
    root: Path

    @property
    def config(self) -> Path:
        return self.root / "config.toml"

    @property
    def workspace(self) -> Path:
        return self.root / "workspace"

    @property
    def sessions(self) -> Path:
        return self.root / "sessions"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def chat_history(self) -> Path:
        return self.root / "chat_history"

    @property
    def memory_git(self) -> Path:
        """Versions of the memory files; outside the workspace, so it never collides with a
        git repository the workspace may sit in, and the agent's tools cannot reach it."""
        return self.root / "memory.git"

    @property
    def dream_state(self) -> Path:
        return self.root / "dream.json"

    @property
    def inbox(self) -> Path:
        """Messages the gateway received and has not answered yet (SQLite)."""
        return self.root / "inbox.sqlite3"

    @property
    def dream_journal(self) -> Path:
        """A Dream run's finished edits, until they are applied, committed and consumed."""
        return self.root / "dream-journal.json"

    @property
    def schedules(self) -> Path:
        """What the chats asked to happen later (nanomem/schedules.py)."""
        return self.root / "schedules.json"

    @property
    def history_index(self) -> Path:
        """The full-text index of memory/history.jsonl (derived; rebuilt when missing)."""
        return self.root / "index" / "history.sqlite3"

    @property
    def locks(self) -> Path:
        """Lock files shared by every process on this home; outside the workspace, so the
        agent's file tools can never replace one."""
        return self.root / "locks"

    def lock(self, name: str) -> FileLock:
        return FileLock(self.locks / f"{name}.lock")


@dataclass
class OnboardReport:
    created: list[Path] = field(default_factory=list)
    kept: list[Path] = field(default_factory=list)
    tightened: list[Path] = field(default_factory=list)  # were readable by others


def onboard(
    home: Home, workspace: Path | None = None, *, model: str = "", api_key: str = ""
) -> OnboardReport:
    """Create what is missing; never touch a file that already exists."""
    report = OnboardReport()
    for folder in (home.root, home.sessions, home.logs):
        folder.mkdir(parents=True, exist_ok=True)
    home.root.chmod(0o700)
    if home.config.exists():
        report.kept.append(home.config)
    else:
        text = Templates().render("config.toml.j2", model=model, api_key=api_key) + "\n"
        atomic_write_text(home.config, text, mode=0o600)
        report.created.append(home.config)
    target = workspace or home.workspace
    source = bundled_dir("workspace-template")
    for src in sorted(source.rglob("*")):
        dest = target / src.relative_to(source)
        if src.is_dir():
            dest.mkdir(parents=True, exist_ok=True)
        elif dest.exists():
            report.kept.append(dest)
        else:
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, dest)
            report.created.append(dest)
    GitStore(home.memory_git, target, lock=home.lock("memory")).ensure()  # the first version
    report.tightened = make_private(home)
    return report


def set_config_value(path: Path, section: str, key: str, toml_value: str) -> None:
    """Set `key` under `[section]` in place, keeping the file's comments and mode."""
    lines = path.read_text(encoding="utf-8").splitlines() if path.exists() else []
    assignment = re.compile(rf"^\s*#?\s*{re.escape(key)}\s*=")
    current = None
    header_at = None
    for index, line in enumerate(lines):
        stripped = line.strip()
        if stripped.startswith("[") and stripped.endswith("]"):
            current = stripped.strip("[] ")
            if current == section:
                header_at = index
            continue
        if current == section and assignment.match(line):
            lines[index] = f"{key} = {toml_value}"
            break
    else:
        if header_at is None:
            lines += ["", f"[{section}]", f"{key} = {toml_value}"]
        else:
            lines.insert(header_at + 1, f"{key} = {toml_value}")
    atomic_write_text(path, "\n".join(lines) + "\n", mode=0o600)

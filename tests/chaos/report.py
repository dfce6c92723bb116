"""A chaos run's figures, the targets of issue 10 they are held to, and the printed table."""

from __future__ import annotations

from dataclasses import dataclass, field

COLUMNS = (
    ("scenario", "scenario"),
    ("kills", "kills (SIGKILL)"),
    ("terms", "terms (SIGTERM)"),
    ("sent", "sent"),
    ("acknowledged", "acked"),
    ("answered", "answered"),
    ("lost", "lost"),
    ("duplicated", "dup replies"),
    ("order_violations", "order violations"),
    ("files_checked", "files checked"),
    ("files_unreadable", "files unreadable"),
    ("fsck", "git fsck"),
    ("duplicated_lines", "dup memory lines"),
    ("skipped_entries", "skipped entries"),
    ("session_faults", "session faults"),
    ("dream_after", "Dream after"),
    ("seed", "seed"),
)


@dataclass
class Report:
    scenario: str
    seed: int = 0
    kills: int = 0
    terms: int = 0
    sent: int = 0
    acknowledged: int = 0
    answered: int = 0
    lost: int = 0  # acknowledged and never answered
    unacknowledged: int = 0  # still unconfirmed at Telegram when the run ended
    duplicated: int = 0  # replies beyond the first to one message
    order_violations: int = 0
    notices: int = 0  # "please send your last message again" replies
    files_checked: int = 0
    files_unreadable: int = 0
    fsck_clean: bool = False
    duplicated_lines: int = 0
    history_entries: int = 0
    skipped_entries: int = 0
    session_faults: int = 0
    dream_after: str = "not run"
    dream_runs: int = 0  # multi: `nanomem dream` runs beside the gateway
    dream_kills: int = 0  # of those, SIGKILLed at a random instant
    dream_refused: int = 0  # of those, answered "Dream is already running" (another one was)
    dream_failures: int = 0  # any other bad exit; the first lines of each are in the notes
    cli_failures: int = 0  # multi: `chat -m` turns that did not exit 0
    notes: list[str] = field(default_factory=list)
    run_dir: str = ""

    @property
    def fsck(self) -> str:
        return "clean" if self.fsck_clean else "ERRORS"

    def failures(self) -> list[str]:
        """Each target of issue 10 this run missed, in words."""
        missed = []
        if self.lost:
            missed.append(f"{self.lost} acknowledged messages were never answered")
        if self.unacknowledged:
            missed.append(f"{self.unacknowledged} messages were never taken from Telegram")
        if self.order_violations:
            missed.append(f"{self.order_violations} replies came out of their chat's order")
        if self.duplicated > self.kills:
            missed.append(f"{self.duplicated} duplicated replies for {self.kills} SIGKILLs")
        if self.files_unreadable:
            missed.append(f"{self.files_unreadable} files do not load")
        if not self.fsck_clean:
            missed.append("git fsck --strict found errors in memory.git")
        if self.duplicated_lines:
            missed.append(f"{self.duplicated_lines} duplicated lines in the memory files")
        if self.skipped_entries:
            missed.append(f"{self.skipped_entries} history entries Dream passed left no fact")
        if self.session_faults:
            missed.append(f"{self.session_faults} session faults (order, interleaving, lost turns)")
        if self.dream_after != "ok":
            missed.append(f"Dream after the run: {self.dream_after}")
        return missed

    def row(self) -> list[str]:
        return [str(getattr(self, name)) for name, _ in COLUMNS]

    def details(self) -> str:
        lines = [
            f"[{self.scenario}] unacknowledged {self.unacknowledged}, restart notices "
            f"{self.notices}, history entries {self.history_entries}, dream runs beside "
            f"{self.dream_runs} ({self.dream_kills} SIGKILLed, {self.dream_refused} refused as "
            f"another ran, {self.dream_failures} failed), "
            f"chat -m failures "
            f"{self.cli_failures}"
        ]
        lines += [f"  missed: {line}" for line in self.failures()]
        lines += [f"  note: {line}" for line in self.notes]
        if self.run_dir:
            lines.append(f"  home and logs kept in {self.run_dir}")
        return "\n".join(lines)


def table(reports: list[Report]) -> str:
    """A Markdown table, one row per run."""
    heads = [title for _, title in COLUMNS]
    rows = [heads, *(r.row() for r in reports)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(heads))]

    def line(cells: list[str]) -> str:
        return "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)) + " |"

    rule = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    return "\n".join([line(heads), rule, *(line(r) for r in rows[1:])])

"""README.md and docs/: every relative link and #anchor resolves (as GitHub makes anchors), every
reference page opens with its contents, and the tables that must be whole are whole: every
setting in docs/configuration.md, every security test in docs/security.md's attack table."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import BaseModel

from nanomem.config import Settings
from tests.helpers import transcripts

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"(?<!!)\[(?:[^\]`]|`[^`]*`)*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^\s*```")
# Pages that were here before the reference moved to docs/, and keep their own form.
CONTRACTS = {"channels.md", "features.md"}


def prose(text: str) -> list[tuple[int, str]]:
    """The page's lines outside code blocks, numbered from 1, inline code blanked."""
    lines, inside = [], False
    for number, line in enumerate(text.split("\n"), 1):
        if FENCE.match(line):
            inside = not inside
        elif not inside:
            lines.append((number, line))
    return lines


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"<[^>]+>", "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    seen: dict[str, int] = {}
    for _, line in prose(page.read_text(encoding="utf-8")):
        if heading := re.match(r"^#{1,6} (.+?)\s*#*\s*$", line):
            base = slug(heading.group(1))
            seen[base] = seen.get(base, -1) + 1
            seen.setdefault(f"{base}-{seen[base]}" if seen[base] else base, 0)
    return set(seen)


def test_the_readme_fits_in_250_lines() -> None:
    assert len((ROOT / "README.md").read_text(encoding="utf-8").splitlines()) <= 250


@pytest.mark.slow
def test_the_transcripts_are_what_the_terminal_draws() -> None:
    """Each `<!-- transcript: NAME -->` block, as a real `nanomem chat` draws it now."""
    assert transcripts.main(["--check"]) == 0, "run .venv/bin/python -m tests.helpers.transcripts"


def test_slugs_are_githubs() -> None:
    assert slug("Attacks the suite replays (`tests/security/`)") == (
        "attacks-the-suite-replays-testssecurity"
    )
    assert slug("/why: where a memory came from") == "why-where-a-memory-came-from"
    assert slug("The agent API (OpenAI-compatible)") == "the-agent-api-openai-compatible"


def test_every_relative_link_and_anchor_resolves() -> None:
    broken = []
    for page in PAGES:
        for number, line in prose(page.read_text(encoding="utf-8")):
            for target in LINK.findall(re.sub(r"`[^`]*`", "``", line)):
                if re.match(r"^[a-z]+:", target):  # https:, mailto:
                    continue
                path, _, anchor = target.partition("#")
                file = (page.parent / path).resolve() if path else page
                where = f"{page.relative_to(ROOT)}:{number}: {target}"
                if not file.exists():
                    broken.append(f"{where} (no such file)")
                elif anchor and file.suffix == ".md" and anchor not in anchors(file):
                    broken.append(f"{where} (no such heading)")
    assert broken == []


def test_every_reference_page_starts_with_a_summary_and_its_contents() -> None:
    for page in PAGES[1:]:
        if page.name in CONTRACTS:
            continue
        text = page.read_text(encoding="utf-8")
        title, summary, contents = text.split("\n\n")[:3]
        assert title.startswith("# ") and summary and not summary.startswith("#"), page.name
        assert contents == "**Contents**", page.name
        listed = re.findall(r"\]\(#([^)]+)\)", text.split("\n\n")[3])
        sections = [slug(h) for h in re.findall(r"^## (.+)$", text, re.M)]
        assert listed[: len(sections)] and set(sections) <= set(listed), page.name


def settings() -> list[str]:
    names = []
    for section, model in Settings.model_fields.items():
        assert model.annotation is not None
        for key, field in model.annotation.model_fields.items():  # type: ignore[union-attr]
            nested = field.annotation
            if isinstance(nested, type) and issubclass(nested, BaseModel):
                names += [f"{section}.{key}.{inner}" for inner in nested.model_fields]
            elif key == "servers":  # mcp.servers.<name>.*: one row per key of a server
                continue
            else:
                names.append(f"{section}.{key}")
    return names


def test_the_settings_table_lists_every_setting() -> None:
    text = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    rows = set(re.findall(r"^\| `([\w.<>]+)` \|", text, re.M))
    missing = [name for name in settings() if name not in rows]
    assert missing == []
    assert any(row.startswith("mcp.servers.<name>.") for row in rows)


def test_the_attack_table_names_every_security_test() -> None:
    text = (ROOT / "docs" / "security.md").read_text(encoding="utf-8")
    table = text[text.index("## Attacks the suite replays") :]
    named = set(re.findall(r"`(?:tests/security/)?(test_\w+\.py)`", table))
    tests = {path.name for path in (ROOT / "tests" / "security").glob("test_*.py")}
    assert sorted(tests - named) == []


def test_the_service_unit_passes_systemd_analyze(tmp_path: Path) -> None:
    """The unit docs/running-as-a-service.md writes, checked by systemd itself (its ExecStart
    pointed at this venv's nanomem, as `%h` is the reader's home and not this test's)."""
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed here")
    text = (ROOT / "docs" / "running-as-a-service.md").read_text(encoding="utf-8")
    unit = re.search(r"<<'UNIT'\n(.*?)\nUNIT\n", text, re.S)
    assert unit is not None
    assert "ExecStart=%h/.local/bin/nanomem gateway" in unit.group(1)
    nanomem = Path(sys.executable).parent / "nanomem"
    file = tmp_path / "nanomem.service"
    file.write_text(unit.group(1).replace("%h/.local/bin/nanomem", str(nanomem)) + "\n")
    done = subprocess.run(
        [analyze, "verify", str(file)], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0 and "nanomem.service" not in done.stderr, done.stderr

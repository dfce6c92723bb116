"""Skills: workspace/skills/<name>/SKILL.md; the prompt lists them, `read_skill` reads one."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

from loguru import logger
from pydantic import Field

from nanomem.tools import Tool, ToolError, read_only_tool, read_text_below


@dataclass(frozen=True)
class Skill:
    name: str
    description: str
    path: Path


def parse_front_matter(text: str) -> dict[str, str]:
    """The `key: value` lines between leading `---` fences (the subset SKILL.md files use)."""
    lines = text.splitlines()
    if not lines or lines[0].strip() != "---":
        return {}
    meta: dict[str, str] = {}
    for line in lines[1:]:
        if line.strip() == "---":
            return meta
        key, sep, value = line.partition(":")
        if sep and key.strip():
            meta[key.strip()] = value.strip().strip("\"'")
    return {}


class Skills:
    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def all(self) -> list[Skill]:
        if not self.directory.is_dir():
            return []
        found = []
        for skill_file in sorted(self.directory.glob("*/SKILL.md")):
            if (text := self._text(skill_file)) is None:
                continue
            meta = parse_front_matter(text)
            name = meta.get("name") or skill_file.parent.name
            found.append(Skill(name, meta.get("description", ""), skill_file))
        return found

    def _text(self, skill_file: Path) -> str | None:
        """Read as the file tools read (no link, no hard link): a link a shell command planted
        must not bring the file it points to (config.toml, say) to the model."""
        relative = skill_file.relative_to(self.directory.parent)
        try:
            return read_text_below(self.directory.parent, str(relative))
        except ToolError as exc:
            logger.warning("skills: {} is left out: {}", relative, exc)
            return None

    def tools(self) -> list[Tool]:
        return [Tool.from_function(self.read_skill)]

    @read_only_tool
    def read_skill(
        self, name: Annotated[str, Field(description="The skill's name as listed")]
    ) -> str:
        """Read the full instructions of one skill listed in the system prompt."""
        for skill in self.all():
            if skill.name == name or skill.path.parent.name == name:
                return self._text(skill.path) or ""
        known = ", ".join(s.name for s in self.all()) or "none"
        raise ToolError(f"no skill named {name!r}; available: {known}")

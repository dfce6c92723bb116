"""Moving a person in from another agent (`nanomem import nanobot|openclaw|hermes PATH`): one
reader per project finds what its folder holds (found.py), plan.py decides where each piece goes
in the home, apply.py writes it. The source is untrusted input throughout (source.py)."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from nanomem.importers.found import Found
    from nanomem.importers.source import SourceTree

PROJECTS = ("nanobot", "openclaw", "hermes")


def reader(project: str) -> tuple[Path, Callable[[SourceTree], Found]]:
    """The project's usual home and its reader."""
    module = importlib.import_module(f"nanomem.importers.{project}")
    return module.DEFAULT_PATH, module.read

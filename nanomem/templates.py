"""Jinja2 templates: bundled prompts, overridable by a same-named file in workspace/templates/."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from jinja2 import Environment

_PACKAGE_DIR = Path(__file__).resolve().parent


def bundled_dir(name: str) -> Path:
    """A top-level data folder: in the wheel (`_bundled/`), or beside the package in a checkout."""
    for candidate in (_PACKAGE_DIR / "_bundled" / name, _PACKAGE_DIR.parent / name):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"nanomem data folder {name!r} is missing from the installation")


class Templates:
    def __init__(self, override_dir: Path | None = None) -> None:
        self.override_dir = override_dir
        self._overridden: dict[str, bool] = {}
        self._env: Environment | None = None

    @property
    def env(self) -> Environment:
        """Built on first use: jinja2 is not needed before the first prompt is rendered."""
        if self._env is None:
            from jinja2 import ChoiceLoader, Environment, FileSystemLoader, StrictUndefined

            loaders = [FileSystemLoader(str(bundled_dir("templates")))]
            if self.override_dir is not None:
                loaders.insert(0, FileSystemLoader(str(self.override_dir)))
            self._env = Environment(
                loader=ChoiceLoader(loaders),
                undefined=StrictUndefined,
                keep_trailing_newline=False,
                trim_blocks=True,
                lstrip_blocks=True,
                autoescape=False,
            )
        return self._env

    def render(self, name: str, **context: Any) -> str:
        if self.override_dir is not None:
            # Jinja re-checks a cached template's own file only; notice an override that a
            # person added (or removed) while nanomem runs.
            overridden = (self.override_dir / name).is_file()
            if self._overridden.setdefault(name, overridden) != overridden:
                self._overridden[name] = overridden
                if self.env.cache is not None:
                    self.env.cache.clear()
        return self.env.get_template(name).render(**context).strip()

    def names(self) -> list[str]:
        return sorted(self.env.list_templates())

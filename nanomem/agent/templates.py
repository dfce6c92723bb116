"""Jinja2 templates: bundled prompts, overridable by a same-named file in workspace/templates/.

Every template is data, never code: the workspace is written by the model, so templates render
in Jinja's immutable sandbox (no `__globals__`, no `__init__`, no mutating calls), and an
override that fails for any reason falls back to the bundled template with a log line.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from jinja2 import Environment

_PACKAGE_DIR = Path(__file__).resolve().parent.parent  # nanomem/


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
        self._bundled_env: Environment | None = None
        self._reported: set[tuple[str, str]] = set()

    @property
    def env(self) -> Environment:
        """Built on first use: jinja2 is not needed before the first prompt is rendered."""
        if self._env is None:
            self._env = _sandbox(self.override_dir)
        return self._env

    @property
    def bundled(self) -> Environment:
        if self._bundled_env is None:
            self._bundled_env = _sandbox(None) if self.override_dir is not None else self.env
        return self._bundled_env

    def render(self, name: str, **context: Any) -> str:
        if self.override_dir is None:
            return self.env.get_template(name).render(**context).strip()
        # Jinja re-checks a cached template's own file only; notice an override that a
        # person added (or removed) while nanomem runs.
        overridden = (self.override_dir / name).is_file()
        if self._overridden.setdefault(name, overridden) != overridden:
            self._overridden[name] = overridden
            if self.env.cache is not None:
                self.env.cache.clear()
        if not overridden:
            return self.bundled.get_template(name).render(**context).strip()
        try:
            return self.env.get_template(name).render(**context).strip()
        except Exception as exc:  # hostile or broken: never a traceback, never code run
            self._report(name, exc)
            return self.bundled.get_template(name).render(**context).strip()

    def _report(self, name: str, exc: Exception) -> None:
        from loguru import logger  # only on this path: the chat prompt does not wait for it

        assert self.override_dir is not None
        problem = f"{type(exc).__name__}: {exc}"
        if (name, problem) not in self._reported:
            self._reported.add((name, problem))
            logger.warning(
                "template {} cannot be used ({}); the bundled one is used instead",
                self.override_dir / name,
                problem[:300],
            )

    def names(self) -> list[str]:
        """The prompts; not the web app's pages (templates/web/: channels/web/render.py)."""
        return sorted(n for n in self.bundled.list_templates() if not n.startswith("web/"))


def _sandbox(override_dir: Path | None) -> Environment:
    from jinja2 import BaseLoader, ChoiceLoader, FileSystemLoader, FunctionLoader, StrictUndefined
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    loaders: list[BaseLoader] = [FileSystemLoader(str(bundled_dir("templates")))]
    if override_dir is not None:
        loaders.insert(0, FunctionLoader(functools.partial(_override, override_dir)))
    return ImmutableSandboxedEnvironment(
        loader=ChoiceLoader(loaders),
        undefined=StrictUndefined,
        keep_trailing_newline=False,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,
    )


def _override(folder: Path, name: str) -> tuple[str, str, Callable[[], bool]] | None:
    """An override's source, read as the file tools read (no link, no hard link): a link a
    shell command planted must not render config.toml into a prompt. A link raises ToolError,
    which `render` reports before it uses the bundled template."""
    from nanomem.tools import read_text_below

    text = read_text_below(folder.parent, f"{folder.name}/{name}")
    if text is None:
        return None
    path = folder / name
    changed = _stamp(path)
    return text, str(path), lambda: _stamp(path) == changed


def _stamp(path: Path) -> tuple[int, int] | None:
    try:
        info = path.lstat()
    except OSError:
        return None
    return info.st_mtime_ns, info.st_size

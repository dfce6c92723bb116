"""Checks made at start, before any model call, of what settings alone cannot validate: model
names no client can place, and a workspace that is not there."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from nanomem.config import ConfigError, Settings, source_of
from nanomem.providers import model_name_problem


def check_model_names(settings: Settings, config: Path, overrides: dict[str, Any]) -> None:
    """Raise ConfigError saying what to write for a model name no client can place."""
    for section, key, name in (
        ("llm", "model", settings.llm.model),
        ("dream", "model_override", settings.dream.model_override or ""),
    ):
        if problem := model_name_problem(name, settings.llm.api_base, f"{section}.{key}"):
            where = source_of(config, overrides, section, key)
            raise ConfigError(f"config error: {problem} ({where})")


def missing_workspace(settings: Settings, config: Path, overrides: dict[str, Any]) -> Path | None:
    """The configured workspace when it does not exist (a typo more often than a wish);
    ConfigError when something else is in its place."""
    configured = settings.agent.workspace
    # Resolved as app.workspace_of does; importing nanomem.app here would delay the prompt.
    if configured is None or (path := configured.expanduser().resolve()).is_dir():
        return None
    if path.exists():
        where = source_of(config, overrides, "agent", "workspace")
        raise ConfigError(f"config error: agent.workspace: {path} is not a folder ({where})")
    return path


def workspace_missing_error(path: Path, config: Path, overrides: dict[str, Any]) -> ConfigError:
    where = source_of(config, overrides, "agent", "workspace")
    return ConfigError(
        f"config error: agent.workspace: the folder {path} does not exist ({where}); "
        "create it, or correct the path"
    )

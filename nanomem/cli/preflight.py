"""Checks made at start, before any model call, of what settings alone cannot validate: model
names no client can place, and a workspace that is not there."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from nanomem.config import ConfigError, Settings, source_of
from nanomem.providers import model_name_problem, route


def check_model_names(settings: Settings, config: Path, overrides: dict[str, Any]) -> None:
    """Raise ConfigError saying what to write for a model name no client can place, or for
    llm.proxy when a model goes through litellm, which would connect around it."""
    for section, key, name in (
        ("llm", "model", settings.llm.model),
        ("dream", "model_override", settings.dream.model_override or ""),
    ):
        if problem := model_name_problem(name, settings.llm.api_base, f"{section}.{key}"):
            where = source_of(config, overrides, section, key)
            raise ConfigError(f"config error: {problem} ({where})")
        llm = settings.llm.model_copy(update={"model": name})
        if name and settings.llm.proxy and route(llm).path == "litellm":
            where = source_of(config, overrides, "llm", "proxy")
            raise ConfigError(
                f"config error: llm.proxy is the lean client's, and {section}.{key} = {name} "
                f"goes through litellm, which takes its proxy from HTTPS_PROXY or ALL_PROXY: "
                f"set that instead ({where})"
            )


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

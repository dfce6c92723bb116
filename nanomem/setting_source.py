"""Where a setting's value came from (command line, environment, a line of config.toml, the
default), for config errors that name the key and its source."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from pydantic import ValidationError

ENV_PREFIX = "NANOMEM_"
ENV_DELIMITER = "__"


def describe_errors(
    exc: ValidationError, path: Path, file_data: dict[str, Any], overrides: dict[str, Any]
) -> str:
    lines = []
    for err in exc.errors():
        loc = _names(tuple(str(part) for part in err["loc"]))
        key = ".".join(loc) if loc else "(settings)"
        if len(err["loc"]) > len(loc) and str(err["loc"][len(loc)]).isdigit():  # api.keys[0]
            key += f"[{err['loc'][len(loc)]}]"
        # Never the value: a mistyped key (`llm.apikey`) may well hold a secret.
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            msg = "unknown setting"
        lines.append(f"{key}: {msg} ({source_in(loc, path, file_data, overrides)})")
    return "config error: " + "; ".join(lines)


def _names(loc: tuple[str, ...]) -> tuple[str, ...]:
    """The setting a location names: `tools.web.max_bytes`, not the list index after it."""
    names: list[str] = []
    for part in loc:
        if part.isdigit() or "[" in part:  # a list index, or pydantic's name of a validator
            break
        names.append(part)
    return tuple(names)


def source_in(
    loc: tuple[str, ...], path: Path, file_data: dict[str, Any], overrides: dict[str, Any]
) -> str:
    loc = _names(loc)
    if _lookup(overrides, loc) is not None:
        return "command line"
    env_name = ENV_PREFIX + ENV_DELIMITER.join(loc).upper()
    for name in os.environ:
        if name.upper() == env_name:
            return f"environment variable {name}"
    if _lookup(file_data, loc) is not None:
        line = _line_of(path, loc)
        return f"{path}, line {line}" if line else str(path)
    return "default"


def _lookup(data: dict[str, Any], loc: tuple[str, ...]) -> Any:
    node: Any = data
    for part in loc:
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def _line_of(path: Path, loc: tuple[str, ...]) -> int | None:
    """Line of `key` under `[section]`; TOML gives no positions, so scan the text."""
    if len(loc) < 2:
        return None
    section, key = ".".join(loc[:-1]), loc[-1]
    current = ""
    for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        line = raw.strip()
        if line.startswith("[") and line.endswith("]"):
            current = line.strip("[] ")
            continue
        name = line.split("=", 1)[0].strip().strip('"') if "=" in line else ""
        if current == section and name == key:
            return number
        if current == loc[0] and name == ".".join(loc[1:]):  # [tools] web.max_bytes = …
            return number
        if current == "" and name == f"{section}.{key}":
            return number
    return None

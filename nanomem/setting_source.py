"""Where a setting's value came from (command line, environment, a line of config.toml, the
default), for config errors that name the key and its source; and the settings the environment
gives, read as pydantic-settings read them before (its import took ~50 ms and ~5 MiB of every
start, issue 30 #7)."""

from __future__ import annotations

import json
import os
import types
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError

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


def from_environment(model: type[BaseModel], environ: Mapping[str, str]) -> dict[str, Any]:
    """The settings named by NANOMEM_<SECTION>__<KEY>[__<KEY>...] variables (any case), as
    nested dicts: a value for a list, a dict or a section is JSON (`NANOMEM_TELEGRAM__ALLOW_FROM=
    '[123]'`), kept as written when it is not JSON (validation then names the variable). Only a
    section's name counts: NANOMEM_HOME is no setting."""
    found: dict[str, Any] = {}
    named = [
        (name.lower().removeprefix(ENV_PREFIX.lower()).split(ENV_DELIMITER), value)
        for name, value in environ.items()
        if name.upper().startswith(ENV_PREFIX)
    ]
    # The more precise variable goes last, so it wins: NANOMEM_TOOLS__WEB__ENABLED over the
    # same key in NANOMEM_TOOLS__WEB='{...}'.
    for keys, value in sorted(named, key=lambda item: (len(item[0]), item[0])):
        if keys[0] not in model.model_fields or "" in keys:
            continue
        annotation: Any = model
        node = found
        for key in keys[:-1]:
            annotation = _inner(annotation, key)
            if not isinstance(node.get(key), dict):
                node[key] = {}
            node = node[key]
        annotation = _inner(annotation, keys[-1])
        node[keys[-1]] = _json_or_text(value) if _is_complex(annotation) else value
    return found


def _inner(annotation: Any, key: str) -> Any:
    """The type of `key` inside `annotation` (a section's field, a dict's value); None when
    unknown (the key is a mistake validation will name)."""
    for kind in _kinds(annotation):
        if isinstance(kind, type) and issubclass(kind, BaseModel):
            field = kind.model_fields.get(key)
            return None if field is None else field.annotation
        if get_origin(kind) in (dict, Mapping):
            args = get_args(kind)
            return args[1] if len(args) == 2 else None
    return None


def _kinds(annotation: Any) -> list[Any]:
    """The types an annotation allows: Annotated unwrapped, a union spread."""
    if get_origin(annotation) is Annotated:
        return _kinds(get_args(annotation)[0])
    if get_origin(annotation) in (Union, types.UnionType):
        return [kind for arg in get_args(annotation) for kind in _kinds(arg)]
    return [annotation]


def _is_complex(annotation: Any) -> bool:
    for kind in _kinds(annotation):
        if get_origin(kind) in (list, set, tuple, frozenset, dict, Mapping):
            return True
        if isinstance(kind, type) and (issubclass(kind, BaseModel) or kind in (list, dict)):
            return True
    return False


def _json_or_text(value: str) -> Any:
    try:
        return json.loads(value)
    except ValueError:
        return value

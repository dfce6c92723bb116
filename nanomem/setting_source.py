"""Where a setting's value came from (command line, environment, a line of config.toml, the
default), for config errors that name the key and its source; and the settings the environment
gives, read as pydantic-settings read them before (its import took ~50 ms and ~5 MiB of every
start, issue 30 #7), with `a,b` for a list besides JSON."""

from __future__ import annotations

import json
import os
import re
import types
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError

ENV_PREFIX = "NANOMEM_"
ENV_DELIMITER = "__"


def describe_errors(
    exc: ValidationError,
    path: Path,
    file_data: dict[str, Any],
    overrides: dict[str, Any],
    model: type[BaseModel] | None = None,
) -> str:
    """One line for the person; `model` (Settings) lets it name the closest known key and
    show how a list is written."""
    lines = []
    for err in exc.errors():
        loc = _names(tuple(str(part) for part in err["loc"]))
        key = ".".join(loc) if loc else "(settings)"
        if len(err["loc"]) > len(loc) and str(err["loc"][len(loc)]).isdigit():  # api.keys[0]
            key += f"[{err['loc'][len(loc)]}]"
        # Never the value: a mistyped key (`llm.apikey`) may well hold a secret.
        msg = err["msg"].removeprefix("Value error, ")
        source, hint = source_in(loc, path, file_data, overrides), ""
        if err["type"] == "extra_forbidden":
            table = isinstance(_lookup(file_data, loc), dict) and source != "default"
            key, msg = (f"[{key}]" if table else key), "unknown setting"
            hint = "" if model is None else _closest(model, loc, table)
        elif model is None:
            pass
        elif err["type"] == "list_type" and source.startswith("environment variable"):
            hint = f": write {list_example(_annotation(model, loc))}"
        lines.append(f"{key}: {msg} ({source}){hint}")
    return "config error: " + "; ".join(lines)


def holds_numbers(annotation: Any) -> bool:
    """Whether a list's items may be whole numbers (telegram.allow_from)."""
    return any(int in type_kinds(arg) for kind in type_kinds(annotation) for arg in get_args(kind))


def list_example(annotation: Any) -> str:
    """How a list is written in a variable, in the element type of `annotation`."""
    if holds_numbers(annotation):
        return "a JSON list such as '[4242, 99]', or comma-separated: 4242,99"
    return 'a JSON list such as \'["first", "second"]\', or comma-separated: first,second'


def _annotation(model: type[BaseModel], loc: tuple[str, ...]) -> Any:
    annotation: Any = model
    for part in loc:
        annotation = inner_type(annotation, part)
    return annotation


def _closest(model: type[BaseModel], loc: tuple[str, ...], table: bool) -> str:
    """`; did you mean llm.api_base?` for a mistyped name, among its neighbours."""
    import difflib

    known = [
        name
        for kind in type_kinds(_annotation(model, loc[:-1]))
        if isinstance(kind, type) and issubclass(kind, BaseModel)
        for name in kind.model_fields
    ]
    close = difflib.get_close_matches(loc[-1], known, n=1, cutoff=0.6)
    if not close:
        return ""
    name = ".".join((*loc[:-1], close[0]))
    return f"; did you mean [{name}]?" if table else f"; did you mean {name}?"


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
    """Line of `key` under `[section]`, or of a table's header; TOML gives no positions, so
    scan the text."""
    section, key = ".".join(loc[:-1]), loc[-1]
    current = ""
    for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        line = raw.strip()
        if (header := table_header(line)) is not None:
            current = ".".join(header)
            if header[: len(loc)] == loc:  # [lm], or [lm.x] under it
                return number
            continue
        name = line.split("=", 1)[0].strip().strip('"') if "=" in line else ""
        if current == section and name == key:
            return number
        if current == loc[0] and name == ".".join(loc[1:]):  # [tools] web.max_bytes = …
            return number
        if current == "" and name == f"{section}.{key}":
            return number
    return None


def table_header(line: str) -> tuple[str, ...] | None:
    """The names of a `[table]` or `[[array]]` header line (a comment after it allowed)."""
    match = _HEADER.match(line)
    if match is None:
        return None
    return tuple(part.strip().strip('"').strip("'") for part in match[1].split("."))


_HEADER = re.compile(r"^\s*\[\[?\s*([A-Za-z0-9_\-.\"' ]+?)\s*\]\]?\s*(#.*)?$")


def split_list(text: str) -> list[str] | None:
    """`a,b` as ["a", "b"] where that reading is the only one: nothing in brackets or quotes,
    no blanks inside an item (`10.0.0.0/8 fd00::/8` could mean one or two)."""
    text = text.strip()
    if not text:
        return []
    if text[0] in "[{\"'":
        return None
    items = [item.strip() for item in text.split(",")]
    if any(not item or any(char.isspace() for char in item) for item in items):
        return None
    return items


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
            annotation = inner_type(annotation, key)
            if not isinstance(node.get(key), dict):
                node[key] = {}
            node = node[key]
        annotation = inner_type(annotation, keys[-1])
        node[keys[-1]] = _env_value(value, annotation) if _is_complex(annotation) else value
    return found


def _env_value(value: str, annotation: Any) -> Any:
    """JSON; for a list also `a,b` (or one item alone) where unambiguous (split_list)."""
    found = _json_or_text(value)
    listed = any(
        get_origin(kind) in (list, set, tuple, frozenset) for kind in type_kinds(annotation)
    )
    if listed and not isinstance(found, list) and (items := split_list(value)) is not None:
        return items
    return found


def inner_type(annotation: Any, key: str) -> Any:
    """The type of `key` inside `annotation` (a section's field, a dict's value); None when
    unknown (the key is a mistake validation will name)."""
    for kind in type_kinds(annotation):
        if isinstance(kind, type) and issubclass(kind, BaseModel):
            field = kind.model_fields.get(key)
            return None if field is None else field.annotation
        if get_origin(kind) in (dict, Mapping):
            args = get_args(kind)
            return args[1] if len(args) == 2 else None
    return None


def type_kinds(annotation: Any) -> list[Any]:
    """The types an annotation allows: Annotated unwrapped, a union spread."""
    if get_origin(annotation) is Annotated:
        return type_kinds(get_args(annotation)[0])
    if get_origin(annotation) in (Union, types.UnionType):
        return [kind for arg in get_args(annotation) for kind in type_kinds(arg)]
    return [annotation]


def _is_complex(annotation: Any) -> bool:
    for kind in type_kinds(annotation):
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


def declared_twice(path: Path, text: str, error: str) -> str | None:
    """What to do about a table or key declared twice (tomllib names it, not both lines):
    usually a snippet pasted into a file that has the table already (issue 31)."""
    import ast

    match = re.match(r"Cannot (declare (\(.*\)) twice|overwrite a value) \(at line (\d+)", error)
    if match is None:
        return None
    lines, at = text.splitlines(), int(match[3])
    if match[2] is not None:  # a table
        try:
            name = tuple(ast.literal_eval(match[2]))
        except (ValueError, SyntaxError):
            return None
        seen = [n for n, line in enumerate(lines, start=1) if table_header(line) == name]
        table = ".".join(name)
        first, second = (seen[0], seen[1]) if len(seen) > 1 else (seen[0] if seen else 0, at)
        example = _first_assignment(table, lines[second:])
        return (
            f"config error: {path} declares [{table}] twice (lines {first} and {second}): "
            f"merge them into one, or use `nanomem config set {example}`"
        )
    keys = _assignments(lines)
    if not (0 < at <= len(lines)) or keys[at - 1] is None:
        return None
    first = keys.index(keys[at - 1]) + 1
    dotted = ".".join(keys[at - 1] or ())
    return (
        f"config error: {path} sets {dotted} twice (lines {first} and {at}): "
        f"keep one, or use `nanomem config set {dotted} VALUE`"
    )


def _assignments(lines: list[str]) -> list[tuple[str, ...] | None]:
    """For each line, the full name of the key it sets (None: it sets none)."""
    table: tuple[str, ...] = ()
    names: list[tuple[str, ...] | None] = []
    for line in lines:
        if (header := table_header(line)) is not None:
            table = header
        key = line.split("=", 1)[0].strip() if "=" in line and header is None else ""
        plain = key and not key.startswith("#")
        names.append((*table, *(p.strip().strip("\"'") for p in key.split("."))) if plain else None)
    return names


def _first_assignment(table: str, lines: list[str]) -> str:
    """`telegram.enabled true`, from the first key a table sets; only a flag's or a number's
    value is shown (a text or a list may be a secret: `api.keys`)."""
    for line in lines:
        if table_header(line) is not None:
            break
        key, _, value = line.partition("=")
        key, value = key.strip(), value.split("#", 1)[0].strip()
        if not value or key.startswith("#"):
            continue
        plain = value in ("true", "false") or re.fullmatch(r"[+-]?[0-9_.]+", value)
        return f"{table}.{key} {value if plain else 'VALUE'}"
    return f"{table}.KEY VALUE"

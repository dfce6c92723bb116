"""config.toml changed in place (`nanomem config`, onboarding, the key the gateway makes): a
setting named by its dotted key, a value read by the setting's type, the file's comments and
layout kept (tomlkit), a commented default uncommented where it stands, and nothing written
that the app would refuse. tomlkit is imported here only, when a file is changed."""

from __future__ import annotations

import json
import math
import re
import tomllib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, get_origin

from pydantic import BaseModel, SecretStr

from nanomem.config import ConfigError, Settings, load_settings, read_toml
from nanomem.durable import atomic_write_text
from nanomem.locks import FileLock, LockBusy
from nanomem.setting_source import (
    holds_numbers,
    inner_type,
    list_example,
    split_list,
    table_header,
    type_kinds,
)
from nanomem.text.masking import is_secret_name, is_secret_setting, masked, url_password

if TYPE_CHECKING:
    from tomlkit import TOMLDocument

TRUE, FALSE = ("true", "yes", "on", "1"), ("false", "no", "off", "0")
LISTS = (list, set, tuple, frozenset)
LOCK_WAIT_S = 10.0


@dataclass(frozen=True)
class Setting:
    """A setting (or a table of them) by its place in Settings."""

    path: tuple[str, ...]
    annotation: Any
    default: Any

    @property
    def key(self) -> str:
        return ".".join(self.path)

    @property
    def secret(self) -> bool:
        return is_secret_setting(self.path) or any(is_secret_name(p) for p in self.path)

    @property
    def table(self) -> bool:
        """A table of settings (`telegram`, `mcp.servers`), not one setting."""
        return _model(self.annotation) is not None or _model(_values(self.annotation)) is not None


def setting(key: str) -> Setting:
    """The setting a dotted key names; ConfigError naming the closest known keys."""
    path = tuple(part.strip() for part in key.strip().split("."))
    if not path[0]:
        raise ConfigError("config error: name a setting, e.g. llm.model")
    annotation: Any = Settings
    default: Any = None
    for part in path:
        model, values = _model(annotation), _values(annotation)
        if model is not None and part in model.model_fields:
            field = model.model_fields[part]
            annotation, default = field.annotation, field.get_default(call_default_factory=True)
        elif model is None and values is not None and part:
            annotation, default = values, None  # an entry of a table such as mcp.servers
        else:
            raise ConfigError(_unknown(key, path))
    return Setting(path, annotation, default)


def _unknown(key: str, path: tuple[str, ...]) -> str:
    import difflib

    known = list(known_keys(path))
    close = difflib.get_close_matches(key, known, n=3, cutoff=0.6)
    if not close:  # `api_bse` alone: compare the last names
        last = {k: k.rsplit(".", 1)[-1] for k in known}
        near = set(difflib.get_close_matches(path[-1], list(last.values()), n=3, cutoff=0.75))
        close = [k for k, name in last.items() if name in near][:3]
    hint = f"; did you mean {' or '.join(close)}?" if close else ""
    return f"config error: {key} is not a setting{hint}"


def known_keys(given: tuple[str, ...] = (), prefix: tuple[str, ...] = ()) -> Iterator[str]:
    """Every setting's key under `prefix`; an entry of a table like mcp.servers named as in
    `given` (else NAME)."""
    annotation = setting(".".join(prefix)).annotation if prefix else Settings
    model = _model(annotation)
    if model is not None:
        for name in model.model_fields:
            yield from known_keys(given, (*prefix, name))
    elif _model(_values(annotation)) is not None:
        entry = given[len(prefix)] if len(given) > len(prefix) and given[len(prefix)] else "NAME"
        yield from known_keys(given, (*prefix, entry))
    else:
        yield ".".join(prefix)


def _model(annotation: Any) -> type[BaseModel] | None:
    for kind in type_kinds(annotation):
        if isinstance(kind, type) and issubclass(kind, BaseModel):
            return kind
    return None


def _values(annotation: Any) -> Any:
    """The value type of a dict setting (None: not a dict)."""
    if any(get_origin(kind) in (dict, Mapping) for kind in type_kinds(annotation)):
        return inner_type(annotation, "")
    return None


def parse_value(target: Setting, raw: str) -> Any:
    """`raw` as the setting's type: bools (true/yes/on...), numbers, lists as TOML/JSON or
    `a,b`, tables as TOML or JSON; anything else the text as given."""
    if target.table:
        some = ", ".join(list(known_keys(target.path, target.path))[:3])
        raise ConfigError(f"config error: {target.key} is a table: set one of its keys ({some})")
    kinds = [kind for kind in type_kinds(target.annotation) if kind is not type(None)]
    if bool in kinds:
        word = raw.strip().lower()
        if word in TRUE or word in FALSE:
            return word in TRUE
        raise ConfigError(f"config error: {target.key} is true or false (or yes/no, on/off)")
    if any(get_origin(kind) in LISTS for kind in kinds):
        return _list(target, raw)
    if _values(target.annotation) is not None:
        value = _toml_or_json(raw)
        if not isinstance(value, dict):
            raise ConfigError(
                f'config error: {target.key} is a table: write it as {{NAME = "value"}} '
                'or JSON {"NAME": "value"}'
            )
        return value
    for number in (int, float):
        if number in kinds:
            try:  # 30 stays 30 for a float too: as the person wrote it
                value = int(raw.strip()) if _whole(raw) else number(raw.strip())
                if not math.isfinite(value):  # nan, inf: TOML writes them, no setting means them
                    raise ValueError(raw)
                return value
            except ValueError:
                whole = " (a whole one)" if number is int else ""
                raise ConfigError(
                    f"config error: {target.key} takes a number{whole}"  # never the value typed
                ) from None
    return raw


def _whole(raw: str) -> bool:
    return raw.strip().lstrip("+-").isdigit()


def _list(target: Setting, raw: str) -> list[Any]:
    example = list_example(target.annotation)
    if raw.strip().startswith("["):
        value = _toml_or_json(raw)
        if not isinstance(value, list):
            raise ConfigError(f"config error: {target.key} takes a list: {example}")
        return value
    items = split_list(raw)
    if items is None:
        raise ConfigError(f"config error: {target.key} takes a list: {example}")
    numbers = holds_numbers(target.annotation)
    return [int(item) if numbers and item.lstrip("-").isdigit() else item for item in items]


def _toml_or_json(raw: str) -> Any:
    try:
        return tomllib.loads(f"value = {raw.strip()}")["value"]
    except tomllib.TOMLDecodeError:
        pass
    try:
        return json.loads(raw)
    except ValueError:
        return None


# -- the text -------------------------------------------------------------------------------


def with_value(text: str, path: tuple[str, ...], value: Any) -> str:
    """`text` with the setting at `path` set to `value`: in place where it is set, else where
    its commented default stands (a commented `# [table]` becoming the table), else added."""
    import tomlkit

    doc = _parsed(text)
    table, key = path[:-1], path[-1]
    node = _table_in(doc, table)
    if node is not None and key in node:
        node[key] = _item(value)
        return _checked(text, tomlkit.dumps(doc), path, value)
    lines = text.splitlines(keepends=True)
    if node is None and (at := _commented_header(lines, table)) is not None:
        lines[at] = _uncommented(lines[at])
        return _checked(text, with_value("".join(lines), path, value), path, value)
    if node is not None and (at := _commented_key(lines, table, key)) is not None:
        lines[at] = _assignment(lines[at], key, value)
        return _checked(text, "".join(lines), path, value)
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n"
    if node is None:  # a new table, at the end: TOML lets a table come after any other
        gap = [] if not lines or lines[-1] == "\n" else ["\n"]
        lines += [*gap, f"[{'.'.join(map(_bare, table))}]\n", f"{key} = {_toml(value)}\n"]
        return _checked(text, "".join(lines), path, value)
    region = _region(lines, table)
    if region is None:  # a table made by dotted keys or inline: tomlkit places it
        node[key] = _item(value)
        return _checked(text, tomlkit.dumps(doc), path, value)
    lines.insert(_end_of_table(lines, region), f"{key} = {_toml(value)}\n")
    return _checked(text, "".join(lines), path, value)


def _end_of_table(lines: list[str], region: range) -> int:
    """Where a new key goes: after the table's last line, short of its trailing blank lines
    and of a comment standing apart above the next header (which is about that one)."""
    end = _before_blanks(lines, region.start, region.stop)
    above = end
    while above > region.start and lines[above - 1].lstrip().startswith("#"):
        above -= 1
    if above < end and above > region.start and not lines[above - 1].strip():
        end = _before_blanks(lines, region.start, above)
    return end


def _before_blanks(lines: list[str], start: int, end: int) -> int:
    while end > start and not lines[end - 1].strip():
        end -= 1
    return end


def without_value(text: str, path: tuple[str, ...], default: Any) -> str:
    """`text` with the setting at `path` commented back to its default where it stands (or
    removed, when there is no default to show); `text` itself when the file does not set it."""
    import tomlkit

    doc = _parsed(text)
    table, key = path[:-1], path[-1]
    node = _table_in(doc, table)
    if node is None or key not in node:
        return text
    lines = text.splitlines(keepends=True)
    at = _key_line(lines, table, key)
    if (region := _region(lines, path)) is not None:  # a [table] of its own
        return _checked(text, "".join(_commented_table(lines, path, region)), path, None)
    if at is not None and _one_line(lines[at]):
        indent = lines[at][: len(lines[at]) - len(lines[at].lstrip())]
        shown = _toml(default) if default is not None and default != {} else None
        lines[at : at + 1] = [f"{indent}# {key} = {shown}\n"] if shown is not None else []
        changed = "".join(lines)
    else:  # a table, or a value over several lines
        del node[key]
        changed = tomlkit.dumps(doc)
    return _checked(text, changed, path, None)


def _commented_table(lines: list[str], path: tuple[str, ...], region: range) -> list[str]:
    """`[table]` commented out, each key as its commented default (as onboarding writes it),
    or as it was where it has none; a secret's line removed, never kept in a comment."""
    kept = [*lines[: region.start - 1], f"# {lines[region.start - 1]}"]
    for line in lines[region.start : region.stop]:
        key = line.split("=", 1)[0].strip().strip("\"'") if "=" in line else ""
        if not line.strip() or line.lstrip().startswith("#") or not key:
            kept.append(line)
            continue
        try:
            target = setting(".".join((*path, key)))
        except ConfigError:  # not ours to know: treated as a secret
            continue
        if target.default not in (None, {}) and not target.table:
            kept.append(f"# {key} = {_toml(target.default)}\n")
        elif not target.secret:
            kept.append(f"# {line}")
    return kept + lines[region.stop :]


def _parsed(text: str) -> TOMLDocument:
    import tomlkit
    from tomlkit.exceptions import TOMLKitError

    try:
        return tomlkit.parse(text)
    except TOMLKitError as exc:  # tomllib found nothing wrong (read_toml runs first)
        raise ConfigError(f"config error: tomlkit cannot read the file: {exc}") from None


def _table_in(doc: Any, table: tuple[str, ...]) -> Any:
    node = doc
    for name in table:
        if not hasattr(node, "get") or not hasattr(node.get(name), "get"):
            return None
        node = node[name]
    return node


def _bare(name: str) -> str:
    return name if re.fullmatch(r"[A-Za-z0-9_-]+", name) else json.dumps(name)


def _region(lines: list[str], table: tuple[str, ...]) -> range | None:
    """The lines under `[table]`'s header, up to the next header, commented or not; None
    when no header declares it."""
    start = next((n + 1 for n, line in enumerate(lines) if table_header(line) == table), None)
    if start is None:
        return None
    end = start
    while end < len(lines) and not _is_header(lines[end]):
        end += 1
    return range(start, end)


def _is_header(line: str) -> bool:
    return table_header(line) is not None or table_header(_uncommented(line)) is not None


def _commented_header(lines: list[str], table: tuple[str, ...]) -> int | None:
    for number, line in enumerate(lines):
        if line.lstrip().startswith("#") and table_header(_uncommented(line)) == table:
            return number
    return None


def _commented_key(lines: list[str], table: tuple[str, ...], key: str) -> int | None:
    return _line_in(lines, table, rf"^\s*#\s*[\"']?{re.escape(key)}[\"']?\s*=")


def _key_line(lines: list[str], table: tuple[str, ...], key: str) -> int | None:
    return _line_in(lines, table, rf"^\s*[\"']?{re.escape(key)}[\"']?\s*=")


def _line_in(lines: list[str], table: tuple[str, ...], pattern: str) -> int | None:
    region = _region(lines, table) or range(0)
    return next((n for n in region if re.match(pattern, lines[n])), None)


def _uncommented(line: str) -> str:
    return re.sub(r"^(\s*)#\s?", r"\1", line, count=1)


def _one_line(line: str) -> bool:
    try:
        tomllib.loads(line)
    except tomllib.TOMLDecodeError:
        return False
    return True


def _assignment(commented: str, key: str, value: Any) -> str:
    """The commented line `# key = old  # note` as `key = value  # note`."""
    import tomlkit
    from tomlkit.exceptions import TOMLKitError

    line = _uncommented(commented)
    indent = line[: len(line) - len(line.lstrip())]
    try:
        doc = tomlkit.parse(line.lstrip())
    except TOMLKitError:
        doc = None
    if doc is None or key not in doc:
        return f"{indent}{key} = {_toml(value)}\n"
    doc[key] = _item(value)
    return indent + tomlkit.dumps(doc).rstrip("\n") + "\n"


def _item(value: Any) -> Any:
    """A table value stays on its line: `{NAME = "value"}`, as the template writes one."""
    import tomlkit

    if not isinstance(value, dict):
        return value
    table = tomlkit.inline_table()
    table.update(value)
    return table


def _toml(value: Any) -> str:
    import tomlkit

    return str(tomlkit.item(_item(value)).as_string())


def _checked(old: str, new: str, path: tuple[str, ...], value: Any) -> str:
    """`new` if it changes only the setting at `path` (to `value`; None: unset): a layout this
    module cannot change in place is refused, never written half right."""
    expected = tomllib.loads(old)
    node = expected
    for name in path[:-1]:
        node = node.setdefault(name, {}) if isinstance(node, dict) else None
    if not isinstance(node, dict):  # `telegram = "..."`: a value where a table should be
        same = False
    else:
        if value is None:
            node.pop(path[-1], None)
        else:
            node[path[-1]] = value
        try:
            same = _pruned(tomllib.loads(new)) == _pruned(expected)
        except tomllib.TOMLDecodeError:
            same = False
    if not same:
        raise ConfigError(
            f"config error: {'.'.join(path)} cannot be changed in place in this file's layout; "
            "change it with `nanomem config edit`"
        )
    return new


def _pruned(data: Any) -> Any:
    """Empty tables left out: `[telegram]` alone means the defaults, as no table does."""
    if not isinstance(data, dict):
        return data
    pruned = {key: _pruned(value) for key, value in data.items()}
    return {key: value for key, value in pruned.items() if value != {}}


def changed_settings(old: str, new: str) -> list[Setting]:
    """The settings whose values differ between two texts of the file (none when either is
    not TOML: a broken file repaired)."""
    try:
        return _changed(tomllib.loads(old), tomllib.loads(new), ())
    except tomllib.TOMLDecodeError:
        return []


def _changed(old: dict[str, Any], new: dict[str, Any], prefix: tuple[str, ...]) -> list[Setting]:
    found: list[Setting] = []
    for name in dict.fromkeys([*old, *new]):
        before, after = old.get(name), new.get(name)
        if before == after:
            continue
        try:
            target = setting(".".join((*prefix, name)))
        except ConfigError:
            continue
        if target.table and isinstance(before or {}, dict) and isinstance(after or {}, dict):
            found += _changed(before or {}, after or {}, target.path)
        else:
            found.append(target)
    return found


# -- the file -------------------------------------------------------------------------------


def current_text(config: Path) -> str:
    """The file's text, "" when there is none; ConfigError when it is not TOML at all (what is
    wrong in it, where)."""
    if not config.exists():
        return ""
    read_toml(config)  # its errors name the file and line
    return config.read_text(encoding="utf-8")


def write_checked(config: Path, text: str) -> None:
    """`text` over `config` (0600, temp then rename, fsync) if the app accepts it; otherwise
    ConfigError naming `config`, and the old file untouched. Accepted: a file valid alone, or
    with the environment (a key a variable gives, which the file's settings need)."""

    def check(written: Path) -> None:
        try:
            load_settings(written, environ={})
        except ConfigError as alone:
            try:
                load_settings(written)
            except ConfigError:
                raise ConfigError(str(alone).replace(str(written), str(config))) from None

    atomic_write_text(config, text, mode=0o600, check=check)


def change(config: Path, lock: FileLock, edit: Any) -> bool:
    """Apply `edit` (old text -> new text) to `config` under `lock`; whether it changed."""
    try:
        with lock.hold_sync(wait_s=LOCK_WAIT_S):
            old = current_text(config)
            new = edit(old)
            if new == old:
                return False
            write_checked(config, new)
    except LockBusy:
        raise ConfigError(f"config error: {config} is being changed elsewhere; try again") from None
    return True


def set_values(config: Path, lock: FileLock, table: str, values: Mapping[str, Any]) -> bool:
    """Each `key = value` under `[table]`, placed as `set_value` places one, in one write."""

    def edit(text: str) -> str:
        for key, value in values.items():
            text = with_value(text, (table, key), value)
        return text

    return change(config, lock, edit)


def set_value(config: Path, lock: FileLock, target: Setting, value: Any) -> bool:
    return change(config, lock, lambda old: with_value(old, target.path, value))


def unset_value(config: Path, lock: FileLock, target: Setting) -> bool:
    return change(config, lock, lambda old: without_value(old, target.path, target.default))


def shown(target: Setting, value: Any, reveal: bool = False) -> str:
    """A value as TOML would write it, a secret masked (`***abcd`) unless `reveal`."""
    if isinstance(value, SecretStr):
        value = value.get_secret_value()
    if value is None:
        return "(not set)"
    if isinstance(value, str):
        if target.secret and not reveal:
            return masked(value)
        if target.path[-1] == "proxy" and not reveal:
            return _without_password(value)
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, Path):
        return json.dumps(str(value), ensure_ascii=False)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | tuple | set | frozenset):
        return "[" + ", ".join(shown(target, item, reveal) for item in value) + "]"
    if isinstance(value, dict):
        pairs = (f"{name} = {shown(target, item, reveal)}" for name, item in value.items())
        return "{" + ", ".join(pairs) + "}"
    return str(value)


def _without_password(url: str) -> str:
    password = url_password(url)
    return json.dumps(url.replace(f":{password}@", ":***@") if password else url)

"""config.toml without its secrets, comments and layout kept: what `nanomem export` archives.

Each statement is judged by the setting it names, from the settings' types
(text/masking.is_secret_setting: whatever is typed SecretStr, and a proxy URL's password), and
replaced by a comment naming it. The result is checked by parsing it again: it must hold the
file's settings less exactly those removed, and no removed value anywhere; a file this cannot
vouch for (one it does not understand) raises rather than leak."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from typing import Any

from nanomem.text.masking import PROXY_SETTINGS, is_secret_setting, url_password

Path_ = tuple[str, ...]
_MIN_CHECKED = 6  # shorter values are too likely to appear as ordinary words (masking agrees)


class ScrubError(Exception):
    """The file could not be shown to be free of secrets."""


@dataclass
class Scrubbed:
    text: str
    removed: list[str] = field(default_factory=list)  # dotted names of the secrets taken out
    dropped: list[str] = field(default_factory=list)  # other settings taken out on request
    values: list[str] = field(default_factory=list)  # the secret values: to look for, never shown


def scrub_config(text: str, *, drop: tuple[Path_, ...] = ()) -> Scrubbed:
    """`text` with every secret setting (and each setting in `drop`) commented out."""
    try:
        before = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ScrubError(f"config.toml is not valid TOML ({exc})") from None
    lines = text.splitlines(keepends=True)
    out = Scrubbed("")
    kept: list[str] = []
    gone: list[Path_] = []
    table: Path_ = ()
    i = 0
    while i < len(lines):
        stripped = lines[i].strip()
        if not stripped or stripped.startswith("#"):
            kept.append(lines[i])
            i += 1
            continue
        if stripped.startswith("["):
            table = _path_of(_parsed(stripped))
            kept.append(lines[i])
            i += 1
            continue
        end, statement = _statement(lines, i)
        written = _key_text(statement)
        own = _path_of(_parsed(f"{written} = 0"))
        key = (*table, *own)
        value = _value_at(tomllib.loads(statement), own)
        secret = _is_secret(key, value)
        dropped = any(key[: len(d)] == d for d in drop)
        inner = [] if secret or dropped else _within(key, value, drop)
        indent = lines[i][: len(lines[i]) - len(lines[i].lstrip())]
        if inner and not any(part.isdigit() for sub, _ in inner for part in sub):
            # A table written inline (`llm = { api_key = "…" }`): its secrets out, the rest kept.
            kept.append(_inline_without(statement, own, [sub for sub, _ in inner]))
            for sub, is_secret in inner:
                (out.removed if is_secret else out.dropped).append(".".join((*key, *sub)))
                if is_secret:
                    out.values += _strings(_value_at(value, sub))
                shown = ".".join((written, *sub))
                kept.append(f"{indent}# {shown} = … (left out by nanomem export)\n")
                gone.append((*key, *sub))
            i = end
            continue
        # One inside an array of tables: the whole statement.
        secret = secret or any(is_secret for _, is_secret in inner)
        if secret or dropped or inner:
            name = ".".join(key)
            (out.removed if secret else out.dropped).append(name)
            if secret:
                out.values += _strings(value)
            # The key as the file wrote it: `config set` finds it there to fill in again.
            kept.append(f"{indent}# {written} = … (left out by nanomem export)\n")
            gone.append(key)
        else:
            kept.extend(lines[i:end])
        i = end
    out.text = "".join(kept)
    _check(before, out, gone)
    return out


def _statement(lines: list[str], start: int) -> tuple[int, str]:
    """The lines of one `key = value`, which may span several (an array, a long string)."""
    end = start + 1
    while True:
        chunk = "".join(lines[start:end])
        try:
            tomllib.loads(chunk)
            return end, chunk
        except tomllib.TOMLDecodeError:
            if end >= len(lines):
                raise ScrubError(f"config.toml line {start + 1} is not understood") from None
            end += 1


def _key_text(statement: str) -> str:
    """The key before the `=`, as written (quoted parts may hold dots and equals signs)."""
    quote = ""
    for at, char in enumerate(statement):
        if quote:
            if char == "\\" and quote == '"':
                continue
            if char == quote and statement[at - 1 : at] != "\\":
                quote = ""
        elif char in "\"'":
            quote = char
        elif char == "=":
            return statement[:at].strip()
    raise ScrubError("a config.toml statement without '='")


def _parsed(text: str) -> dict[str, Any]:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        raise ScrubError(f"config.toml: {text.strip()[:60]!r} is not understood") from None


def _path_of(data: Any) -> Path_:
    """The one path through nested single-key tables (a header or a key), to its end."""
    path: list[str] = []
    while isinstance(data, dict | list) and len(data) == 1:
        if isinstance(data, list):
            path.append("0")
            data = data[0]
        else:
            ((name, data),) = data.items()
            path.append(name)
    return tuple(path)


def _value_at(data: Any, key: Path_) -> Any:
    for part in key:
        data = data[part]
    return data


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for item in value.values() for s in _strings(item)]
    if isinstance(value, list):
        return [s for item in value for s in _strings(item)]
    return []


def _is_secret(key: Path_, value: Any) -> bool:
    return is_secret_setting(key) or (key in PROXY_SETTINGS and _has_password(value))


def _within(key: Path_, value: Any, drop: tuple[Path_, ...]) -> list[tuple[Path_, bool]]:
    """The paths, below `key`, of what an inline table or array holds that goes: a secret
    (True), or a setting in `drop` (False)."""
    items: list[tuple[str, Any]]
    if isinstance(value, dict):
        items = list(value.items())
    elif isinstance(value, list):
        items = [(str(n), item) for n, item in enumerate(value)]
    else:
        return []
    found: list[tuple[Path_, bool]] = []
    for name, item in items:
        path = (*key, name)
        if _is_secret(path, item):
            found.append(((name,), True))
        elif any(path[: len(d)] == d for d in drop):
            found.append(((name,), False))
        else:
            found += [((name, *sub), s) for sub, s in _within(path, item, drop)]
    return found


def _inline_without(statement: str, own: Path_, inner: list[Path_]) -> str:
    """The statement with the keys at `inner` taken out of its inline table."""
    import tomlkit

    doc: Any = tomlkit.parse(statement)
    for sub in inner:
        node = doc
        for part in (*own, *sub)[:-1]:
            node = node[part]
        del node[sub[-1]]
    text = tomlkit.dumps(doc)
    return text if text.endswith("\n") else text + "\n"


def _has_password(value: Any) -> bool:
    return isinstance(value, str) and "@" in value and bool(url_password(value))


def _check(before: dict[str, Any], out: Scrubbed, gone: list[Path_]) -> None:
    try:
        after = tomllib.loads(out.text)
    except tomllib.TOMLDecodeError:
        raise ScrubError("config.toml could not be rewritten without its secrets") from None
    expected = _without(before, gone)
    leaked = [v for v in out.values if len(v) >= _MIN_CHECKED and v in out.text]
    if _pruned(after) != _pruned(expected) or leaked:
        raise ScrubError("config.toml could not be rewritten without its secrets")


def _without(data: dict[str, Any], gone: list[Path_]) -> dict[str, Any]:
    import copy

    data = copy.deepcopy(data)
    for path in gone:
        node: Any = data
        for part in path[:-1]:
            node = node[int(part)] if isinstance(node, list) else node[part]
        del node[path[-1]]
    return data


def _pruned(data: Any) -> Any:
    """Empty tables left out (a dotted key's table goes with its last key): they set nothing."""
    if isinstance(data, dict):
        kept = {key: _pruned(value) for key, value in data.items()}
        return {key: value for key, value in kept.items() if value != {}}
    return data

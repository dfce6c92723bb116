"""Structured output: whether an answer has the form an API client's response_format asks
for (a JSON object, or JSON valid against a JSON Schema), and why not.

The schema comes from a client and the answer from a model, so the check is bounded: the
schema's size is limited, the JSON is parsed depth-bounded, and every keyword of one check
shares one time budget (a schema whose `allOf`s refer to each other doubles the work at every
level; `pattern` is matched by the `regex` module, whose matching stops at the time left, since
Python's `re` can backtrack for ever on `(a+)+$`). A `$ref` resolves within the schema only:
nothing is fetched or read (jsonschema would open any URL or file a `$ref` names). A schema
referring to itself without end is refused. `patternProperties` is refused outright: jsonschema
matches those with `re` in several places, none of which can be bounded. The checks take up to
the budget, so callers run them in a pool's threads (nanomem/pools.py: CLIENT_SCHEMAS), never
on the event loop; jsonschema is imported here only, when one runs.
"""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Callable, Iterator
from typing import Any

from nanomem.text import untrusted_json

CHECK_BUDGET_S = 1.0  # one check of a schema, or of an answer against it: every keyword
MAX_SCHEMA_CHARS = 100_000  # a schema, as JSON (OpenAI's own limits are far below)
_SHORT = 160  # a reason's message, in characters (a model echoes long values)
# Keywords whose values are data (a `$ref` in them is a value, not a reference).
_DATA = frozenset({"const", "enum", "default", "examples"})
_TRIALS: tuple[Any, ...] = (None, True, 0, "", [], {})  # what a broken schema fails on


class SchemaRefused(ValueError):
    """A schema the check cannot run safely (or at all): the reason, for the client."""


def schema_of(response_format: dict[str, Any]) -> dict[str, Any] | None:
    """The JSON Schema a json_schema response_format carries; None for json_object."""
    if response_format.get("type") != "json_schema":
        return None
    spec = response_format.get("json_schema") or {}
    schema = spec.get("schema") if isinstance(spec, dict) else None
    return schema if isinstance(schema, dict) else {}


def schema_text(response_format: dict[str, Any]) -> str:
    """The schema as the prompt shows it ("" for json_object)."""
    schema = schema_of(response_format)
    return "" if schema is None else json.dumps(schema, ensure_ascii=False)


def refused(response_format: dict[str, Any]) -> str | None:
    """Why a schema cannot be checked (None: it can), found before anything is saved."""
    schema = schema_of(response_format)
    if schema is None:
        return None
    return _refused(json.dumps(schema, sort_keys=True))


# A framework sends the same schema with every request: its verdict is kept (a few ms of
# meta-schema check and trials each time; the channel bounds a schema to 100,000 characters).
@functools.lru_cache(maxsize=64)
def _refused(text: str) -> str | None:
    schema = json.loads(text)
    size = len(text)
    if size > MAX_SCHEMA_CHARS:
        limit = MAX_SCHEMA_CHARS
        return f"response_format: the schema is too large ({size} characters; limit {limit})"
    if any(key == "patternProperties" for key in _keys(schema)):
        return "response_format: patternProperties is not supported (use properties or pattern)"
    try:
        validator = _validator(schema, time.monotonic() + CHECK_BUDGET_S, meta=True)
        _resolve(schema)
        for trial in _TRIALS:  # a reference without end, or endless work, shows on any value
            _errors(validator, trial)
    except SchemaRefused as exc:
        return f"response_format: {exc}"
    return None


def problem(text: str, response_format: dict[str, Any]) -> str | None:
    """Why `text` does not fit `response_format`, briefly (None: it fits). The schema is one
    `refused` let through."""
    try:
        value = untrusted_json.loads(text)
    except ValueError as exc:
        return f"the answer is not JSON ({_short(str(exc))})"
    schema = schema_of(response_format)
    if schema is None:
        return None if isinstance(value, dict) else "the answer is not a JSON object"
    try:
        errors = _errors(_validator(schema, time.monotonic() + CHECK_BUDGET_S), value)
    except SchemaRefused as exc:
        return str(exc)
    error = min(errors, key=_first, default=None)
    if error is None:
        return None
    return f"at {error.json_path}: {_short(error.message)}"


def _first(error: Any) -> tuple[int, str]:
    return (len(error.path), error.json_path)


def _short(message: str) -> str:
    return message if len(message) <= _SHORT else message[: _SHORT - 1] + "…"


def _keys(schema: Any) -> Iterator[str]:
    """Every key of every object in a schema, without recursion (a schema may be deep)."""
    stack = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            yield from node
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)


def _resolve(schema: dict[str, Any]) -> None:
    """Every `$ref` of the schema (not those in its data: `const`, `enum`...) found in it.
    Looked up from the schema's root: a `$ref` relative to a nested `$id` may be refused."""
    from referencing import Registry
    from referencing.exceptions import Unresolvable
    from referencing.jsonschema import DRAFT202012

    resolver = Registry().resolver_with_root(DRAFT202012.create_resource(schema))
    stack: list[Any] = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            for ref in (node.get("$ref"), node.get("$dynamicRef")):
                try:
                    if isinstance(ref, str):
                        resolver.lookup(ref)
                except Unresolvable:
                    raise SchemaRefused(
                        f"$ref {_short(repr(ref))} does not point inside the schema"
                    ) from None
            stack.extend(value for key, value in node.items() if key not in _DATA)
        elif isinstance(node, list):
            stack.extend(node)


def _errors(validator: Any, value: Any) -> list[Any]:
    """Every way `value` misses the schema, within the check's budget."""
    from referencing.exceptions import Unresolvable

    try:
        return list(validator.iter_errors(value))
    except RecursionError:
        raise SchemaRefused("the schema refers to itself without end") from None
    except Unresolvable as exc:
        raise SchemaRefused(
            f"a $ref does not point inside the schema ({_short(str(exc))})"
        ) from None


def _validator(schema: dict[str, Any], deadline: float, *, meta: bool = False) -> Any:
    """A Draft 2020-12 validator whose every keyword keeps to `deadline`, its `$ref`s to the
    schema itself; with `meta`, the schema is first checked against the meta-schema."""
    import jsonschema
    import regex
    from referencing import Registry

    def left() -> float:
        if (remaining := deadline - time.monotonic()) <= 0:
            raise SchemaRefused("the schema took too long to check")
        return remaining

    def timed(keyword: Callable[..., Any]) -> Callable[..., Any]:
        def check(validator: Any, value: Any, instance: Any, schema: Any) -> Any:
            left()
            return keyword(validator, value, instance, schema)

        return check

    def pattern(validator: Any, patrn: Any, instance: Any, schema: Any) -> Iterator[Any]:
        if not validator.is_type(instance, "string"):
            return
        try:
            found = regex.search(patrn, instance, timeout=left())
        except TimeoutError:
            raise SchemaRefused(
                f"the pattern {_short(repr(patrn))} took too long to match"
            ) from None
        except regex.error as exc:
            raise SchemaRefused(f"the pattern {_short(repr(patrn))} is invalid: {exc}") from None
        if found is None:
            yield jsonschema.ValidationError(f"{instance!r} does not match {patrn!r}")

    def unique_items(validator: Any, unique: Any, instance: Any, schema: Any) -> Iterator[Any]:
        if not unique or not validator.is_type(instance, "array"):
            return
        seen: set[Any] = set()
        for item in instance:  # in one pass: jsonschema compares every pair of objects
            left()
            if (key := _hashable(item)) in seen:
                yield jsonschema.ValidationError(f"{_short(repr(item))} is not unique")
                return
            seen.add(key)

    base = jsonschema.Draft202012Validator
    keywords = {name: timed(keyword) for name, keyword in base.VALIDATORS.items()}
    keywords.update(pattern=pattern, uniqueItems=unique_items)
    bounded = jsonschema.validators.extend(base, keywords)
    if meta:  # as base.check_schema does, within the budget
        checker = bounded(base.META_SCHEMA, format_checker=base.FORMAT_CHECKER)
        invalid = next(checker.iter_errors(schema), None)
        if invalid is not None:
            raise SchemaRefused(f"the schema is invalid: {_short(invalid.message)}")
    return bounded(schema, registry=Registry())  # nothing outside the schema: no fetching


def _hashable(value: Any) -> Any:
    """A JSON value as a set can hold it, equal where JSON Schema calls values equal (1 and
    1.0 are; true and 1 are not). Depth-bounded, as the parsed answer is."""
    if isinstance(value, bool):
        return (bool, value)
    if isinstance(value, list):
        return (list, tuple(_hashable(item) for item in value))
    if isinstance(value, dict):
        return (dict, frozenset((key, _hashable(item)) for key, item in value.items()))
    return value

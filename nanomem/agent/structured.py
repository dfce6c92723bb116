"""Structured output: whether an answer has the form an API client's response_format asks
for (a JSON object, or JSON valid against a JSON Schema), and why not.

The schema comes from a client and the answer from a model, so the check is bounded: the JSON
is parsed depth-bounded, and a schema's `pattern` is matched by the `regex` module with a time
limit (Python's `re` can backtrack for ever on a pattern like `(a+)+$`), all patterns of one
check sharing one budget. `patternProperties` is refused outright: jsonschema matches those
with `re` in several places, none of which can be bounded. jsonschema is imported here only,
when an answer is checked.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

from nanomem.text import untrusted_json

PATTERN_BUDGET_S = 1.0  # all of one answer's `pattern` matches together
_SHORT = 160  # a reason's message, in characters (a model echoes long values)


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
    if any(key == "patternProperties" for key in _keys(schema)):
        return "response_format: patternProperties is not supported (use properties or pattern)"
    try:
        _validator(schema, time.monotonic() + PATTERN_BUDGET_S)
    except SchemaRefused as exc:
        return f"response_format: {exc}"
    return None


def problem(text: str, response_format: dict[str, Any]) -> str | None:
    """Why `text` does not fit `response_format`, briefly (None: it fits)."""
    try:
        value = untrusted_json.loads(text)
    except ValueError as exc:
        return f"the answer is not JSON ({_short(str(exc))})"
    schema = schema_of(response_format)
    if schema is None:
        return None if isinstance(value, dict) else "the answer is not a JSON object"
    try:
        validator = _validator(schema, time.monotonic() + PATTERN_BUDGET_S)
        error = next(iter(sorted(validator.iter_errors(value), key=_first)), None)
    except SchemaRefused as exc:
        return str(exc)
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


def _validator(schema: dict[str, Any], deadline: float) -> Any:
    import jsonschema
    import regex

    def pattern(validator: Any, patrn: Any, instance: Any, schema: Any) -> Iterator[Any]:
        if not validator.is_type(instance, "string"):
            return
        left = deadline - time.monotonic()
        try:
            if left <= 0:
                raise TimeoutError
            found = regex.search(patrn, instance, timeout=left)
        except TimeoutError:
            raise SchemaRefused(
                f"the pattern {_short(repr(patrn))} took too long to match"
            ) from None
        except regex.error as exc:
            raise SchemaRefused(f"the pattern {_short(repr(patrn))} is invalid: {exc}") from None
        if found is None:
            yield jsonschema.ValidationError(f"{instance!r} does not match {patrn!r}")

    base = jsonschema.Draft202012Validator
    try:
        base.check_schema(schema)
    except jsonschema.SchemaError as exc:
        raise SchemaRefused(f"the schema is invalid: {_short(exc.message)}") from None
    bounded = jsonschema.validators.extend(base, {"pattern": pattern})
    return bounded(schema)

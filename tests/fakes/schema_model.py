"""A fallback for FakeOpenAI that answers as a model would: what agent frameworks need to see
when they are pointed at nanomem's `/v1` (tests/channels/test_api_clients_*).

- `response_format` json_schema: a JSON instance of the schema (`fill`); json_object: a JSON
  object, an instance of a schema the system messages hold if they hold one.
- A schema in a system message (instructor's JSON mode, pydantic-ai's prompted output, a
  prompt asking for the schema instead of response_format): an instance of it.
- Tools: the last user message says which to call, `use NAME {"arg": ...}` (the arguments may
  be left out: they are filled from the tool's `parameters`); `use A {...} and B` is one step
  calling both, each further `use` clause the next step, counted by the tool-call steps since
  that user message. `tool_choice` `required` or naming a function forces a call too, and
  the tools named `unasked` are called once a turn whenever they are offered.
- After a tool's result with no call left to make: a reply quoting every result of the last
  step, `tool said: ...`, so a test sees the result came back through the loop.
- Otherwise the echo of the last user message, as `echo_step`; a text longer than the
  request's max_tokens (four characters a token) is cut there, `finish_reason: "length"`.

Values a test passes in (`SchemaModel({"city": "Paris"})`) fill the properties of that name
wherever they fit, so assertions are about the conversation's values, not "example".
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Mapping
from dataclasses import replace
from typing import Any

import jsonschema

from tests.fakes.openai_server import Step, echo_step

_DEPTH = 8  # past it a recursive schema gets its smallest instance (no optional parts)
_FORMATS = {
    "date": "2026-01-02",
    "date-time": "2026-01-02T03:04:05Z",
    "time": "03:04:05",
    "email": "someone@example.com",
    "uri": "https://example.com/",
    "url": "https://example.com/",
    "uuid": "00000000-0000-4000-8000-000000000000",
    "ipv4": "127.0.0.1",
    "ipv6": "::1",
    "hostname": "example.com",
    "duration": "P1D",
}
_USE = re.compile(r"\buse\s+([A-Za-z0-9_-]{1,64})")
_AND = re.compile(r"\s*and\s+([A-Za-z0-9_-]{1,64})")
# Outside text as nanomem hands it to the model (nanomem/tools/untrusted.py), and the note after.
_MARKED = re.compile(r"<<untrusted (\w+) from [^\n]*>>\n(.*)\n<<end untrusted \1>>(?:\n.*)?", re.S)


def fill(schema: Mapping[str, Any], values: Mapping[str, Any] | None = None) -> Any:
    """A JSON instance of `schema`; a property named in `values` takes its value where the
    value fits the property's schema."""
    return _Filler(schema, values or {}).fill(schema, 0)


class _Filler:
    def __init__(self, root: Mapping[str, Any], values: Mapping[str, Any]) -> None:
        self.root, self.values = root, values

    def resolve(self, schema: Mapping[str, Any]) -> Mapping[str, Any]:
        seen = 0
        while isinstance(ref := schema.get("$ref"), str) and seen < 32:
            target: Any = self.root
            for part in ref.removeprefix("#").strip("/").split("/"):
                if part:
                    target = target[part.replace("~1", "/").replace("~0", "~")]
            extra = {k: v for k, v in schema.items() if k != "$ref"}
            schema, seen = {**target, **extra}, seen + 1
        for key in ("allOf",):
            if key in schema:
                merged: dict[str, Any] = {k: v for k, v in schema.items() if k != key}
                for part in schema[key]:
                    part = self.resolve(part)
                    props = {**merged.get("properties", {}), **part.get("properties", {})}
                    required = [*merged.get("required", []), *part.get("required", [])]
                    merged = {**merged, **part, "properties": props, "required": required}
                schema = merged
        return schema

    def fits(self, value: Any, schema: Mapping[str, Any]) -> bool:
        defs = {k: self.root[k] for k in ("$defs", "definitions") if k in self.root}
        return bool(jsonschema.Draft202012Validator({**defs, **schema}).is_valid(value))

    def fill(self, schema: Mapping[str, Any], depth: int) -> Any:
        schema = self.resolve(schema)
        if "const" in schema:
            return schema["const"]
        if "enum" in schema:
            return schema["enum"][0]
        if "default" in schema and depth >= _DEPTH:
            return schema["default"]
        branches = schema.get("anyOf") or schema.get("oneOf")
        if branches:
            return self.fill(self.branch(branches, depth), depth + 1)
        kinds = schema.get("type")
        if isinstance(kinds, list):
            real = [k for k in kinds if k != "null"]
            kind = "null" if depth >= _DEPTH and "null" in kinds else (real or ["null"])[0]
        else:
            kind = kinds or ("object" if "properties" in schema else "string")
        return getattr(self, f"_{kind}", self._string)(schema, depth)

    def branch(self, branches: list[Any], depth: int) -> Mapping[str, Any]:
        resolved = [self.resolve(b) for b in branches]
        if depth >= _DEPTH:
            for branch in resolved:
                if branch.get("type") == "null":
                    return branch
        return next((b for b in resolved if b.get("type") != "null"), resolved[0])

    def _object(self, schema: Mapping[str, Any], depth: int) -> dict[str, Any]:
        props: Mapping[str, Any] = schema.get("properties") or {}
        required = schema.get("required")
        names = list(props) if required is None and depth < _DEPTH else list(required or [])
        names += [n for n in props if n in self.values and n not in names]
        out: dict[str, Any] = {}
        for name in names:
            sub = props.get(name, {})
            if name in self.values and self.fits(self.values[name], sub):
                out[name] = self.values[name]
            else:
                out[name] = self.fill(sub, depth + 1)
        return out

    def _array(self, schema: Mapping[str, Any], depth: int) -> list[Any]:
        prefix = schema.get("prefixItems") or []
        items = schema.get("items") if isinstance(schema.get("items"), dict) else {}
        count = max(int(schema.get("minItems", 0)), 0 if depth >= _DEPTH else 1, len(prefix))
        if "maxItems" in schema:
            count = min(count, int(schema["maxItems"]))
        out = [self.fill(prefix[i] if i < len(prefix) else items, depth + 1) for i in range(count)]
        if schema.get("uniqueItems"):
            out = [_distinct(value, i) for i, value in enumerate(out)]
        return out

    def _string(self, schema: Mapping[str, Any], depth: int) -> str:
        text = _FORMATS.get(str(schema.get("format")), "example")
        low, high = int(schema.get("minLength", 0)), schema.get("maxLength")
        text = text.ljust(low, "x")
        return text[: int(high)] if high is not None else text

    def _integer(self, schema: Mapping[str, Any], depth: int) -> int:
        return int(_number_between(schema, integer=True))

    def _number(self, schema: Mapping[str, Any], depth: int) -> float:
        return float(_number_between(schema, integer=False))

    def _boolean(self, schema: Mapping[str, Any], depth: int) -> bool:
        return True

    def _null(self, schema: Mapping[str, Any], depth: int) -> None:
        return None


def _number_between(schema: Mapping[str, Any], *, integer: bool) -> float:
    step = 1 if integer else 0.5
    low = schema.get("minimum")
    if (ex := schema.get("exclusiveMinimum")) is not None and not isinstance(ex, bool):
        low = ex + step if low is None else max(low, ex + step)
    high = schema.get("maximum")
    if (ex := schema.get("exclusiveMaximum")) is not None and not isinstance(ex, bool):
        high = ex - step if high is None else min(high, ex - step)
    value = 1 if low is None else low
    if high is not None and value > high:
        value = high
    if integer:
        value = -(-value // 1)  # the smallest integer at or above a fractional bound
    if (multiple := schema.get("multipleOf")) and value % multiple:
        value = (value // multiple + 1) * multiple
    return value


def _distinct(value: Any, index: int) -> Any:
    if isinstance(value, str):
        return f"{value}{index}" if index else value
    if isinstance(value, int | float) and not isinstance(value, bool):
        return value + index
    return value


def text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            str(p.get("text", "")) for p in content if isinstance(p, dict) and "text" in p
        )
    return ""


def schema_in(text: str) -> dict[str, Any] | None:
    """The first JSON schema written out in `text` (an object with properties, a type or
    $defs), or None."""
    decoder = json.JSONDecoder()
    at = text.find("{")
    while at != -1:
        try:
            found, _end = decoder.raw_decode(text, at)
        except ValueError:
            found = None
        if isinstance(found, dict) and _looks_like_schema(found):
            return found
        at = text.find("{", at + 1)
    return None


def planned_steps(text: str, offered: set[str]) -> list[list[tuple[str, dict[str, Any] | None]]]:
    """The tool calls `text` asks for, step by step: each `use` clause is one step of calls
    (`use A {...} and B`); a name that is not offered is no call."""
    decoder = json.JSONDecoder()
    steps: list[list[tuple[str, dict[str, Any] | None]]] = []
    for match in _USE.finditer(text):
        if match.group(1) not in offered:
            continue
        step: list[tuple[str, dict[str, Any] | None]] = []
        name, at = match.group(1), match.end()
        while True:
            args: dict[str, Any] | None = None
            rest = len(text[at:]) - len(text[at:].lstrip())
            if text[at + rest : at + rest + 1] == "{":
                try:
                    found, end = decoder.raw_decode(text, at + rest)
                except ValueError:
                    found, end = None, at
                if isinstance(found, dict):
                    args, at = found, end
            step.append((name, args))
            more = _AND.match(text, at)
            if more is None or more.group(1) not in offered:
                break
            name, at = more.group(1), more.end()
        steps.append(step)
    return steps


class SchemaModel:
    """FakeOpenAI's fallback (`fake.set_fallback(SchemaModel({...}))`); see the module's doc.
    With `native=False` a request carrying response_format is refused with a 400 naming it,
    as a model without structured output answers."""

    def __init__(
        self,
        values: Mapping[str, Any] | None = None,
        *,
        native: bool = True,
        unasked: Collection[str] = (),
    ) -> None:
        self.values = dict(values or {})
        self.native = native
        # Tools called once a turn whenever they are offered, without a `use` clause: a
        # documentation example asks as a person would ("What should I wear in Paris?").
        self.unasked = frozenset(unasked)

    def __call__(self, request: dict[str, Any]) -> Step:
        messages = [m for m in request.get("messages") or [] if isinstance(m, dict)]
        form = request.get("response_format")
        if form is not None and not self.native:
            return Step.error(400, "this model does not support response_format")
        last_user = max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=-1)
        since = messages[last_user + 1 :]
        tools = {
            t["function"]["name"]: t["function"]
            for t in request.get("tools") or []
            if isinstance(t, dict) and isinstance(t.get("function"), dict)
        }
        asked = text_of(messages[last_user].get("content")) if last_user >= 0 else ""
        done = sum(1 for m in since if m.get("role") == "assistant" and m.get("tool_calls"))
        plan = planned_steps(asked, set(tools))
        if done < len(plan):
            return self._calls(plan[done], tools)
        if (forced := self._forced(request.get("tool_choice"), tools)) is not None:
            return self._calls([(forced, None)], tools)
        unasked = [(name, None) for name in tools if name in self.unasked]
        if unasked and not done:
            return self._calls(unasked, tools)
        if form is not None or self._prompted(messages) is not None:
            return Step.reply(json.dumps(self._structured(form, messages)))
        results = _last_results(since)
        step = Step.reply("tool said: " + " | ".join(results)) if results else echo_step(request)
        return _within(step, request)

    def _calls(self, step: list[tuple[str, dict[str, Any] | None]], tools: dict[str, Any]) -> Step:
        calls = [
            (
                name,
                args
                if args is not None
                else fill(tools[name].get("parameters") or {}, self.values),
            )
            for name, args in step
        ]
        if len(calls) == 1:
            return Step.tool_call(*calls[0])
        return Step.tool_calls(calls)

    @staticmethod
    def _forced(choice: Any, tools: dict[str, Any]) -> str | None:
        if isinstance(choice, dict):
            name = (choice.get("function") or {}).get("name")
            return name if name in tools else None
        if choice != "required" or not tools:
            return None
        # What a model told to call a tool calls: the output tool a framework offers for its
        # typed answer (pydantic-ai's final_result), else the last one offered (the client's
        # tools come after nanomem's own).
        names = list(tools)
        return next((n for n in names if n.startswith("final_result")), names[-1])

    @staticmethod
    def _prompted(messages: list[dict[str, Any]]) -> dict[str, Any] | None:
        """The schema the system messages ask for; the last one written (a client's
        instructions come after nanomem's own prompt)."""
        found = None
        for message in messages:
            if message.get("role") in ("system", "developer"):
                schema = schema_in(text_of(message.get("content")))
                found = schema if schema is not None else found
        return found

    def _structured(self, form: Any, messages: list[dict[str, Any]]) -> Any:
        if isinstance(form, dict) and form.get("type") == "json_schema":
            return fill((form.get("json_schema") or {}).get("schema") or {}, self.values)
        prompted = self._prompted(messages)
        if prompted is not None:
            return fill(prompted, self.values)
        asked = [text_of(m.get("content")) for m in messages if m.get("role") == "user"]
        return {**self.values, "answer": asked[-1] if asked else ""}


def _looks_like_schema(found: dict[str, Any]) -> bool:
    """A schema of an object or list, not an example instance: its properties are schemas."""
    props = found.get("properties")
    if isinstance(props, dict):
        return all(isinstance(v, dict) for v in props.values())
    return "$defs" in found or found.get("type") in ("object", "array")


def _within(step: Step, request: dict[str, Any]) -> Step:
    """A text cut at the request's max_tokens (four characters a token), as a model stops."""
    limit = request.get("max_completion_tokens") or request.get("max_tokens")
    text = step.text or ""
    if not isinstance(limit, int) or len(text) <= 4 * limit:
        return step
    return replace(step, text=text[: 4 * limit], finish="length")


def _last_results(since: list[dict[str, Any]]) -> list[str]:
    """The results of the last tool-call step, in order, as a model reads them: the text
    between nanomem's `<<untrusted …>>` markers, not the markers."""
    out: list[str] = []
    for message in reversed(since):
        if message.get("role") != "tool":
            break
        out.insert(0, unmarked(text_of(message.get("content"))))
    return out


def unmarked(text: str) -> str:
    """The text between nanomem's `<<untrusted …>>` markers (all of `text` without them)."""
    marked = _MARKED.fullmatch(text.strip())
    return marked.group(2) if marked else text

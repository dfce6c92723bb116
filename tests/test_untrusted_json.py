import json

import pytest

from nanomem.text.untrusted_json import MAX_DEPTH, TooDeep, depth_exceeds, loads


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


def test_the_bound_itself_is_read_and_one_more_level_is_not() -> None:
    assert loads(nested(MAX_DEPTH)) is not None
    with pytest.raises(TooDeep, match="deeper than 64"):
        loads(nested(MAX_DEPTH + 1))


def test_brackets_inside_strings_do_not_count() -> None:
    text = json.dumps({"a": ["[" * 500, '\\"[[[' * 100, "}" * 50]})
    assert not depth_exceeds(text)
    assert loads(text)["a"][0] == "[" * 500


def test_bytes_and_text_alike_and_siblings_are_not_depth() -> None:
    wide = "[" + ",".join(["[[]]"] * 10_000) + "]"
    assert not depth_exceeds(wide) and not depth_exceeds(wide.encode())
    assert depth_exceeds(nested(100_000).encode())


def test_too_deep_is_caught_where_bad_json_is() -> None:
    for catch in (ValueError, json.JSONDecodeError):
        with pytest.raises(catch):
            loads("[" * 100_000)
    assert str(TooDeep("x")) == "x"

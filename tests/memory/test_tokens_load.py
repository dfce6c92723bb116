"""nanomem's fast cl100k loader builds exactly tiktoken's own encoding."""

from __future__ import annotations

from nanomem.memory.tokens import BpeTokenizer, _cl100k


def test_the_fast_loader_matches_tiktoken() -> None:
    import tiktoken

    BpeTokenizer().count("points tiktoken at the file litellm ships")
    ours, theirs = _cl100k(), tiktoken.get_encoding("cl100k_base")
    assert ours._pat_str == theirs._pat_str
    assert ours._special_tokens == theirs._special_tokens
    assert ours._mergeable_ranks == theirs._mergeable_ranks
    text = "Hello wörld 😀\n\n  def f(x):\treturn x**2  # 12345 'll 've"
    assert ours.encode_ordinary(text) == theirs.encode_ordinary(text)

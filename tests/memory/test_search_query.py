from nanomem.features.recall.search_query import MAX_CHARS, MAX_TERMS, parse_query


def test_every_term_is_quoted() -> None:
    query = parse_query('attic "in the" note* AND')
    assert query.match() == 'content : ("attic" "in the" "note"* "AND")'
    assert parse_query("ab cd").match(any_word=True) == 'content : ("ab" OR "cd")'
    assert parse_query("- * ()").match() is None
    assert query.notes == ()


def test_a_short_prefix_is_a_whole_word_and_says_so() -> None:
    query = parse_query("a* ab* abc*")
    assert query.terms == ('"a"', '"ab"', '"abc"*')
    assert query.notes == ("A prefix needs at least 3 letters: a*, ab* searched as whole words.",)


def test_the_same_term_counts_once() -> None:
    query = parse_query("a* " * 3000)
    assert query.terms == ('"a"',)
    assert query.notes[0] == f"The query was cut to its first {MAX_CHARS} characters."


def test_at_most_max_terms_words_are_searched() -> None:
    words = [f"word{i}" for i in range(40)]
    query = parse_query(" ".join(words))
    assert query.terms == tuple(f'"{w}"' for w in words[:MAX_TERMS])
    assert query.notes == (f"Only the first {MAX_TERMS} words were searched (8 more left out).",)


def test_a_long_phrase_counts_each_word() -> None:
    phrase = " ".join(f"w{i}" for i in range(50))
    query = parse_query(f'"{phrase}"')
    assert query.terms == ('"' + " ".join(f"w{i}" for i in range(MAX_TERMS)) + '"',)
    assert "18 more left out" in query.notes[0]

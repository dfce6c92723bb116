"""Counts in words: "1 entry", "2 entries" (never "1 entries")."""


def plural(count: int, one: str, many: str = "") -> str:
    """`count` and the noun that agrees with it; `many` defaults to `one` + "s"."""
    return f"{count} {one if count == 1 else many or one + 's'}"

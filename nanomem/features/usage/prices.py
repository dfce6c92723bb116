"""What a model's tokens cost, from the price table litellm ships, read as data.

litellm keeps its prices in `model_prices_and_context_window_backup.json` inside its package
(what it uses itself with LITELLM_LOCAL_MODEL_COST_MAP, as nanomem runs it). Importing litellm
costs ~2 s, so the file is found through the import system without running the package, read
once per process with bounds (its size, one model's entry parsed at a time), and only the
prices are kept. A model that is not in the table
has no price: its cost is unknown, never 0.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loguru import logger

TABLE_NAMES = (
    "model_prices_and_context_window_backup.json",
    "model_prices_and_context_window.json",
)
MAX_TABLE_BYTES = 64 * 2**20  # the table is ~3 MB; a file far larger is not it
MAX_MODELS = 100_000


@dataclass(frozen=True)
class Price:
    """US dollars per token. Cached prompt tokens cost `cache_read` where the table gives it,
    tokens written to the cache `cache_write`; else they cost what other prompt tokens do."""

    prompt: float
    completion: float
    cache_read: float | None = None
    cache_write: float | None = None

    def cost(self, prompt: int, completion: int, cached: int = 0, cache_write: int = 0) -> float:
        read = self.prompt if self.cache_read is None else self.cache_read
        write = self.prompt if self.cache_write is None else self.cache_write
        plain = max(prompt - cached - cache_write, 0)
        paid = plain * self.prompt + cached * read + cache_write * write
        return paid + completion * self.completion


class PriceTable:
    """Prices by model name, matched as litellm matches them: the name as configured, then,
    for `provider/name`, the bare name where the table says that provider serves it."""

    def __init__(self, entries: dict[str, tuple[Price, str]], source: Path | None = None) -> None:
        self.entries = entries  # lower-cased name -> (price, litellm's provider name)
        self.source = source

    def price(self, model: str) -> Price | None:
        name = model.strip().lower()
        if (found := self.entries.get(name)) is not None:
            return found[0]
        provider, _, rest = name.partition("/")
        if rest and (found := self.entries.get(rest)) is not None and found[1] == provider:
            return found[0]
        return None


def litellm_folder() -> Path | None:
    """The installed litellm package's folder, found without importing it."""
    try:
        spec = importlib.util.find_spec("litellm")
    except (ImportError, ValueError):
        return None
    places = list(spec.submodule_search_locations or ()) if spec is not None else []
    return Path(places[0]) if places else None


@functools.cache
def price_table() -> PriceTable:
    """litellm's table, read once per process (~0.4 s); empty when it cannot be read."""
    folder = litellm_folder()
    for name in TABLE_NAMES if folder is not None else ():
        assert folder is not None
        path = folder / name
        try:
            return PriceTable(read_table(path), path)
        except FileNotFoundError:
            continue
        except (OSError, ValueError) as exc:
            logger.warning("litellm's price table {} cannot be read: {}", path, exc)
    return PriceTable({})


def read_table(path: Path) -> dict[str, tuple[Price, str]]:
    """The prices in a table of litellm's format; ValueError when it is not one."""
    chunks: list[bytes] = []
    size = 0
    with path.open("rb") as fh:
        # In pieces: read(MAX_TABLE_BYTES + 1) would set aside the whole 64 MiB at once.
        while chunk := fh.read(2**20):
            size += len(chunk)
            if size > MAX_TABLE_BYTES:
                raise ValueError(f"larger than {MAX_TABLE_BYTES} bytes")
            chunks.append(chunk)
    raw = b"".join(chunks)
    del chunks
    entries: dict[str, tuple[Price, str]] = {}
    for name, info in _models(raw.decode("utf-8", "replace")):
        if len(entries) >= MAX_MODELS:
            break
        if (price := _price(info)) is not None:
            provider = info.get("litellm_provider")
            entries[name.lower()] = (price, provider if isinstance(provider, str) else "")
    return entries


def _models(text: str) -> Iterator[tuple[str, Any]]:
    """The top-level object's members one at a time: only one model's entry is parsed at
    once (the whole table as Python objects would take ~60 MB for a moment)."""
    decoder = json.JSONDecoder()
    at = _skip(text, 0)
    if text[at : at + 1] != "{":
        raise ValueError("not a JSON object of models")
    at = _skip(text, at + 1)
    if text[at : at + 1] == "}":
        return
    while True:
        name, at = _value(decoder, text, at)
        at = _skip(text, at)
        if not isinstance(name, str) or text[at : at + 1] != ":":
            raise ValueError(f"not a JSON object of models (at character {at})")
        info, at = _value(decoder, text, _skip(text, at + 1))
        yield name, info
        at = _skip(text, at)
        if text[at : at + 1] == "}":
            return
        if text[at : at + 1] != ",":
            raise ValueError(f"not a JSON object of models (at character {at})")
        at = _skip(text, at + 1)


def _value(decoder: json.JSONDecoder, text: str, at: int) -> tuple[Any, int]:
    try:
        return decoder.raw_decode(text, at)
    except RecursionError:  # nested beyond Python's stack: refused like any bad JSON
        raise ValueError("JSON nested too deeply to read") from None


def _skip(text: str, at: int) -> int:
    """The index of the next character that is not JSON whitespace."""
    while at < len(text) and text[at] in " \t\r\n":
        at += 1
    return at


def _price(info: Any) -> Price | None:
    """A chat model's per-token prices; None when the entry has none to use."""
    if not isinstance(info, dict):
        return None
    prompt, completion = (
        _cost(info.get("input_cost_per_token")),
        _cost(info.get("output_cost_per_token")),
    )
    if prompt is None or completion is None:
        return None
    return Price(
        prompt,
        completion,
        _cost(info.get("cache_read_input_token_cost")),
        _cost(info.get("cache_creation_input_token_cost")),
    )


def _cost(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    number = float(value)
    return number if math.isfinite(number) and number >= 0 else None

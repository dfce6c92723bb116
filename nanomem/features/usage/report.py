"""Sums of usage.jsonl's records: per chat for `/usage`, per day and chat for `nanomem usage`.

Days are the machine's local calendar days. Cost is what litellm's price table says each
record's model costs; calls of a model it does not list are counted as unpriced, and a sum
with any of them has no total cost, only the part that is known.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nanomem.features.usage.ledger import Record, read_since
from nanomem.features.usage.prices import Price, PriceTable


@dataclass
class Totals:
    calls: int = 0
    prompt: int = 0  # cached and cache-written tokens included
    completion: int = 0
    cached: int = 0
    cache_write: int = 0
    priced_cost: float = 0.0  # US dollars, of the calls whose model has a price
    unpriced: int = 0  # calls whose model has none

    def add(self, record: Record, price: Price | None) -> None:
        self.calls += 1
        self.prompt += record.prompt
        self.completion += record.completion
        self.cached += record.cached
        self.cache_write += record.cache_write
        if price is None:
            self.unpriced += 1
        else:
            self.priced_cost += price.cost(
                record.prompt, record.completion, record.cached, record.cache_write
            )

    def merge(self, other: Totals) -> None:
        self.calls += other.calls
        self.prompt += other.prompt
        self.completion += other.completion
        self.cached += other.cached
        self.cache_write += other.cache_write
        self.priced_cost += other.priced_cost
        self.unpriced += other.unpriced

    @property
    def tokens(self) -> int:
        return self.prompt + self.completion

    @property
    def cost(self) -> float | None:
        """The whole cost; None (unknown) when any call's model has no price."""
        return None if self.unpriced else self.priced_cost

    def as_json(self) -> dict[str, Any]:
        return {
            "calls": self.calls,
            "prompt_tokens": self.prompt,
            "completion_tokens": self.completion,
            "cached_tokens": self.cached,
            "cache_write_tokens": self.cache_write,
            "cost_usd": _rounded(self.cost),
            "priced_cost_usd": _rounded(self.priced_cost),
            "unpriced_calls": self.unpriced,
        }

    def describe(self) -> str:
        """One line: `1,234 prompt (1,024 cached) · 56 completion · 2 calls · $0.0012`."""
        if not self.calls:
            return "no model calls"
        cached = f" ({self.cached:,} cached)" if self.cached else ""
        calls = "1 call" if self.calls == 1 else f"{self.calls:,} calls"
        return (
            f"{self.prompt:,} prompt{cached} · {self.completion:,} completion · {calls} · "
            f"{self.cost_text()}"
        )

    def cost_text(self) -> str:
        if not self.calls:
            return "$0"
        if self.unpriced == self.calls:
            return "cost unknown"
        known = dollars(self.priced_cost)
        if self.unpriced:
            return f"{known} + unknown ({self.unpriced:,} unpriced)"
        return known


def dollars(cost: float) -> str:
    return f"${cost:,.2f}" if cost >= 1 else f"${cost:.4f}"


def _rounded(cost: float | None) -> float | None:
    return None if cost is None else round(cost, 8)


class Pricing:
    """Prices by model name, each looked up once."""

    def __init__(self, table: PriceTable) -> None:
        self.table = table
        self._found: dict[str, Price | None] = {}

    def __call__(self, model: str) -> Price | None:
        if model not in self._found:
            self._found[model] = self.table.price(model)
        return self._found[model]


def day_of(at: float) -> dt.date:
    """The local calendar day of a moment."""
    return dt.datetime.fromtimestamp(at).date()


def start_of(day: dt.date) -> float:
    """Local midnight at the start of `day`."""
    return dt.datetime.combine(day, dt.time()).timestamp()


@dataclass
class ChatUsage:
    """What `/usage` shows a chat."""

    last_turn: Totals | None  # None: no turn in the days read
    today: Totals
    week: Totals  # today and the 6 days before
    purposes: dict[str, Totals]  # of the week
    home_today: Totals | None  # the whole home; None where the chat may not see it
    models: dict[str, bool] = field(default_factory=dict)  # seen this week: priced?


def chat_usage(path: Path, chat: str, now: float, pricing: Pricing, *, home: bool) -> ChatUsage:
    """This chat's last turn, today and the last 7 days; with `home`, the whole home today."""
    today = day_of(now)
    midnight = start_of(today)
    week_start = start_of(today - dt.timedelta(days=6))
    usage = ChatUsage(None, Totals(), Totals(), defaultdict(Totals), Totals() if home else None)
    last_turn = ""
    for record in read_since(path, week_start):
        price = pricing(record.model)
        if record.at >= midnight and usage.home_today is not None:
            usage.home_today.add(record, price)
        if record.chat != chat:
            continue
        usage.models[record.model] = price is not None
        usage.week.add(record, price)
        usage.purposes[record.purpose].add(record, price)
        if record.at >= midnight:
            usage.today.add(record, price)
        if record.purpose == "turn" and record.turn:
            if not last_turn:  # newest first: the first turn seen is the last one
                last_turn, usage.last_turn = record.turn, Totals()
            if record.turn == last_turn and usage.last_turn is not None:
                usage.last_turn.add(record, price)
    usage.purposes = dict(usage.purposes)
    return usage


@dataclass
class Daily:
    """What `nanomem usage` shows: per day and chat, per purpose, per model, and in all."""

    first_day: dt.date
    last_day: dt.date
    rows: dict[tuple[dt.date, str], Totals]
    purposes: dict[str, Totals]
    models: dict[str, Totals]
    total: Totals
    priced: dict[str, bool]  # by model

    def by_day(self) -> list[tuple[dt.date, Totals]]:
        """Every day from the first to the last, oldest first; a day without calls is empty."""
        days: dict[dt.date, Totals] = {}
        day = self.first_day
        while day <= self.last_day:
            days[day] = Totals()
            day += dt.timedelta(days=1)
        for (day, _), totals in self.rows.items():
            days.setdefault(day, Totals()).merge(totals)
        return sorted(days.items())

    def by_chat(self) -> list[tuple[str, Totals]]:
        """Each chat's sums over the days, the most tokens first."""
        chats: dict[str, Totals] = defaultdict(Totals)
        for (_, chat), totals in self.rows.items():
            chats[chat].merge(totals)
        return sorted(chats.items(), key=lambda item: -item[1].tokens)

    def as_json(self) -> dict[str, Any]:
        return {
            "from": self.first_day.isoformat(),
            "to": self.last_day.isoformat(),
            "timezone": _zone(),
            "days": [
                {"day": day.isoformat(), "chat": chat, **totals.as_json()}
                for (day, chat), totals in sorted(self.rows.items())
            ],
            "purposes": {name: t.as_json() for name, t in sorted(self.purposes.items())},
            "models": {
                name: {**t.as_json(), "priced": self.priced[name]}
                for name, t in sorted(self.models.items())
            },
            "total": self.total.as_json(),
        }


def daily(path: Path, days: int, now: float, pricing: Pricing, chat: str | None = None) -> Daily:
    """The last `days` local days up to today, for every chat or only `chat`."""
    last = day_of(now)
    first = last - dt.timedelta(days=days - 1)
    return collect(read_since(path, start_of(first)), first, last, pricing, chat)


def collect(
    records: Iterable[Record], first: dt.date, last: dt.date, pricing: Pricing, chat: str | None
) -> Daily:
    rows: dict[tuple[dt.date, str], Totals] = defaultdict(Totals)
    purposes: dict[str, Totals] = defaultdict(Totals)
    models: dict[str, Totals] = defaultdict(Totals)
    result = Daily(first, last, rows, purposes, models, Totals(), {})
    for record in records:
        if chat is not None and record.chat != chat:
            continue
        price = pricing(record.model)
        result.rows[(day_of(record.at), record.chat)].add(record, price)
        result.purposes[record.purpose].add(record, price)
        result.models[record.model].add(record, price)
        result.priced[record.model] = price is not None
        result.total.add(record, price)
    result.rows, result.purposes, result.models = (
        dict(result.rows),
        dict(result.purposes),
        dict(result.models),
    )
    return result


def _zone() -> str:
    """The local zone's name and offset now, for readers of the JSON."""
    now = dt.datetime.now().astimezone()
    return f"{now.tzname()} (UTC{now.strftime('%z')[:3]}:{now.strftime('%z')[3:]})"

"""The loopback servers a gateway talks to: the fake Bot API and the fake model server. The
`servers` fixture (a plugin of tests/conftest.py) gives each test its own pair, answering with
the `model` fixture, which a test module overrides to script the model its own way."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from tests.fakes.openai_server import FakeOpenAI, Step, echo_step
from tests.fakes.telegram_server import FakeTelegram

Model = Callable[[dict[str, Any]], Step]


@contextmanager
def loopback(model: Model) -> Iterator[tuple[FakeTelegram, FakeOpenAI]]:
    """A fake Bot API and a fake model server answering with `model`."""
    with FakeTelegram() as telegram, FakeOpenAI() as llm:
        llm.set_fallback(model)
        yield telegram, llm


@pytest.fixture
def model() -> Model:
    return echo_step


@pytest.fixture
def servers(model: Model) -> Iterator[tuple[FakeTelegram, FakeOpenAI]]:
    """Each test's own: a gateway of its own polls them (two would steal each other's updates)."""
    with loopback(model) as both:
        yield both

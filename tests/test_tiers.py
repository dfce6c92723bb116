"""The tier rule in conftest.py names files and tests that exist: a renamed test must not slip
into the fast tier (or vanish from the slow one) unnoticed."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import SLOW_FILES, SLOW_TESTS

TESTS = Path(__file__).parent


def found(name: str) -> Path:
    (path,) = [p for p in TESTS.rglob(name) if "benchmarks" not in p.parts]
    return path


def test_every_slow_file_exists() -> None:
    for name in SLOW_FILES:
        assert found(name).is_file(), name


def test_every_slow_test_exists_in_its_file() -> None:
    for name, tests in SLOW_TESTS.items():
        source = found(name).read_text()
        for test in tests:
            assert f"def {test}(" in source, f"{name}: no test named {test}"

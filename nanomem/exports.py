"""What a package lets the rest of the code use, loaded on first use.

Each package's `__init__.py` lists its public names; importing the package costs nothing until
a name is used, so `nanomem chat` reaches its prompt without loading the turn's machinery.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from typing import Any


def lazy_exports(package: str, where: dict[str, tuple[str, ...]]) -> Callable[[str], Any]:
    """A module `__getattr__` for `package` that imports each public name from its submodule."""
    module_of = {name: module for module, names in where.items() for name in names}

    def __getattr__(name: str) -> Any:
        module = module_of.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        loaded = importlib.import_module(f"{package}.{module}")
        # Every name of that module at once: importing it set the package's attribute of its
        # own name to the module (`nanomem.tools.untrusted`), which the function of that
        # name must replace. The next lookups are plain attributes.
        for each in where[module]:
            setattr(sys.modules[package], each, getattr(loaded, each))
        return getattr(loaded, name)

    return __getattr__

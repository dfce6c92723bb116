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
        value = getattr(loaded, name)
        setattr(sys.modules[package], name, value)  # the next lookup is a plain attribute
        if module_of.get(module) == module:
            # Loading `tools.untrusted` for another name bound the package's `untrusted` to the
            # submodule: the public name is the function of that name, not the module.
            setattr(sys.modules[package], module, getattr(loaded, module))
        return value

    return __getattr__

"""nanomem uses no pydantic plugins: they are switched off, and nothing is paid to look for them.

Looking for plugins scans every installed package (~20 ms), hence PYDANTIC_DISABLE_PLUGINS.
Even then pydantic imports its plugin loader for the first model it builds, and the loader
imports importlib.metadata (email, zipfile, csv: ~17 ms of CPU and 2.6 MiB of every start):
while plugins are off, a loader that finds none stands in for it; should they be switched on
again, it hands over to pydantic's own (issue 30 #7).
"""

from __future__ import annotations

import os
import sys
import types
from typing import Any

LOADER = "pydantic.plugin._loader"
OFF = ("__all__", "1", "true")  # the values pydantic's loader reads as "none"


def switch_off() -> None:
    """Plugins off unless the environment says otherwise, and their loader a stand-in."""
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
    if os.environ["PYDANTIC_DISABLE_PLUGINS"] not in OFF or LOADER in sys.modules:
        return  # plugins wanted, or the loader already imported (an in-process caller)
    loader = types.ModuleType(LOADER, "pydantic's plugin loader, while plugins are off")
    setattr(loader, "get_plugins", _get_plugins)  # noqa: B010 (a module made here)
    sys.modules[LOADER] = loader


def _get_plugins() -> Any:
    if os.environ.get("PYDANTIC_DISABLE_PLUGINS") in OFF:
        return ()
    import importlib

    del sys.modules[LOADER]
    return importlib.import_module(LOADER).get_plugins()

"""Structural rules: the layers and who may import whom, who may import the heavy libraries,
and a module size alarm."""

import ast
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CORE = sorted((ROOT / "nanomem").rglob("*.py"))
CHANNELS = sorted((ROOT / "channels").rglob("*.py"))


def imported_modules(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def importers_of(package: str, files: list[Path]) -> set[str]:
    return {
        str(path.relative_to(ROOT))
        for path in files
        if any(name == package or name.startswith(package + ".") for name in imported_modules(path))
    }


# The layers, bottom first: a module may import its own layer and the ones below, never above.
BASE = "base"  # nanomem/*.py and text/ that everything stands on: config, log, home, locks, files
TOP = "top"  # composition and entry points: app, cli/, gateway
LAYERS: dict[str, int] = {
    BASE: 0,
    "providers": 1,
    "tools": 1,
    "memory": 2,
    "agent": 3,
    "features": 4,
    TOP: 5,
}
BASE_MODULES = {
    "__init__",
    "audience",
    "channel_settings",
    "config",
    "config_section",
    "durable",
    "exports",
    "gateway_state",
    "home",
    "locks",
    "log",
    "pools",
    "setting_source",
    "text",
    "thread_batch",
    "web_logins",
}
# What a channel may use: the channel port and the settings and helpers it is built from.
CHANNEL_MAY_IMPORT = {
    "agent",
    "audience",  # the Sender a channel vouches for
    "channel_settings",
    "config",
    "config_section",
    "durable",  # crash-safe writes of what a channel keeps (the agent API's sent files)
    "log",
    "memory",  # the web app shows the sessions (its Chat page) and the memory they made
    "text",
    "thread_batch",
    "web_logins",  # the web app's one-time login codes and logouts, kept in the home
    "app",
}
# The web app's pages show and change what the slash commands do (the memory, its versions,
# Dream's review, the features' state), by calling the same functions under the same locks;
# and the gateway's health, as GET /health reports it.
WEB_MAY_IMPORT = CHANNEL_MAY_IMPORT | {"features", "locks", "gateway"}


def layer_of(module: str) -> str:
    """The layer of a dotted `nanomem.…` module name."""
    parts = module.split(".")
    if len(parts) > 1 and parts[1] in LAYERS:
        return parts[1]
    return BASE if len(parts) == 1 or parts[1] in BASE_MODULES else TOP


def module_name(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts)


def core_imports() -> list[tuple[str, str]]:
    """(importing module, imported module) for every import of nanomem by the core."""
    return [
        (module_name(path), name)
        for path in CORE
        for name in imported_modules(path)
        if name == "nanomem" or name.startswith("nanomem.")
    ]


def test_core_never_imports_channels() -> None:
    assert importers_of("channels", CORE) == set()


def test_no_module_imports_a_layer_above_its_own() -> None:
    upward = [
        f"{importer} ({layer_of(importer)}) imports {imported} ({layer_of(imported)})"
        for importer, imported in core_imports()
        if LAYERS[layer_of(imported)] > LAYERS[layer_of(importer)]
    ]
    assert upward == []


def test_sibling_packages_do_not_import_each_other() -> None:
    across = [
        f"{importer} imports {imported}"
        for importer, imported in core_imports()
        if layer_of(importer) != layer_of(imported)
        and LAYERS[layer_of(imported)] == LAYERS[layer_of(importer)]
    ]
    assert across == []


def feature_of(module: str) -> str | None:
    """The feature a dotted `nanomem.…` module belongs to (`nanomem.features.<name>…`)."""
    parts = module.split(".")
    return parts[2] if len(parts) > 2 and parts[1] == "features" else None


# The composition root, the CLI that runs a feature's work by name (`nanomem dream`), the
# importers (`nanomem import`), which write into the stores features keep (schedules) as the
# CLI does, and the doctor, which starts an MCP server as the feature does to check it. The
# gateway reaches features only through the seam (their health, background work, outlet).
MAY_IMPORT_FEATURES = ("nanomem.app", "nanomem.cli", "nanomem.importers", "nanomem.doctor")


def test_the_core_never_imports_a_feature() -> None:
    """Features import the core; the core knows them only through the Feature base class
    (nanomem/agent/feature.py), and only the composition root and the CLI name one."""
    reached = [
        f"{importer} imports {imported}"
        for importer, imported in core_imports()
        if feature_of(imported) is not None
        and feature_of(importer) is None
        and not any(within(importer, allowed) for allowed in MAY_IMPORT_FEATURES)
    ]
    assert reached == []


def test_no_feature_imports_another() -> None:
    """Each feature stands on the core alone: one can be left out without touching the rest."""
    reached = [
        f"{importer} imports {imported}"
        for importer, imported in core_imports()
        if feature_of(importer) is not None
        and feature_of(imported) not in (None, feature_of(importer))
    ]
    assert reached == []


def test_packages_are_used_through_their_public_names() -> None:
    """Outside a package, only `from nanomem.<package> import <name in __all__>`."""
    reached_in = []
    for path in CORE + CHANNELS:
        importer = module_name(path)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.ImportFrom) or not node.module or node.level:
                continue
            parts = node.module.split(".")
            if parts[0] != "nanomem" or len(parts) < 2 or parts[1] not in LAYERS:
                continue
            # A feature is a package of its own: nanomem.features.<name>
            depth = 3 if parts[1] == "features" else 2
            package = ".".join(parts[:depth])
            if importer.startswith(f"{package}."):
                continue  # inside its own package
            public = importlib.import_module(package).__all__
            if len(parts) > depth or any(alias.name not in public for alias in node.names):
                names = ", ".join(alias.name for alias in node.names)
                reached_in.append(f"{importer}: from {node.module} import {names}")
    assert reached_in == []


FEATURES = sorted(
    f"features.{path.parent.name}" for path in (ROOT / "nanomem/features").glob("*/__init__.py")
)


@pytest.mark.parametrize("package", sorted(set(LAYERS) - {BASE, TOP, "features"}) + FEATURES)
def test_every_public_name_resolves(package: str) -> None:
    module = importlib.import_module(f"nanomem.{package}")
    assert module.__all__, package
    for name in module.__all__:
        assert getattr(module, name) is not None, f"nanomem.{package}.{name}"


def test_no_channel_imports_another() -> None:
    across = sorted(
        f"{module_name(path)} imports {name}"
        for path in CHANNELS
        for name in imported_modules(path)
        if name.startswith("channels.") and name.split(".")[1] != module_name(path).split(".")[1]
    )
    assert across == []


# The turn engine, the features, the gateway and the composition root: none of them knows which
# channels exist (only nanomem/channel_registry.py names them, and the settings and the CLI
# that configure them).
CHANNEL_BLIND = [
    path
    for path in CORE
    if path.relative_to(ROOT / "nanomem").parts[0]
    in {"agent", "memory", "tools", "providers", "features", "gateway", "app.py"}
]
CHANNEL_NAMES = {"telegram", "api", "terminal", "cli"}


def docstrings(tree: ast.AST) -> set[int]:
    kinds = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
    return {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, kinds) and node.body and isinstance(node.body[0], ast.Expr)
    }


def test_the_core_and_the_gateway_name_no_channel() -> None:
    named = []
    for path in CHANNEL_BLIND:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        skip = docstrings(tree)
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and id(node) not in skip
            ):
                word = node.value.lower()
                if word in CHANNEL_NAMES or (word.split(":")[0] in CHANNEL_NAMES and ":" in word):
                    named.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.value!r}")
            elif isinstance(node, ast.Attribute) and node.attr in CHANNEL_NAMES:
                named.append(f"{path.relative_to(ROOT)}:{node.lineno} .{node.attr}")
    assert named == []


CHANNEL_MEMBERS = {
    "admits",
    "capabilities",
    "owner_chat",
    "problem",
    "pushes",
    "readmit",
    "routes",
    "send",
    "stop_receiving",
}


def probes_a_channel(call: ast.Call) -> bool:
    """getattr/hasattr on something named for a channel, or for one of a channel's members."""
    if not (isinstance(call.func, ast.Name) and call.func.id in ("getattr", "hasattr")):
        return False
    target, *rest = call.args or [None]
    named = target is not None and "channel" in ast.unparse(target).lower()
    member = rest and isinstance(rest[0], ast.Constant) and rest[0].value in CHANNEL_MEMBERS
    return named or bool(member)


def test_the_core_never_probes_a_channel_for_what_it_can_do() -> None:
    """What a channel can do is its declared Capabilities and the Channel protocol's methods,
    never found out with getattr/hasattr."""
    probes = sorted(
        f"{path.relative_to(ROOT)}:{node.lineno}"
        for path in CORE
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Call) and probes_a_channel(node)
    )
    assert probes == []


def channel_may_import(channel: str) -> set[str]:
    return WEB_MAY_IMPORT if channel.startswith("channels.web.") else CHANNEL_MAY_IMPORT


def test_channels_plug_in_through_the_port() -> None:
    reached = sorted(
        f"{module_name(path)} imports {name}"
        for path in CHANNELS
        for name in imported_modules(path)
        if name.startswith("nanomem.")
        and name.split(".")[1] not in channel_may_import(module_name(path))
    )
    assert reached == []


@pytest.mark.parametrize(
    ("package", "allowed"),
    [
        ("litellm", {"nanomem/providers/litellm_provider.py"}),
        ("telegram", {"channels/telegram/channel.py", "channels/telegram/transport.py"}),
        ("dulwich", {"nanomem/memory/gitstore.py"}),
    ],
)
def test_heavy_libraries_have_one_importer(package: str, allowed: set[str]) -> None:
    assert importers_of(package, CORE + CHANNELS) <= allowed


def test_the_core_has_no_http_client_outside_providers() -> None:
    # Model calls go through providers/ (httpx in one module, or litellm); aiohttp serves the
    # gateway's /health endpoint, and is the web tools' client: its resolver is a port the
    # address guard fills, so the address checked is the one connected to (httpx has none).
    web = {"nanomem/features/web/client.py", "nanomem/features/web/resolver.py"}
    assert importers_of("aiohttp", CORE) <= {"nanomem/gateway/health.py", *web}
    assert importers_of("httpx", CORE) <= {"nanomem/providers/connection.py"}
    lean = {"nanomem/providers/connection.py", "nanomem/providers/network.py"}
    assert importers_of("httpcore", CORE) <= lean


def test_modules_stay_small() -> None:
    # A smell alarm, not a target: a module is split when that serves its reader.
    too_big = {
        str(p.relative_to(ROOT)): n
        for p in CORE + CHANNELS
        if (n := len(p.read_text(encoding="utf-8").splitlines())) > 600
    }
    assert too_big == {}


def test_importing_the_core_has_no_side_effects(tmp_path: Path) -> None:
    import subprocess
    import sys

    code = (
        "import sys, nanomem.app, nanomem.cli.main;"
        "assert 'litellm' not in sys.modules, 'litellm imported eagerly';"
        "assert 'channels' not in sys.modules"
    )
    env = {"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"}
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert list(tmp_path.iterdir()) == []  # no folder or file was created on import


def test_the_chat_prompt_waits_for_nothing_it_does_not_need() -> None:
    """What `nanomem chat` imports before its prompt shows; the rest loads behind it."""
    import subprocess
    import sys

    before_prompt = (
        "nanomem.cli.main, nanomem.config, nanomem.cli.onboard, nanomem.agent, "
        "channels.terminal.channel"
    )
    behind = [
        "nanomem.app",
        "nanomem.agent.loop",
        "loguru",
        "litellm",
        "dulwich",
        "apscheduler",
        "jinja2",
    ]
    code = f"import sys, {before_prompt}; print(sorted(set({behind!r}) & set(sys.modules)))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_files_named_in_the_docs_and_docstrings_exist() -> None:
    """A module moved or renamed leaves no reader looking for it under its old name."""
    import re

    folders = "nanomem|channels|tests|templates|workspace-template"
    named = re.compile(rf"(?<![\w./~-])(?:{folders})/[\w/.-]*\w")
    texts = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *CORE, *CHANNELS]
    missing = sorted(
        f"{text.relative_to(ROOT)}: {path}"
        for text in texts
        for path in set(named.findall(text.read_text(encoding="utf-8")))
        if not (ROOT / path).exists() and not (ROOT / path.rstrip(".")).exists()
    )
    assert missing == []


TESTS = sorted((ROOT / "tests").rglob("*.py"))
SHARED_BY_TESTS = ("tests.helpers", "tests.fakes", "tests.conftest")


def imports_from_tests(path: Path) -> set[str]:
    """Every `tests.…` name `path` imports (`from tests.x import y` counts as tests.x.y)."""
    package = module_name(path).split(".")[:-1]
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            names.update(f"{module}.{alias.name}" for alias in node.names)
    return {name for name in names if name.split(".")[0] == "tests"}


def within(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def may_import(path: Path, name: str) -> bool:
    """A test file may import the shared helpers, and the tools of its own package below tests/
    (tests/chaos/test_chaos.py its harness); any file, never a test file."""
    if any(part.startswith("test_") for part in name.split(".")):
        return False
    if not path.name.startswith("test_") or any(within(name, s) for s in SHARED_BY_TESTS):
        return True
    package = module_name(path).rsplit(".", 1)[0]
    return package != "tests" and within(name, package)


def test_test_files_import_only_the_shared_helpers() -> None:
    """A helper is defined once (tests/helpers, tests/fakes, tests/conftest.py): a test file
    never imports another test file."""
    reached = sorted(
        f"{path.relative_to(ROOT)} imports {name}"
        for path in TESTS
        for name in imports_from_tests(path)
        if not may_import(path, name)
    )
    assert reached == []

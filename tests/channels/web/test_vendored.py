"""The vendored scripts are the packages' own builds: their hashes match VENDORED.md's, and
every one the pages load is listed there."""

from __future__ import annotations

import hashlib
import re

from channels.web.channel import STATIC_DIR
from tests.helpers.browser import REPO

VENDOR = STATIC_DIR / "vendor"


def listed() -> dict[str, str]:
    table = (VENDOR / "VENDORED.md").read_text()
    return dict(re.findall(r"^\| (\S+\.js) \|.*\| ([0-9a-f]{64}) \|$", table, re.MULTILINE))


def test_each_vendored_file_has_the_listed_hash() -> None:
    rows = listed()
    assert rows.keys() == {p.name for p in VENDOR.glob("*.js")}
    for name, digest in rows.items():
        assert hashlib.sha256((VENDOR / name).read_bytes()).hexdigest() == digest, name


def test_the_pages_load_only_listed_scripts_of_our_own_server() -> None:
    base = (REPO / "templates" / "web" / "base.html.j2").read_text()
    sources = re.findall(r'<script src="([^"]+)"', base)
    assert sources, "base.html.j2 loads no script"
    vendored = {s.removeprefix("/static/vendor/") for s in sources if "/vendor/" in s}
    assert vendored <= listed().keys()
    assert all(s.startswith("/static/") for s in sources)
    assert "<script>" not in base

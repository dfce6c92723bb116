"""What a Matrix account asked of Synapse, read from Synapse's access log: each request Synapse
finished, by the account that made it and the kind of call, with the CPU Synapse spent on it
(its `ru=` figure). bench_matrix.py counts a burst's requests with it; tests, what a message
costs."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

# 2026-11-27 21:34:07,541 - synapse.access.http.60049 - ... - {@bot:localhost} Processed
# request: 0.006sec/0.001sec ru=(0.004sec, 0.000sec) ... "PUT /_matrix/... HTTP/1.1" ...
_LINE = re.compile(
    r"\{(?P<who>[^}]*)\} Processed request: [0-9.]+sec/[0-9.]+sec "
    r"ru=\((?P<user>[0-9.]+)sec, (?P<sys>[0-9.]+)sec\).*?"
    r'"(?P<method>[A-Z]+) (?P<path>\S+) HTTP'
)
_KINDS = (
    ("sync", re.compile(r"/sync(\?|$)")),
    ("send", re.compile(r"/rooms/[^/]+/send/")),
    ("typing", re.compile(r"/rooms/[^/]+/typing/")),
    ("receipt", re.compile(r"/rooms/[^/]+/(receipt|read_markers)")),
    ("members", re.compile(r"/rooms/[^/]+/(joined_members|members)")),
    ("event", re.compile(r"/rooms/[^/]+/(event|context)/")),
    ("join", re.compile(r"/(join|rooms/[^/]+/join)(/|\?|$)")),
)
KINDS = [kind for kind, _ in _KINDS] + ["other"]


def kind_of(path: str) -> str:
    return next((kind for kind, pattern in _KINDS if pattern.search(path)), "other")


@dataclass
class Requests:
    """One account's requests in a stretch of the log: how many of each kind, Synapse's CPU."""

    count: Counter[str] = field(default_factory=Counter)
    cpu_s: Counter[str] = field(default_factory=Counter)


class AccessLog:
    """Synapse's log file, read on from where the last look ended."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0

    def skip(self) -> None:
        """What is in the log now is not counted."""
        self.offset = self.path.stat().st_size

    def read(self, who: str) -> Requests:
        """The requests of `who` finished since the last look (a line cut short is left)."""
        found = Requests()
        with self.path.open("rb") as log:
            log.seek(self.offset)
            data = log.read()
        whole = data.rfind(b"\n") + 1
        self.offset += whole
        for line in data[:whole].decode(errors="replace").splitlines():
            match = _LINE.search(line)
            if match is None or match["who"] != who:
                continue
            kind = kind_of(match["path"])
            found.count[kind] += 1
            found.cpu_s[kind] += float(match["user"]) + float(match["sys"])
        return found

"""Hostile archives given to `nanomem import-home`: each refused with a clear error and exit 2,
within bounded time and memory, and the home it was meant for left byte for byte as it was
(no folder made beside it either), also with --force."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import subprocess
import sys
import tarfile
import time
import zlib
from collections.abc import Callable
from pathlib import Path

import pytest

from nanomem.home import Home
from tests.conftest import NANOMEM, cli_env, run_cli_here

Member = tuple[tarfile.TarInfo, bytes]


def regular(name: str, data: bytes = b"x", mode: int = 0o600) -> Member:
    info = tarfile.TarInfo(name)
    info.size, info.mode = len(data), mode
    return info, data


def special(name: str, kind: bytes, linkname: str = "") -> Member:
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.mode = kind, linkname, 0o600
    return info, b""


def manifest_of(files: list[Member], **changes: object) -> dict[str, object]:
    listed = [
        {"path": info.name, "size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
        for info, data in files
    ]
    return {
        "format": "nanomem-home",
        "version": 1,
        "nanomem": "0.1.0",
        "created": "x",
        "secrets_removed": [],
        "files": listed,
        **changes,
    }


def archive(files: list[Member], manifest: dict[str, object] | None = None) -> bytes:
    """A tar.gz as `nanomem export` lays one out: the manifest (by default, true to the
    files) first, then the files."""
    body = json.dumps(manifest if manifest is not None else manifest_of(files)).encode()
    out = io.BytesIO()
    with (
        gzip.GzipFile(fileobj=out, mode="wb", mtime=0) as zipped,
        tarfile.open(fileobj=zipped, mode="w", format=tarfile.PAX_FORMAT) as tar,
    ):
        tar.addfile(regular("manifest.json", body)[0], io.BytesIO(body))
        for info, data in files:
            tar.addfile(info, io.BytesIO(data) if info.isreg() else None)
    return out.getvalue()


def with_manifest_listing(files: list[Member], listed: list[Member]) -> bytes:
    """The files, with a manifest that lists `listed` as though they were there."""
    return archive(files, manifest_of(listed))


def zeros_gzip(inflated: int, prefix: bytes = b"") -> bytes:
    """gzip data inflating to `prefix` and then `inflated` zero bytes, made without ever holding
    them: one fully flushed block of zeros, repeated (no trailer: a reader must stop first)."""
    block = 1 << 20
    pack = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
    head = pack.compress(prefix) + pack.flush(zlib.Z_FULL_FLUSH)
    piece = pack.compress(bytes(block)) + pack.flush(zlib.Z_FULL_FLUSH)
    header = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"
    return header + head + piece * (inflated // block)


def pax_bomb() -> bytes:
    """manifest.json behind a PAX header that claims 8 GiB of zeros."""
    pax = tarfile.TarInfo("././@PaxHeader")
    pax.type, pax.size = tarfile.XHDTYPE, 8 << 30
    return zeros_gzip(8 << 30, prefix=pax.tobuf(tarfile.GNU_FORMAT))


def member_bomb() -> bytes:
    """A file whose header declares 8 GiB (the manifest declares one byte), all zeros."""
    body = json.dumps(manifest_of([regular("workspace/big.md")])).encode()
    padded = body + bytes(-len(body) % tarfile.BLOCKSIZE)
    start = regular("manifest.json", body)[0].tobuf(tarfile.GNU_FORMAT) + padded
    info = tarfile.TarInfo("workspace/big.md")
    info.size = 8 << 30
    return zeros_gzip(8 << 30, prefix=start + info.tobuf(tarfile.GNU_FORMAT))


def sparse_file() -> bytes:
    """A GNU sparse member: a few bytes stored, a gigabyte of holes announced."""
    info = tarfile.TarInfo("workspace/holes.md")
    info.type, info.size = tarfile.GNUTYPE_SPARSE, 1 << 30
    info.sparse = [(0, 0)]  # tobuf() writes no map; tarfile reads an empty one
    listed = manifest_of([regular("workspace/holes.md", bytes(1 << 10))])
    listed["files"] = [{**listed["files"][0], "size": 1 << 30}]  # type: ignore[index]
    body = json.dumps(listed).encode()
    start = regular("manifest.json", body)[0].tobuf(tarfile.GNU_FORMAT)
    start += body + bytes(-len(body) % tarfile.BLOCKSIZE)
    return zeros_gzip(1 << 20, prefix=start + info.tobuf(tarfile.GNU_FORMAT))


def padded_headers() -> bytes:
    """200 one-byte files, each behind a 200 KB PAX header: within each member's room for a
    header, far past what the whole archive may add to its files."""
    files = [regular(f"workspace/f{i}") for i in range(200)]
    for info, _ in files:
        info.pax_headers = {"comment": "a" * 200_000}
    return archive(files)


def unlisted(member: Member) -> Callable[[], bytes]:
    """An archive holding `member`, which its (otherwise true) manifest does not list."""
    return lambda: archive(
        [regular("workspace/a.md"), member], manifest_of([regular("workspace/a.md")])
    )


def cut_short() -> bytes:
    whole = archive([regular("workspace/a.md", bytes(range(256)) * 4000)])
    return whole[: len(whole) // 2]


def many_files() -> bytes:
    listed = [regular(f"workspace/f{i}") for i in range(100_001)]
    return archive([], manifest_of(listed))


def setuid_file() -> bytes:
    return archive([regular("workspace/run.sh", b"#!/bin/sh\n", mode=0o4755)])


CASES: dict[str, tuple[Callable[[], bytes], str]] = {
    "traversal": (unlisted(regular("workspace/../../evil.md")), "outside the destination"),
    "traversal at the top": (unlisted(regular("../evil.md")), "outside the destination"),
    "absolute path": (unlisted(regular("/tmp/evil.md")), "absolute, or leaves its folder"),
    "traversal in the manifest": (
        lambda: archive([regular("workspace/../../evil.md")]),
        "'workspace/../../evil.md': absolute, or leaves its folder",
    ),
    "symlink out": (
        lambda: archive([special("workspace/passwd", tarfile.SYMTYPE, "/etc/passwd")]),
        "absolute path",
    ),
    "relative symlink out": (
        lambda: archive([special("workspace/up", tarfile.SYMTYPE, "../../../..")]),
        "outside the destination",
    ),
    "symlink within": (
        lambda: archive([special("workspace/soul", tarfile.SYMTYPE, "SOUL.md")]),
        "a symbolic link; only regular files belong",
    ),
    "hardlink out": (
        lambda: archive([special("workspace/shadow", tarfile.LNKTYPE, "/etc/shadow")]),
        "absolute path",
    ),
    "hardlink within": (
        lambda: archive(
            [
                regular("workspace/a.md"),
                special("workspace/b.md", tarfile.LNKTYPE, "workspace/a.md"),
            ]
        ),
        "a hard link; only regular files belong",
    ),
    "device": (
        lambda: archive([special("workspace/null", tarfile.CHRTYPE)]),
        "'workspace/null' is a special file",
    ),
    "fifo": (
        lambda: archive([special("workspace/pipe", tarfile.FIFOTYPE)]),
        "'workspace/pipe' is a special file",
    ),
    "setuid": (setuid_file, "setuid, setgid or sticky bits"),
    "outside a home's files": (lambda: archive([regular(".bashrc")]), "not part of a nanomem home"),
    "too many members": (many_files, "not a list of at most 100,000"),
    "smuggled member": (
        lambda: with_manifest_listing(
            [regular("workspace/a.md"), regular("workspace/b.md")], [regular("workspace/a.md")]
        ),
        "workspace/b.md' : not in the manifest".replace("' :", "':"),
    ),
    "member twice": (
        lambda: with_manifest_listing(
            [regular("workspace/a.md"), regular("workspace/a.md")], [regular("workspace/a.md")]
        ),
        "'workspace/a.md': it comes twice",
    ),
    "listed twice": (
        lambda: with_manifest_listing([], [regular("sessions/a"), regular("sessions/a")]),
        "sessions/a is listed twice",
    ),
    "a file and a folder": (
        lambda: with_manifest_listing([], [regular("workspace/a"), regular("workspace/a/b")]),
        "workspace/a is both a file and a folder",
    ),
    "missing member": (
        lambda: with_manifest_listing([], [regular("workspace/a.md")]),
        "workspace/a.md is in the manifest but not in the archive",
    ),
    "checksum lie": (
        lambda: archive(
            [regular("workspace/a.md", b"the truth")],
            manifest_of(
                [regular("workspace/a.md", b"the lies")]
                and [regular("workspace/a.md", b"a lie!!!!")]
            ),
        ),
        "workspace/a.md: its checksum does not match the manifest",
    ),
    "size lie": (
        lambda: archive(
            [regular("workspace/a.md", b"longer than said")],
            manifest_of([regular("workspace/a.md")]),
        ),
        "the manifest says 1 byte, the archive holds 16 bytes",
    ),
    "no manifest": (lambda: archive([], {"format": "zip"}), "not a nanomem home archive"),
    "newer format": (lambda: archive([], manifest_of([], version=99)), "made by a newer nanomem"),
    "not gzip": (lambda: b"PK\x03\x04 a zip file, not ours", "is not a gzip file"),
    "plain tar": (
        lambda: gzip.decompress(archive([regular("workspace/a.md")])),
        "is not a gzip file",
    ),
    "cut short": (cut_short, "cut short"),
    "gzip of zeros": (lambda: zeros_gzip(2 << 30), "does not begin with manifest.json"),
    "pax header bomb": (pax_bomb, "inflates past what its manifest announces"),
    "sparse file": (sparse_file, "a sparse file; only regular files belong"),
    "padded headers": (padded_headers, "inflates past what its manifest announces"),
    "member bomb": (member_bomb, "the manifest says 1 byte, the archive holds 8,589,934,592 bytes"),
}


def snapshot(root: Path) -> dict[str, tuple[int, bytes]]:
    return {
        p.relative_to(root).as_posix(): (p.lstat().st_mode, b"" if p.is_dir() else p.read_bytes())
        for p in sorted(root.rglob("*"))
    }


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_hostile_archive_changes_nothing(home: Home, tmp_path: Path, case: str) -> None:
    make, said = CASES[case]
    hostile = tmp_path / "hostile.tar.gz"
    hostile.write_bytes(make())
    (home.workspace / "USER.md").write_text("# User\n- Name: Ada\n")  # memory: only --force
    before, around = snapshot(home.root), sorted(home.root.parent.iterdir())
    started = time.monotonic()
    result = run_cli_here("import-home", str(hostile), "--force", env=cli_env(home))
    assert time.monotonic() - started < 20
    assert result.returncode == 2, result.stderr
    assert said in result.stderr and "nothing was changed" in result.stderr
    assert "Traceback" not in result.stderr and result.stdout == ""
    assert snapshot(home.root) == before
    assert sorted(home.root.parent.iterdir()) == around
    assert not (tmp_path.parent / "evil.md").exists() and not Path("/tmp/evil.md").exists()


def test_a_hostile_archive_makes_no_home_where_there_was_none(tmp_path: Path) -> None:
    hostile = tmp_path / "hostile.tar.gz"
    hostile.write_bytes(archive([special("workspace/up", tarfile.SYMTYPE, "../../..")]))
    target = tmp_path / "new" / "home"
    result = run_cli_here(
        "--home", str(target), "import-home", str(hostile), env=cli_env(Home(target))
    )
    assert result.returncode == 2
    assert not (tmp_path / "new").exists()


@pytest.mark.slow  # its own process, to measure its peak memory
@pytest.mark.parametrize("make", [pax_bomb, member_bomb], ids=["pax header", "member"])
def test_a_gzip_bomb_stops_early_in_a_small_process(
    tmp_path: Path, make: Callable[[], bytes]
) -> None:
    """In its own process, to measure its peak memory: 8 GiB announced, refused within a few
    MB inflated."""
    hostile = tmp_path / "bomb.tar.gz"
    hostile.write_bytes(make())
    measure = (
        "import resource, subprocess, sys;"
        "code = subprocess.run(sys.argv[1:], capture_output=True).returncode;"
        "print(code, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)"
    )
    target = tmp_path / "home"
    started = time.monotonic()
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            measure,
            *NANOMEM,
            "--home",
            str(target),
            "import-home",
            str(hostile),
        ],
        capture_output=True,
        text=True,
        env=cli_env(Home(target)),
        timeout=60,
    )
    elapsed = time.monotonic() - started
    code, peak_kib = map(int, result.stdout.split())
    assert code == 2
    assert elapsed < 15
    assert peak_kib < 200 * 1024
    assert not target.exists()


def test_damaged_archives_are_refused_by_name_never_by_a_crash(tmp_path: Path) -> None:
    """Bytes changed at random in the tar (headers, the manifest, data), or cut anywhere: each
    read ends in a success or an ArchiveError, never another exception (a traceback)."""
    import random

    from nanomem.home_archive import ArchiveError
    from nanomem.home_import import read_archive

    sound = gzip.decompress(
        archive(
            [regular("workspace/a.md", b"hello " * 100), regular("sessions/x.jsonl", b"{}\n" * 50)]
        )
    )
    rng = random.Random(31)
    damaged = tmp_path / "damaged.tar.gz"
    refused = 0
    for _ in range(500):
        data = bytearray(sound)
        for _ in range(rng.randint(1, 8)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        if rng.random() < 0.2:
            data = data[: rng.randrange(len(data))]
        damaged.write_bytes(gzip.compress(bytes(data), mtime=0))
        try:
            read_archive(damaged)
        except ArchiveError:
            refused += 1
    assert refused > 250  # most damage is found (a changed padding byte is not damage)

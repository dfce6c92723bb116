"""Bodies under a Content-Encoding inflated within a bound (nanomem/text/inflate.py)."""

from __future__ import annotations

import gzip
import zlib

import pytest

from nanomem.text.inflate import BrokenEncoding, Inflate, UnknownEncoding

TEXT = b"the same words, again and again. " * 100


def inflated(coding: str, data: bytes, room: int = 1 << 20, piece: int = 7) -> bytes:
    inflate, out = Inflate(coding), bytearray()
    for start in range(0, len(data), piece):
        out += inflate.take(data[start : start + piece], room - len(out))
    inflate.finish()
    return bytes(out)


@pytest.mark.parametrize(
    ("coding", "data"),
    [
        ("gzip", gzip.compress(TEXT, mtime=0)),
        (" X-GZIP ", gzip.compress(TEXT, mtime=0)),
        ("deflate", zlib.compress(TEXT)),
        ("", TEXT),
        ("identity", TEXT),
    ],
)
def test_what_it_reads_comes_back_whole(coding: str, data: bytes) -> None:
    assert inflated(coding, data) == TEXT


def test_a_bomb_never_inflates_past_the_room_left() -> None:
    bomb = gzip.compress(b"\0" * (32 << 20), mtime=0)  # 32 MB in about 32 KB
    inflate = Inflate("gzip")
    out = inflate.take(bomb, 1000)
    assert len(out) == 1001  # one byte over: too big, and the rest never inflated


@pytest.mark.parametrize(
    ("data", "words"),
    [
        (TEXT, "not valid gzip"),
        (gzip.compress(TEXT, mtime=0)[:-9], "cut short"),
        (gzip.compress(TEXT, mtime=0) + b"more", "bytes after the end"),
    ],
)
def test_bytes_that_are_not_what_they_claim_are_broken(data: bytes, words: str) -> None:
    with pytest.raises(BrokenEncoding, match=words):
        inflated("gzip", data)


@pytest.mark.parametrize("coding", ["br", "zstd", "compress", "gzip, br", "identity, gzip"])
def test_other_codings_are_unknown(coding: str) -> None:
    with pytest.raises(UnknownEncoding):
        Inflate(coding)

"""HTTP bodies under a Content-Encoding, inflated within a bound: a gzip body of a few KB can
come to gigabytes, so no piece is ever inflated past the room the reader has left."""

from __future__ import annotations

import zlib

# The codings nanomem reads (RFC 9110 8.4.1): gzip and deflate (zlib) through the standard
# library; br and zstd would need packages of their own, for clients that can as well send gzip.
READ = ("gzip", "deflate")
_ALIASES = {"": "identity", "x-gzip": "gzip"}


class UnknownEncoding(ValueError):
    """A Content-Encoding nanomem does not read; its message names it."""


class BrokenEncoding(ValueError):
    """Bytes that are not what their Content-Encoding says."""


class Inflate:
    """One body's decoder: `take` each piece as it arrives, `finish` at its end."""

    def __init__(self, content_encoding: str) -> None:
        coding = content_encoding.strip().lower()
        self.coding = _ALIASES.get(coding, coding)
        if self.coding not in (*READ, "identity"):
            raise UnknownEncoding(self.coding)
        # A gzip or a zlib header, whichever comes: clients send either as "deflate".
        self._zlib = None if self.coding == "identity" else zlib.decompressobj(zlib.MAX_WBITS | 32)

    def take(self, piece: bytes, room: int) -> bytes:
        """The piece decoded, at most room + 1 bytes of it: more than `room` means too big (and
        whatever was left is never inflated)."""
        if self._zlib is None:
            return piece
        if self._zlib.eof:
            if piece:
                raise BrokenEncoding(f"bytes after the end of its {self.coding} data")
            return b""
        try:
            return self._zlib.decompress(piece, room + 1)
        except zlib.error:
            raise BrokenEncoding(f"not valid {self.coding} data") from None

    def finish(self) -> None:
        """Raises BrokenEncoding when the data stopped short of their end."""
        if self._zlib is not None and not self._zlib.eof:
            raise BrokenEncoding(f"{self.coding} data cut short")
        if self._zlib is not None and self._zlib.unused_data:
            raise BrokenEncoding(f"bytes after the end of its {self.coding} data")

"""Ogg/Opus files made from tests/fixtures/voice-note.oga by re-paging its packets: longer
recordings, and the forged pages of the attacks on voice.max_minutes. The checksum is written
by a plain bit-by-bit CRC-32 (RFC 3533), not the one under test."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

NOTE = (Path(__file__).resolve().parent.parent / "fixtures" / "voice-note.oga").read_bytes()


def crc(page: bytes) -> int:
    value = 0
    for byte in page:
        value ^= byte << 24
        for _ in range(8):
            value = ((value << 1) ^ 0x04C11DB7 if value & 0x80000000 else value << 1) & 0xFFFFFFFF
    return value


@dataclass(frozen=True)
class Page:
    packets: tuple[bytes, ...]
    granule: int
    sequence: int
    serial: int = 0x5EED
    flags: int = 0

    def bytes(self, checksum: int | None = None) -> bytes:
        lacing = bytearray()
        for packet in self.packets:
            lacing += b"\xff" * (len(packet) // 255) + bytes([len(packet) % 255])
        head = (
            b"OggS\x00"
            + bytes([self.flags])
            + self.granule.to_bytes(8, "little", signed=True)
            + self.serial.to_bytes(4, "little")
            + self.sequence.to_bytes(4, "little")
        )
        body = b"".join(self.packets)
        blank = head + bytes(4) + bytes([len(lacing)]) + lacing + body
        value = crc(blank) if checksum is None else checksum
        return blank[:22] + value.to_bytes(4, "little") + blank[26:]


def packets(data: bytes = NOTE) -> list[bytes]:
    """Every packet of an Ogg file's stream, in order (the OpusHead and OpusTags first)."""
    found, partial, at = [], b"", 0
    while at < len(data):
        count = data[at + 26]
        lacing = data[at + 27 : at + 27 + count]
        body = at + 27 + count
        for size in lacing:
            partial += data[body : body + size]
            body += size
            if size < 255:
                found.append(partial)
                partial = b""
        at = body
    return found


FRAME = 960  # the fixture's packets are 20 ms each
PRE_SKIP = int.from_bytes(packets()[0][10:12], "little")


def recording(seconds: float, per_page: int = 50) -> list[Page]:
    """The pages of an Ogg/Opus recording `seconds` long: the fixture's sound, over and over."""
    head, tags, *sound = packets()
    wanted = round(seconds * 48000 / FRAME)
    audio = [sound[n % len(sound)] for n in range(wanted)]
    pages = [Page((head,), 0, 0, flags=0x02), Page((tags,), 0, 1)]
    for start in range(0, len(audio), per_page):
        chunk = tuple(audio[start : start + per_page])
        granule = PRE_SKIP + (start + len(chunk)) * FRAME
        pages.append(Page(chunk, granule, len(pages)))
    last = pages[-1]
    pages[-1] = Page(last.packets, last.granule, last.sequence, flags=0x04)
    return pages


def ogg(pages: list[Page]) -> bytes:
    return b"".join(page.bytes() for page in pages)

"""How long a recording plays, read from its own bytes and never taken on its word: an
Ogg/Opus file's pages walked from the start, a WAV file's PCM. voice.max_minutes is held to
this (and to what the channel says, when that is longer) before anything is sent."""

from __future__ import annotations

import math
import zlib

OPUS_RATE = 48000  # an Ogg/Opus granule position counts 48 kHz samples, whatever the input
MOST_PACKETS_PER_S = 100  # 10 ms frames; a voice recorder's are 20 ms or longer


def recording_seconds(data: bytes, *, stop_s: float) -> float | None:
    """How long a recording plays, read from its own bytes: an Ogg/Opus file's pages, a WAV
    file's PCM; None when it cannot be read (mp3, m4a, a video note). Raises BrokenOgg."""
    if data.startswith(b"RIFF") and data[8:12] == b"WAVE":
        return wav_seconds(data)
    return ogg_opus_seconds(data, stop_s=stop_s)


# A WAV file's PCM formats: integer, float, and the extensible header that names either.
_PCM = frozenset([1, 3, 0xFFFE])
_WAV_CHUNKS = 64  # a WAV file has a handful; more is no file worth walking


def wav_seconds(data: bytes) -> float | None:
    """How long a PCM WAV file plays: every byte after its `data` chunk starts, at the rate
    its `fmt ` chunk gives (a `data` size that claims less is not believed: the bytes are
    there to be heard); None for one that is not plain PCM or whose format adds up wrong."""
    at, fmt = 12, None
    for _ in range(_WAV_CHUNKS):
        if len(data) < at + 8:
            return None
        kind, size = data[at : at + 4], int.from_bytes(data[at + 4 : at + 8], "little")
        if kind == b"fmt " and size >= 16:
            fmt = data[at + 8 : at + 24]
        elif kind == b"data":
            return None if fmt is None else _pcm_seconds(fmt, len(data) - at - 8)
        at += 8 + size + size % 2  # chunks are padded to an even length
    return None


def _pcm_seconds(fmt: bytes, size: int) -> float | None:
    if len(fmt) < 16:
        return None
    kind, channels = int.from_bytes(fmt[0:2], "little"), int.from_bytes(fmt[2:4], "little")
    rate, byte_rate = int.from_bytes(fmt[4:8], "little"), int.from_bytes(fmt[8:12], "little")
    align, bits = int.from_bytes(fmt[12:14], "little"), int.from_bytes(fmt[14:16], "little")
    whole = kind in _PCM and channels > 0 and bits in (8, 16, 24, 32, 64)
    if not whole or align != channels * bits // 8 or byte_rate != rate * align or rate <= 0:
        return None
    return size / byte_rate


class BrokenOgg(Exception):
    """A file that starts as Ogg/Opus but whose pages do not chain (a bad checksum, a page out
    of sequence or of another stream, bytes after the end): its length cannot be trusted."""


def ogg_opus_seconds(data: bytes, *, stop_s: float) -> float | None:
    """How long an Ogg/Opus recording plays, read by walking its pages from the start; None
    for anything that is not Ogg/Opus (its length unknown). The longer of what the pages'
    granule positions and the packets themselves say, less the OpusHead's pre-skip: a forged
    granule cannot make the sound the service hears shorter. Stops once past `stop_s` (what
    it returns is then at least that; infinity for more packets than a recording that long
    holds), so a file of tiny packets costs no more than its limit. Blocking (CPU, linear in
    the bytes walked)."""
    if not data.startswith(b"OggS") or data[28:36] != b"OpusHead":
        return None
    stream = _Stream(data)
    stop = stop_s * OPUS_RATE
    while stream.offset < len(data):
        stream.page()
        if stream.sound_samples() > stop:
            break
        if stream.packets > stop_s * MOST_PACKETS_PER_S + 2:
            return math.inf  # frames this short are live calls' (RFC 6716), no recording's
    return stream.sound_samples() / OPUS_RATE


class _Stream:
    """One logical Opus stream's pages, checked as RFC 3533 and RFC 7845 have them."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.offset = 0
        self.serial = data[14:18]
        self.sequence = -1
        self.granule = 0
        self.ended = False  # an end-of-stream page was read: nothing may follow
        self.packets = 0  # whole packets; the first two are the OpusHead and the OpusTags
        self.samples = 0  # what the audio packets hold
        self.opened: bytes | None = None  # the first bytes of a packet not finished yet
        self.pre_skip = 0

    def page(self) -> None:
        data, at = self.data, self.offset
        if len(data) - at < 27 or data[at : at + 4] != b"OggS" or data[at + 4] != 0:
            raise BrokenOgg("bytes that are no Ogg page")
        flags, count = data[at + 5], data[at + 26]
        granule = int.from_bytes(data[at + 6 : at + 14], "little", signed=True)
        sequence = int.from_bytes(data[at + 18 : at + 22], "little")
        lacing = data[at + 27 : at + 27 + count]
        end = at + 27 + count + sum(lacing)
        if len(lacing) < count or end > len(data):
            raise BrokenOgg("a page cut short")
        if self.ended:
            raise BrokenOgg("a page after the stream's end")
        if data[at + 14 : at + 18] != self.serial or sequence != self.sequence + 1:
            raise BrokenOgg("a page out of its stream's sequence")
        if bool(flags & 0x02) != (sequence == 0) or bool(flags & 0x01) != (self.opened is not None):
            raise BrokenOgg("a page flagged out of place")
        if ogg_crc(data[at:end]) != int.from_bytes(data[at + 22 : at + 26], "little"):
            raise BrokenOgg("a page whose checksum is wrong")
        if granule != -1:  # -1: no packet ends on this page
            if granule < self.granule:
                raise BrokenOgg("a page's position going back")
            self.granule = granule
        self.sequence, self.ended, self.offset = sequence, bool(flags & 0x04), end
        self._packets(at + 27 + count, lacing)

    def _packets(self, body: int, lacing: bytes) -> None:
        # One step per segment, the least work each: a file of tiny packets is all segments.
        data, start, opened = self.data, body, self.opened
        for size in lacing:
            body += size
            if size == 255:  # the packet goes on in the next segment
                continue
            first = data[start : min(start + 2, body)]  # what opus_samples reads
            packet = first if opened is None else opened + first
            if self.packets >= 2:
                self.samples += opus_samples(packet)
            elif self.packets == 0:
                self._head(start)
            self.packets += 1
            start, opened = body, None
        if start < body:  # a packet goes on in the next page: its first bytes are kept
            opened = (opened or b"") + data[start : start + 2]
        self.opened = None if opened is None else opened[:2]

    def _head(self, at: int) -> None:
        head = self.data[at : at + 19]
        if self.sequence != 0 or not head.startswith(b"OpusHead") or head[8] >> 4:
            raise BrokenOgg("no OpusHead of a version this reads")
        self.pre_skip = int.from_bytes(head[10:12], "little")

    def sound_samples(self) -> int:
        return max(self.granule, self.samples) - self.pre_skip if self.packets > 2 else 0


# Samples (at 48 kHz) in one frame of each of the 32 configurations of an Opus packet's first
# byte (RFC 6716 3.1): SILK 10/20/40/60 ms, hybrid 10/20 ms, CELT 2.5/5/10/20 ms.
_FRAME = (*(480, 960, 1920, 2880) * 3, *(480, 960) * 2, *(120, 240, 480, 960) * 4)


def opus_samples(packet: bytes) -> int:
    """How many 48 kHz samples an Opus packet holds, from its first two bytes. An empty one (a
    lost or silent frame) counts as the shortest frame: nothing makes a file cheaper to walk."""
    if not packet:
        return _FRAME[16]
    toc = packet[0]
    frames = (1, 2, 2, packet[1] & 0x3F if len(packet) > 1 else 0)[toc & 3]
    return _FRAME[toc >> 3] * frames


# Ogg's CRC-32 is the unreflected one (polynomial 0x04C11DB7, no inversion), with the page's
# own checksum field read as zero; zlib's reflected CRC of the bit-reversed bytes is the same
# sum bit-reversed, at C speed.
_REVERSED = bytes(int(f"{n:08b}"[::-1], 2) for n in range(256))


def ogg_crc(page: bytes) -> int:
    """The checksum of an Ogg page (RFC 3533 6), its own checksum field taken as zero."""
    zeroed = page[:22] + bytes(4) + page[26:]
    reflected = zlib.crc32(zeroed.translate(_REVERSED), 0xFFFFFFFF) ^ 0xFFFFFFFF
    return int(f"{reflected:032b}"[::-1], 2)

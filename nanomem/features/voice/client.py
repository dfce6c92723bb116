"""The two OpenAI-compatible audio calls: POST /audio/transcriptions (multipart, the file as
received) and POST /audio/speech (JSON in, audio bytes out), over the lean client's connection
(its proxy and TLS decisions; httpx is imported at a call, never with this module). A failure
is a VoiceError whose message may be shown to the person: it names no URL and no key."""

from __future__ import annotations

import asyncio
import json
import secrets
from dataclasses import dataclass
from pathlib import PurePath

from loguru import logger

from nanomem.features.voice.audio import VIDEO_NOTE_ENDING
from nanomem.features.voice.endpoint import AudioEndpoint
from nanomem.providers import Connection, ConnectionFailed
from nanomem.text import untrusted_json
from nanomem.text.masking import redact

MAX_UPLOAD_BYTES = 25 * 2**20  # OpenAI's limit for /audio/transcriptions
MAX_SPEECH_CHARS = 4096  # /audio/speech takes at most this much input
MAX_AUDIO_BYTES = 32 * 2**20  # a spoken reply bigger than this is a broken server
ATTEMPTS = 3  # a connection refused, a 429 or a 5xx is tried again, twice
TRANSIENT = frozenset([408, 409, 429, 500, 502, 503, 504])
# Sent under these names: OpenAI tells formats apart by the file name, and refuses `.oga`.
_SENT_AS = {
    ".oga": (".ogg", "audio/ogg"),
    ".ogg": (".ogg", "audio/ogg"),
    ".opus": (".ogg", "audio/ogg"),
    ".mp3": (".mp3", "audio/mpeg"),
    ".mpga": (".mpga", "audio/mpeg"),
    ".mpeg": (".mpeg", "audio/mpeg"),
    ".m4a": (".m4a", "audio/mp4"),
    ".wav": (".wav", "audio/wav"),
    ".flac": (".flac", "audio/flac"),
    ".webm": (".webm", "audio/webm"),
    ".mp4": (".mp4", "video/mp4"),
}


class VoiceError(Exception):
    """A transcription or speech call failed; the message is safe to show. `lasting`: the
    same recording would fail the same way again (too large, a type the service refuses)."""

    def __init__(self, message: str, *, lasting: bool = False) -> None:
        super().__init__(message)
        self.lasting = lasting


def upload_name(path: str) -> tuple[str, str]:
    """(file name, content type) a saved recording is sent under."""
    name = PurePath(path).name.lower()
    suffix = ".mp4" if name.endswith(VIDEO_NOTE_ENDING) else PurePath(name).suffix
    sent, kind = _SENT_AS.get(suffix, (suffix, "application/octet-stream"))
    return f"audio{sent}", kind


@dataclass
class AudioClient:
    endpoint: AudioEndpoint
    timeout_s: float
    backoff_s: float = 1.0  # before the 2nd attempt; doubled before the 3rd

    async def transcribe(self, path: str, data: bytes, model: str) -> str:
        """The text spoken in a recording (sent as received)."""
        if len(data) > MAX_UPLOAD_BYTES:
            raise VoiceError(
                f"the recording is {len(data) / 2**20:.1f} MB; transcription takes up to "
                f"{MAX_UPLOAD_BYTES // 2**20} MB"
            )
        name, kind = upload_name(path)
        fields = {"model": model, "response_format": "json"}
        body, content_type = multipart(fields, ("file", name, kind, data))
        answer = await self._post("transcriptions", "transcription", body, content_type)
        try:
            text = untrusted_json.loads(answer).get("text")
        except (ValueError, AttributeError):
            text = None
        if not isinstance(text, str):
            raise VoiceError("the transcription service gave no text")
        return text.strip()

    async def speak(self, text: str, model: str, voice: str) -> bytes:
        """The text spoken, as Ogg/Opus."""
        request = {
            "model": model,
            "voice": voice,
            "input": text[:MAX_SPEECH_CHARS],
            "response_format": "opus",
        }
        body = json.dumps(request).encode("utf-8")
        audio = await self._post("speech", "speech", body, "application/json")
        if not audio:
            raise VoiceError("the speech service gave no audio")
        return audio

    async def _post(self, path: str, what: str, body: bytes, content_type: str) -> bytes:
        """The answer's body; transient failures tried again after a pause (ATTEMPTS)."""
        headers = {b"Content-Type": content_type.encode("ascii")}
        if self.endpoint.api_key:
            headers[b"Authorization"] = f"Bearer {self.endpoint.api_key}".encode()
        url = f"{self.endpoint.base_url}/audio/{path}"
        connection = Connection(url, timeout_s=self.timeout_s, connections=1)
        try:
            for attempt in range(1, ATTEMPTS + 1):
                try:
                    async with connection.post(body, headers) as answer:
                        if 200 <= answer.status < 300:
                            return await answer.read(MAX_AUDIO_BYTES)
                        status, excerpt = answer.status, await answer.excerpt(2048)
                except TimeoutError:
                    raise VoiceError(
                        f"the {what} service did not answer within {self.timeout_s:g} s "
                        "(voice.timeout_s)"
                    ) from None
                except ConnectionFailed as exc:
                    logger.warning("voice: the {} service: {}", what, exc)
                    if exc.answered or attempt == ATTEMPTS:
                        raise VoiceError(f"the {what} service could not be reached") from None
                else:
                    logger.warning("voice: the {} service answered HTTP {}", what, status)
                    if status not in TRANSIENT or attempt == ATTEMPTS:
                        lasting = status in (413, 415)
                        raise VoiceError(self._refusal(what, status, excerpt), lasting=lasting)
                await asyncio.sleep(self.backoff_s * 2 ** (attempt - 1))
        finally:
            await connection.close()
        raise AssertionError("unreachable")  # the last attempt returns or raises

    def _refusal(self, what: str, status: int, excerpt: bytes) -> str:
        if status in (401, 403):
            return f"the {what} service refused the key (HTTP {status}; voice.api_key)"
        if status == 413:
            return f"the {what} service found the recording too large (HTTP 413)"
        detail = ""
        try:
            error = untrusted_json.loads(excerpt.decode("utf-8", "replace")).get("error")
            message = error.get("message") if isinstance(error, dict) else error
            if isinstance(message, str):
                if self.endpoint.api_key:
                    message = message.replace(self.endpoint.api_key, "***")
                detail = ": " + redact(" ".join(message.split()))[:160]
        except (ValueError, AttributeError):
            pass
        return f"the {what} service answered HTTP {status}{detail}"


def multipart(fields: dict[str, str], file: tuple[str, str, str, bytes]) -> tuple[bytes, str]:
    """A multipart/form-data body (RFC 7578) of text fields and one file; its content type."""
    boundary = f"nanomem-{secrets.token_hex(12)}"
    parts = [
        f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n{value}\r\n'.encode()
        for name, value in fields.items()
    ]
    field, filename, kind, data = file
    parts.append(
        f'--{boundary}\r\nContent-Disposition: form-data; name="{field}"; '
        f'filename="{filename}"\r\nContent-Type: {kind}\r\n\r\n'.encode()
        + data
        + b"\r\n"
    )
    parts.append(f"--{boundary}--\r\n".encode())
    return b"".join(parts), f"multipart/form-data; boundary={boundary}"

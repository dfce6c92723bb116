"""The two OpenAI-compatible audio calls: POST /audio/transcriptions (multipart, the file as
received) and POST /audio/speech (JSON in, audio bytes out). httpx is imported when a call is
made, never with this module. A failure is a VoiceError whose message may be shown to the
person: it names no URL and no key."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import PurePath
from typing import TYPE_CHECKING, Any

from loguru import logger

from nanomem.features.voice.audio import VIDEO_NOTE_ENDING
from nanomem.features.voice.endpoint import AudioEndpoint
from nanomem.log import redact

if TYPE_CHECKING:
    import httpx

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
    """A transcription or speech call failed; the message is safe to show."""


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
        files = {"file": (name, data, kind)}
        form = {"model": model, "response_format": "json"}
        response = await self._post("transcriptions", "transcription", data=form, files=files)
        try:
            text = response.json().get("text")
        except (ValueError, AttributeError):
            text = None
        if not isinstance(text, str):
            raise VoiceError("the transcription service gave no text")
        return text.strip()

    async def speak(self, text: str, model: str, voice: str) -> bytes:
        """The text spoken, as Ogg/Opus."""
        body = {
            "model": model,
            "voice": voice,
            "input": text[:MAX_SPEECH_CHARS],
            "response_format": "opus",
        }
        response = await self._post("speech", "speech", json=body)
        if not response.content or len(response.content) > MAX_AUDIO_BYTES:
            raise VoiceError("the speech service gave no usable audio")
        return response.content

    async def _post(self, path: str, what: str, **request: Any) -> httpx.Response:
        import httpx  # ~0.1 s: only when a voice note comes

        headers = {}
        if self.endpoint.api_key:
            headers["Authorization"] = f"Bearer {self.endpoint.api_key}"
        url = f"{self.endpoint.base_url}/audio/{path}"
        async with httpx.AsyncClient(timeout=self.timeout_s) as client:
            for attempt in range(1, ATTEMPTS + 1):
                try:
                    response = await client.post(url, headers=headers, **request)
                except httpx.TimeoutException:
                    raise VoiceError(
                        f"the {what} service did not answer within {self.timeout_s:g} s "
                        "(voice.timeout_s)"
                    ) from None
                except httpx.TransportError as exc:
                    problem = f"the {what} service could not be reached"
                    logger.warning("voice: {} ({})", problem, type(exc).__name__)
                    if attempt == ATTEMPTS:
                        raise VoiceError(problem) from None
                else:
                    if response.is_success:
                        return response
                    logger.warning(
                        "voice: the {} service answered HTTP {}", what, response.status_code
                    )
                    if response.status_code not in TRANSIENT or attempt == ATTEMPTS:
                        raise VoiceError(_refusal(what, response)) from None
                await asyncio.sleep(self.backoff_s * 2 ** (attempt - 1))
        raise AssertionError("unreachable")  # the last attempt returns or raises


def _refusal(what: str, response: httpx.Response) -> str:
    status = response.status_code
    if status in (401, 403):
        return f"the {what} service refused the key (HTTP {status}; voice.api_key)"
    if status == 413:
        return f"the {what} service found the recording too large (HTTP 413)"
    detail = ""
    try:
        error = response.json().get("error")
        message = error.get("message") if isinstance(error, dict) else error
        if isinstance(message, str):
            detail = ": " + redact(" ".join(message.split()))[:160]
    except (ValueError, AttributeError):
        pass
    return f"the {what} service answered HTTP {status}{detail}"

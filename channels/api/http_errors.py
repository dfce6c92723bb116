"""HTTP's own errors under /v1 in OpenAI's error JSON: a client's SDK reads a 404 or a 405
as an APIError with our message, not as a page of plain text it cannot parse."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from aiohttp import web

from channels.api.wire import BadRequest, error_body

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
# The routes' own errors; every other status is answered by the handler that chose it.
SHAPED = (404, 405, 415)


def ours(path: str) -> bool:
    return path == "/v1" or path.startswith("/v1/")


@web.middleware
async def openai_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """aiohttp's 404 (no such route), 405 (not that method) and 415 under /v1, as OpenAI
    answers them; /health and anything else outside /v1 keep their own form."""
    try:
        return await handler(request)
    except web.HTTPException as exc:
        if exc.status not in SHAPED or not ours(request.path):
            raise
        asked = f"{request.method} {request.path}"[:200]
        if exc.status == 404:
            message = f"Invalid URL ({asked})"
        elif exc.status == 405:
            allowed = exc.headers.get("Allow", "")
            message = f"Invalid method for URL ({asked}); it takes {allowed or 'another'}"
        else:
            message = f"Unsupported media type ({asked}): {exc.text or exc.reason}"
        response = web.json_response(error_body(message), status=exc.status)
        if "Allow" in exc.headers:
            response.headers["Allow"] = exc.headers["Allow"]
        return response


def refusal(exc: BadRequest) -> web.Response:
    """A request refused before its turn began, in OpenAI's error JSON, on either route."""
    response = web.json_response(
        error_body(str(exc), "invalid_request_error", None, exc.param), status=exc.status
    )
    if exc.status == 408:
        response.force_close()  # the rest of that body is not waited for
    response.headers.update(exc.headers)  # a 415's Accept-Encoding (RFC 7694)
    return response

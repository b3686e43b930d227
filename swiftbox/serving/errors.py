"""OpenAI-shaped errors: `{"error": {"message", "type", "param", "code"}}` with the right status; on the Anthropic
routes (/v1/messages...) the same error in Anthropic's shape: `{"type": "error", "error": {"type", "message"}}`.

Every failure a client can cause maps to a 4xx here; anything else is logged and answered as a 500
with the same shape (that path is a bug, and the load test checks it never happens).
"""
from __future__ import annotations

import logging
import re
from typing import Optional

log = logging.getLogger("swiftbox.serve")
# a machine-readable code on every error, also where the raiser named none
DEFAULT_CODES = {400: "invalid_request", 401: "invalid_api_key", 404: "not_found", 405: "method_not_allowed",
                 413: "request_too_large", 422: "invalid_value", 429: "queue_full", 500: "internal_error",
                 503: "unavailable"}

ANTHROPIC_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
                   404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error", 503: "overloaded_error"}


def is_anthropic(path: str) -> bool:
    return path == "/v1/messages" or path.startswith("/v1/messages/")


class ApiError(Exception):
    """Raise anywhere in a request; the app turns it into the OpenAI error body."""

    def __init__(self, status: int, message: str, *, type: str = "invalid_request_error",
                 param: Optional[str] = None, code: Optional[str] = None, headers: Optional[dict] = None):
        super().__init__(message)
        self.status, self.message, self.type, self.param = status, message, type, param
        self.code = code or DEFAULT_CODES.get(status)
        self.headers = dict(headers or {})
        if status == 401:
            self.headers.setdefault("WWW-Authenticate", "Bearer")

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}

    def anthropic_body(self) -> dict:
        """Anthropic's shape: its error type follows the status (a 422 is its invalid_request_error, as 400)."""
        kind = ANTHROPIC_TYPES.get(self.status, "api_error" if self.status >= 500 else "invalid_request_error")
        return {"type": "error", "error": {"type": kind, "message": self.message}}

    def body_for(self, path: str) -> dict:
        """The body in the shape of the API `path` belongs to."""
        return self.anthropic_body() if is_anthropic(path) else self.body()

    def status_for(self, path: str) -> int:
        """Anthropic answers a bad value with 400 where OpenAI's shape uses 422."""
        return 400 if self.status == 422 and is_anthropic(path) else self.status


# an absolute POSIX path: a "/" that starts a word (not inside a URL, a fraction or a relative path)
ABSOLUTE_PATH = re.compile(r"(?<![\w.:/~-])/(?:[^\s'\"/:,;()\[\]{}]+/)*([^\s'\"/:,;()\[\]{}]+)")


def public_text(text: str, known: dict[str, str]) -> str:
    """`text` as a client may read it: each known server path (the model's directory -> its served name) replaced,
    then any other absolute path cut to its last component. The server's filesystem is not the client's business."""
    for path in sorted(known, key=len, reverse=True):
        if path:
            text = text.replace(path, known[path])
    return ABSOLUTE_PATH.sub(lambda m: m.group(1), text)


def unauthorized() -> ApiError:
    return ApiError(401, "Incorrect or missing API key: send 'Authorization: Bearer KEY' or 'x-api-key: KEY'",
                    type="authentication_error", code="invalid_api_key")


def model_not_found(name: str, known: list[str]) -> ApiError:
    return ApiError(404, f"The model '{name}' does not exist; served models: {', '.join(known)}",
                    param="model", code="model_not_found")


def context_exceeded(prompt_tokens: int, max_tokens: int, limit: int) -> ApiError:
    return ApiError(400, f"This model's maximum context length is {limit} tokens; the request asks for "
                         f"{prompt_tokens} prompt + {max_tokens} completion tokens",
                    param="messages", code="context_length_exceeded")


def queue_full(waiting: int, retry_after: int = 1) -> ApiError:
    return ApiError(429, f"the server is busy ({waiting} requests waiting for a slot); retry shortly",
                    type="rate_limit_error", code="queue_full", headers={"Retry-After": str(retry_after)})


def from_validation(errors: list[dict]) -> ApiError:
    first = errors[0] if errors else {}
    loc = [str(p) for p in first.get("loc", ()) if p not in ("body",)]
    param = ".".join(loc) or None
    msg = first.get("msg", "invalid request")
    return ApiError(422, f"{param + ': ' if param else ''}{msg}", param=param, code="invalid_value")


def install_handlers(app) -> None:
    """Map FastAPI/starlette failures onto ApiError bodies."""
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse
    from starlette.exceptions import HTTPException as StarletteHTTPException

    def respond(request, err: ApiError):
        path = request.url.path
        return JSONResponse(err.body_for(path), status_code=err.status_for(path), headers=err.headers or None)

    @app.exception_handler(ApiError)
    async def _api(request, exc: ApiError):
        return respond(request, exc)

    @app.exception_handler(RequestValidationError)
    async def _validation(request, exc: RequestValidationError):
        errors = exc.errors()
        if any(e.get("type") == "json_invalid" for e in errors):
            return respond(request, ApiError(400, "We could not parse the JSON body of your request",
                                             code="invalid_json"))
        return respond(request, from_validation(list(errors)))

    @app.exception_handler(StarletteHTTPException)
    async def _http(request, exc: StarletteHTTPException):
        return respond(request, ApiError(exc.status_code, str(exc.detail), headers=getattr(exc, "headers", None)))

    @app.exception_handler(Exception)
    async def _bug(request, exc: Exception):
        log.exception("unhandled error on %s", request.url.path)
        return respond(request, ApiError(500, f"internal error: {type(exc).__name__}", type="server_error"))


"""The front door's ASGI middleware: API key on every route but /health (and /metrics with --metrics-public),
and a request body size limit. The key may come as `Authorization: Bearer KEY` (OpenAI clients, Codex,
Claude Code's ANTHROPIC_AUTH_TOKEN) or `x-api-key: KEY` (Anthropic clients, Claude Code's ANTHROPIC_API_KEY);
a refusal is in the shape of the API the path belongs to (errors.ApiError.body_for).

Pure ASGI (not BaseHTTPMiddleware) so streaming responses and client disconnects pass straight through.
The body is read once here - at most `max_body` bytes, else 413 - and replayed to the app.
"""
from __future__ import annotations

import hmac
import json

from swiftbox.serving.errors import ApiError, unauthorized

OPEN_PATHS = {"/health"}


class Guard:
    def __init__(self, app, *, api_key: str | None, max_body: int, open_paths: set[str] = OPEN_PATHS):
        self.app, self.api_key, self.max_body, self.open_paths = app, api_key, max_body, set(open_paths)

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        if self.api_key and scope.get("path") not in self.open_paths and not self._authorised(scope):
            return await _reply(scope, send, unauthorized())
        headers = dict(scope.get("headers") or [])
        length = headers.get(b"content-length")
        if length is not None:
            try:
                too_big = int(length) > self.max_body
            except ValueError:
                return await _reply(scope, send, ApiError(400, "invalid Content-Length header", code="invalid_header"))
            if too_big:
                return await _reply(scope, send, _too_large(self.max_body))
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body:
                return await _reply(scope, send, _too_large(self.max_body))
            chunks.append(chunk)
            if not message.get("more_body"):
                break
        body, replayed = b"".join(chunks), False

        async def replay():
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        return await self.app(scope, replay, send)

    def _authorised(self, scope) -> bool:
        if self.api_key is None:
            return True
        key = self.api_key.encode()
        for name, value in scope.get("headers") or []:
            if name == b"authorization":
                scheme, _, token = value.decode("latin-1").partition(" ")
                if scheme.lower() == "bearer" and hmac.compare_digest(token.strip().encode("latin-1"), key):
                    return True
            elif name == b"x-api-key" and hmac.compare_digest(value.strip(), key):
                return True
        return False


def _too_large(limit: int) -> ApiError:
    return ApiError(413, f"request body larger than {limit} bytes", code="request_too_large")


async def _reply(scope, send, err: ApiError) -> None:
    body = json.dumps(err.body_for(scope.get("path", ""))).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    headers += [(k.lower().encode(), v.encode()) for k, v in err.headers.items()]
    await send({"type": "http.response.start", "status": err.status, "headers": headers})
    await send({"type": "http.response.body", "body": body})

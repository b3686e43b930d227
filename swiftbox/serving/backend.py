"""The seam between the HTTP front door and an engine: the `Backend` protocol every engine implements.

Each API family's route validates a request (its protocol.py), checks the model name and hands the request to
the app's one Backend; the Backend answers it (the built-in engine generates, the vLLM child relays) and returns the
HTTP response, built by openai/render.py where swiftbox generates the body. Two implementations:
`builtin.backend.BuiltinBackend` and `vllm.child.VllmBackend`; mypy checks both against this protocol where
launch.open_backend assigns them to a `Backend`, so a method an engine lacks fails the lint gate, not a request.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, AsyncIterator, Optional, Protocol

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.responses import Response

    from swiftbox.serving.adapter_check import CheckedAdapter
    from swiftbox.serving.adapters import AdapterPolicy
    from swiftbox.serving.events import Event
    from swiftbox.serving.metrics import EngineStats, ServeMetrics
    from swiftbox.serving.openai.protocol import ChatCompletionRequest, CompletionRequest

class Backend(Protocol):
    name: str                                    # "builtin" | "vllm": /health and the step's manifest say it
    runtime_adapters: Optional[AdapterPolicy]     # None: /v1/load_lora_adapter answers 403 (set by open_backend)
    observer: Optional[ServeMetrics]              # the app's metrics, set by build_app; the engine reports tokens
    max_lora_rank: Optional[int]                  # the rank limit runtime adapters are checked against
    trust_request_chat_template: bool             # clients may send their own chat template (template_kwargs.py)

    def model_names(self) -> list[str]:
        """The base model first, then every adapter served now (they change with runtime loads)."""
        ...

    async def healthy(self) -> bool: ...

    def engine_stats(self) -> Optional[EngineStats]:
        """What /metrics reads from the engine at scrape time (None: nothing)."""
        ...

    async def extra_metrics(self) -> bytes:
        """More Prometheus text for /metrics (vLLM's own `vllm:*` families; b"" for none)."""
        ...

    async def chat(self, req: ChatCompletionRequest, request: Request) -> Response:
        """The answer (JSON, or SSE when req.stream), its body built by openai/render.py; `request` gives the raw body
        (protocol.raw_body, for a relay) and tells when the client has gone away."""
        ...

    async def completion(self, req: CompletionRequest, request: Request) -> Response: ...

    async def chat_events(self, req: ChatCompletionRequest, request: Request) -> AsyncIterator[Event]:
        """The answer to a chat request as the typed engine event stream (events.py), for the API families that
        render it in their own wire format (anthropic/, responses/); the request's checks raise (ApiError) here,
        before any event."""
        ...

    async def native(self, path: str, request: Request, stream: bool) -> Optional[Response]:
        """The engine's own answer to `path` (/v1/messages, /v1/messages/count_tokens, /v1/responses) where it
        serves that API itself (vLLM); None: the front door translates the request onto chat (the family's
        translate.py)."""
        ...

    async def count_tokens(self, req: ChatCompletionRequest) -> int:
        """The prompt tokens `req` would take (its messages and tools through the chat template)."""
        ...

    async def load_adapter(self, name: str, adapter: CheckedAdapter) -> None:
        """Load a LoRA adapter that AdapterPolicy.inspect accepted (the built-in engine builds it from the checked
        tensors; vLLM reads `adapter.path`); ApiError (4xx) when the engine refuses it."""
        ...

    async def unload_adapter(self, name: str) -> None: ...


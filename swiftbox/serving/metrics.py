"""/metrics: Prometheus text from prometheus-client, one CollectorRegistry per app (never the global one, so
several servers in one process keep their own numbers).

What is measured where:
- `RequestCounter` (ASGI middleware, outermost): every HTTP request by route template, method and status,
  401s and 413s from the guard included; an exception that escapes the app (answered 500 by Starlette's error
  middleware, outside this one) counts as 500, a request cancelled before any answer (client gone) as 499.
- the built-in backend's request runs (builtin/backend.py, Run) call `observe_*`: prompt and generation tokens,
  time to first token, inter-token latency and end-to-end latency per model, timed on the server's event
  loop, i.e. as the client sees them (queueing and tokenizing included).
- the engine, through the small `EngineStats` interface, read at scrape time: running and waiting sequences
  (`load()`) and its own counters (`stats`: requests, tokens, steps, prefills, cancelled, errors).
- adapter loads and unloads by result (the adapter routes).
The vLLM backend has no EngineStats; its child's own `vllm:*` families are appended to the scrape.
"""
from __future__ import annotations

import asyncio
from typing import Any, Optional, Protocol

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
ROUTES = ("/health", "/metrics", "/v1/models", "/v1/chat/completions", "/v1/completions", "/v1/messages",
          "/v1/messages/count_tokens", "/v1/responses", "/v1/load_lora_adapter", "/v1/unload_lora_adapter")
LATENCY_BUCKETS = (0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0,
                   80.0)
E2E_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 40.0, 60.0, 120.0, 300.0, 600.0)


class EngineStats(Protocol):
    """What an engine tells /metrics (the built-in engine implements it; keep these two when changing it)."""

    stats: dict[str, int]          # counters since start: requests, tokens, steps, prefills, cancelled, errors

    def load(self) -> dict[str, int]:  # {"active": running sequences, "waiting": sequences waiting for a slot}
        ...


class ServeMetrics:
    def __init__(self, engine: Optional[EngineStats] = None):
        from prometheus_client import CollectorRegistry, Counter, Histogram

        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.requests = Counter("swiftbox_http_requests", "HTTP requests by route, method and status",
                                ["route", "method", "status"], registry=r)
        self.prompt_tokens = Counter("swiftbox_prompt_tokens", "prompt tokens of finished requests", ["model"],
                                     registry=r)
        self.generation_tokens = Counter("swiftbox_generation_tokens", "tokens generated", ["model"], registry=r)
        self.ttft = Histogram("swiftbox_time_to_first_token_seconds", "request received -> first token sent",
                              ["model"], buckets=LATENCY_BUCKETS, registry=r)
        self.itl = Histogram("swiftbox_inter_token_latency_seconds", "time between two tokens of one answer",
                             ["model"], buckets=LATENCY_BUCKETS, registry=r)
        self.e2e = Histogram("swiftbox_e2e_request_latency_seconds", "request received -> last token sent",
                             ["model"], buckets=E2E_BUCKETS, registry=r)
        self.adapter_ops = Counter("swiftbox_lora_adapter_operations", "runtime LoRA adapter loads/unloads",
                                   ["op", "result"], registry=r)
        if engine is not None:
            r.register(_EngineCollector(engine))

    # -- called by request runs -------------------------------------------------------------
    def observe_first_token(self, model: str, seconds: float) -> None:
        self.ttft.labels(model).observe(seconds)

    def observe_next_token(self, model: str, seconds: float) -> None:
        self.itl.labels(model).observe(seconds)

    def observe_done(self, model: str, *, prompt_tokens: int, generated: int, seconds: float) -> None:
        self.prompt_tokens.labels(model).inc(prompt_tokens)
        self.generation_tokens.labels(model).inc(generated)
        self.e2e.labels(model).observe(seconds)

    def adapter_op(self, op: str, ok: bool) -> None:
        self.adapter_ops.labels(op, "ok" if ok else "refused").inc()

    def render(self) -> bytes:
        from prometheus_client import generate_latest

        return generate_latest(self.registry)


class _EngineCollector:
    """Read the engine's numbers at scrape time (no bookkeeping on the engine's hot path)."""

    def __init__(self, engine: EngineStats):
        self.engine = engine

    def describe(self) -> list:
        return []

    def collect(self):
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        load = self.engine.load()
        yield GaugeMetricFamily("swiftbox_num_requests_running", "sequences in the running batch",
                                value=load.get("active", 0))
        yield GaugeMetricFamily("swiftbox_num_requests_waiting", "sequences waiting for a batch slot",
                                value=load.get("waiting", 0))
        for key, value in dict(self.engine.stats).items():
            yield CounterMetricFamily(f"swiftbox_engine_{key}", f"built-in engine: {key} since start", value=value)


def route_of(path: str) -> str:
    """A bounded label: the route template, never the raw path (unknown paths are all 'other')."""
    if path in ROUTES:
        return path
    if path.startswith("/v1/models/"):
        return "/v1/models/{model}"
    if path.startswith("/v1/responses/"):
        return "/v1/responses/{id}/input_items" if path.endswith("/input_items") else "/v1/responses/{id}"
    return "other"


class RequestCounter:
    """Pure ASGI middleware: counts each HTTP request by route, method and the status it was answered with."""

    def __init__(self, app: Any, *, metrics: ServeMetrics):
        self.app, self.metrics = app, metrics

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        status = {"code": 0}

        async def recording(message):
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, recording)
        except BaseException as exc:
            # nothing sent yet: a bug (Starlette's outermost error middleware answers it with a 500) is a 500; only a
            # cancellation (the client went away, the server is stopping) is 499
            if not status["code"]:
                status["code"] = 499 if isinstance(exc, (asyncio.CancelledError, GeneratorExit)) else 500
            raise
        finally:
            code = str(status["code"] or 499)  # returned without a response: the client went away first
            self.metrics.requests.labels(route_of(scope.get("path", "")), scope.get("method", ""), code).inc()

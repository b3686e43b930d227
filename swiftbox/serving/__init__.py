"""serving: one server, several API families, two engines (built-in continuous batching, or vLLM as a child).

Laid out like vLLM's entrypoints: one folder per API family (its pydantic request and response models, its thin
route, how its answer is rendered onto the wire), all over one typed engine seam.

    openai/        chat and text completions: protocol.py, routes.py, render.py (bodies + SSE), logprobs.py,
                   read.py (an OpenAI SSE answer read back into typed events: the vLLM relay's)
    anthropic/     Messages: protocol.py, translate.py (onto the chat request), route.py, render.py (SSE events)
    responses/     Responses: protocol.py, translate.py, store.py (previous_response_id, GET, DELETE,
                   input_items), route.py, render.py (the Response object + its typed events)
    launch.py      serve config -> a running Backend: served names, engine choice, API key / exposure
    app.py         build_app(backend): middleware + every family's routers       guard.py   API key, body limit
    routes/        the routes every family shares (models, adapters, system) and their helpers
    protocol.py    the shared bodies (ResponseBody, Usage, model list, health, adapter admin requests, raw_body)
    errors.py      the error shapes (OpenAI's, Anthropic's)      render.py  shared body pieces (SSE, ids, models)
    backend.py     the Backend protocol: what every engine offers the routes
    events.py      the typed engine event stream (text / reasoning / tool-call deltas, token logprobs, finish,
                   usage): what an engine produces for one request; every family renders it in its wire format
    answer.py      Output: one finished choice, engine-neutral (every family renders from it); gathered
                   (an answer's typed events as one Output: a translated family's whole body)
    onto_chat.py   what the Messages / Responses translations share on their way onto the chat request
    builtin/       the built-in engine: backend.py (requests -> engine), engine.py (the scheduler thread),
                   prefill.py, sampling.py, constrained.py, adapter_slots.py, textstream.py
    vllm/          the vLLM engine: plan.py (the `vllm serve` command), child.py (child process + relay)
    engine_choice.py   `engine: auto` on the CPU: this machine's measurement of both engines (bench serve-vllm)
    fit.py         engine fit: which adapters and quantization formats each engine serves here
    adapters.py    runtime LoRA adapter policy (roots, base model identity, engine fit, count/memory caps)
    adapter_check.py   a runtime adapter is a plain LoRA delta: its config, weights and module patterns
    template_kwargs.py the chat_template_kwargs allow-list; client chat templates (--trust-request-chat-template)
    metrics.py     /metrics (Prometheus)     toolformats/   tool calls / reasoning out of an answer, per format
    server.py      uvicorn on a bound socket  smoke.py      one question through the openai client
    remote.py      a client for a running server's adapter routes (chat --url, the menu)
    fields.py      the spec: every SDK request parameter per endpoint and engine (honoured / refused / hint)

The step (swiftbox/pipelines/serve.py) checks, runs the pre-deploy gate (swiftbox.verify.startup_gate),
opens the backend here and serves; this package imports nothing above it (tests/unit/test_layers.py).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from swiftbox.lazy import lazy_exports

if TYPE_CHECKING:
    from swiftbox.serving.engine_choice import decide_engine, record_path, save_record
    from swiftbox.serving.fit import artifact_problems
    from swiftbox.serving.remote import Remote, RemoteError

# the public surface (`__all__`, what bench/ and menus/ may import; tests/unit/test_layers.py holds them to it),
# loaded lazily so importing one module here loads no other
_EXPORTS = {"artifact_problems": "swiftbox.serving.fit", "Remote": "swiftbox.serving.remote",
            "RemoteError": "swiftbox.serving.remote", "decide_engine": "swiftbox.serving.engine_choice",
            "record_path": "swiftbox.serving.engine_choice", "save_record": "swiftbox.serving.engine_choice"}


__getattr__ = lazy_exports(__name__, _EXPORTS)


__all__ = ["Remote", "RemoteError", "artifact_problems", "decide_engine", "record_path", "save_record"]

"""serving: one OpenAI-compatible server, two engines (built-in continuous batching, or vLLM as a child).

Laid out like vLLM's entrypoints: per endpoint a thin router, pydantic request and response models in one
protocol module, the logic behind one typed engine seam.

    launch.py      serve config -> a running Backend: served names, engine choice, API key / exposure
    app.py         build_app(backend): middleware + routers          guard.py   API key, body limit
    routes/        one thin router per endpoint (chat, completions, models, adapters, system)
    protocol.py    request and response bodies (pydantic)            errors.py  OpenAI's error shape
    backend.py     the Backend protocol: what every engine offers the routes
    responses.py   the one place that builds response bodies (from engine-neutral Outputs)
    builtin/       the built-in engine: backend.py (requests -> engine), engine.py (the scheduler thread),
                   prefill.py, sampling.py, adapter_slots.py, textstream.py, logprobs.py
    vllm/          the vLLM engine: plan.py (the `vllm serve` command), child.py (child process + relay)
    fit.py         engine fit: which adapters and quantization formats each engine serves here
    adapters.py    runtime LoRA adapter policy (roots, base model identity, engine fit, count/memory caps)
    adapter_check.py   a runtime adapter is a plain LoRA delta: its config, weights and module patterns
    template_kwargs.py the chat_template_kwargs allow-list; client chat templates (--trust-request-chat-template)
    metrics.py     /metrics (Prometheus)     toolformats/   tool calls / reasoning out of an answer, per format
    server.py      uvicorn on a bound socket  smoke.py      one question through the openai client
    remote.py      a client for a running server's adapter routes (chat --url, the menu)
    translate.py   /v1/messages and /v1/responses onto the chat request, and the chat answer read back
    response_store.py   the bounded store behind /v1/responses (previous_response_id, GET, DELETE, input_items)
    fields.py      the spec: every SDK request parameter per endpoint and engine (honoured / refused / hint)

The step (swiftbox/pipelines/serve.py) checks, runs the pre-deploy gate (swiftbox.verify.startup_gate),
opens the backend here and serves; this package imports nothing above it (tests/unit/test_layers.py).
"""

"""chat: talk to a model in the terminal - on the same engine `serve` uses, or to a running server.

    ./launch.sh chat MODEL                      # loads MODEL (builtin engine / vLLM), chats on stdin
    ./launch.sh chat --url http://host:8000     # a running swiftbox/OpenAI-compatible server
    ./launch.sh chat MODEL --prompt "Is 7 even?"   # one question, prints the answer, exits

Without --url the model is served on a private 127.0.0.1 port for the session and spoken to with the
official openai client, so the chat sees exactly what API clients see. Commands: /reset, /exit.
"""
from __future__ import annotations

import os
import secrets
import sys
import time

from swiftbox.errors import SwiftboxError, UserError
from swiftbox.pipelines.base import StepContext, StepResult, declare
from swiftbox.steps import ChatStep


def run(cfg: ChatStep, ctx: StepContext) -> StepResult:

    if cfg.url:
        key = cfg.api_key or os.environ.get("SWIFTBOX_API_KEY") or "unused"
        return StepResult(metrics=_session(cfg.url.rstrip("/"), key, cfg.model, cfg))
    if not ctx.input:
        raise UserError("chat: give a MODEL to load or --url of a running server")
    from swiftbox.pipelines.serve import open_backend
    from swiftbox.pipelines.serve.app import build_app
    from swiftbox.pipelines.serve.server import ServerThread
    from swiftbox.steps import ServeStep

    serve_cfg = ServeStep(adapters=cfg.adapters, dtype=cfg.dtype, trust_remote_code=cfg.trust_remote_code)
    backend, names, close = open_backend(serve_cfg, ctx.input, ctx.platform, work_dir=ctx.work_dir,
                                         log=lambda m: print(m, file=sys.stderr, flush=True))
    key = secrets.token_urlsafe(16)
    server = None
    try:
        server = ServerThread(build_app(backend, api_key=key)).start()
        metrics = _session(server.url, key, names.primary, cfg)
        return StepResult(metrics={**metrics, "engine": backend.name})
    finally:
        if server is not None:
            server.stop()
        close()


def _session(url: str, key: str, model, cfg) -> dict:
    import openai

    base = url if url.endswith("/v1") else url + "/v1"
    client = openai.OpenAI(base_url=base, api_key=key, max_retries=0, timeout=600)
    try:
        served = [m.id for m in client.models.list()]
    except openai.APIConnectionError:
        raise UserError(f"url: nothing answers at {url}") from None
    except openai.AuthenticationError:
        raise UserError(f"api_key: {url} refused the API key (set --api-key or SWIFTBOX_API_KEY)") from None
    if model and model not in served:
        model = next((m for m in served if m.endswith(str(model).rstrip("/").split("/")[-1])), None) or served[0]
    model = model or served[0]
    history = [{"role": "system", "content": cfg.system}] if cfg.system else []
    if cfg.prompt is not None:
        answer, ttft = _ask(client, model, history + [{"role": "user", "content": cfg.prompt}], cfg, echo=True)
        return {"model": model, "answer": answer, "ttft_s": round(ttft, 4), "ok": True}
    print(f"chatting with {model} at {base}  (/reset clears, /exit or Ctrl-D quits)", file=sys.stderr)
    turns = 0
    while True:
        try:
            line = input("you> ")
        except (EOFError, KeyboardInterrupt):
            print(file=sys.stderr)
            break
        text = line.strip()
        if not text:
            continue
        if text in ("/exit", "/quit", "exit", "quit"):
            break
        if text == "/reset":
            history = history[:1] if cfg.system else []
            continue
        history.append({"role": "user", "content": text})
        answer, _ = _ask(client, model, history, cfg, echo=True, prefix="bot> ")
        history.append({"role": "assistant", "content": answer})
        turns += 1
    return {"model": model, "turns": turns, "ok": True}


def _ask(client, model: str, messages: list, cfg, *, echo: bool, prefix: str = "") -> tuple[str, float]:
    import openai

    started = time.perf_counter()
    ttft, parts = None, []
    try:
        stream = client.chat.completions.create(model=model, messages=messages, max_tokens=cfg.max_tokens,
                                                temperature=cfg.temperature, stream=True)
        if echo and prefix:
            print(prefix, end="", flush=True)
        for chunk in stream:
            for choice in chunk.choices:
                if choice.delta.content:
                    ttft = ttft if ttft is not None else time.perf_counter() - started
                    parts.append(choice.delta.content)
                    if echo:
                        print(choice.delta.content, end="", flush=True)
    except openai.APIStatusError as exc:
        raise SwiftboxError(f"chat: the server answered {exc.status_code}: {exc.message}") from None
    if echo:
        print(flush=True)
    return "".join(parts), (ttft if ttft is not None else time.perf_counter() - started)


PIPELINE = declare("chat", ChatStep, produces_model=False, needs_input=False, run=run)

"""chat: talk to a model in the terminal - on the same engine `serve` uses, or to a running server.

    ./launch.sh chat MODEL                      # loads MODEL (builtin engine / vLLM), chats on stdin
    ./launch.sh chat --url http://host:8000     # a running swiftbox/OpenAI-compatible server
    ./launch.sh chat MODEL --prompt "Is 7 even?"   # one question, prints the answer, exits
    ./launch.sh chat --url http://host:8000 --adapters mine=runs/x/sft   # load an adapter into it, chat with it

Without --url the model is served on a private 127.0.0.1 port for the session and spoken to with the
official openai client, so the chat sees exactly what API clients see. Sampling follows the model's own
generation_config.json (do_sample, temperature, top_p, top_k, repetition_penalty) unless --temperature is given, and is
greedy where the model has none (with --url: greedy unless --temperature): a small model sampled at an arbitrary
temperature answers nonsense that its greedy answer does not have. With --url, `--adapters` are loaded
into the running server (POST /v1/load_lora_adapter) and the chat talks to the last of them. Commands: /reset,
/exit, /models (what the server serves), /use NAME, /load NAME PATH, /unload NAME.
"""
from __future__ import annotations

import os
import secrets
import sys
import time
from pathlib import Path
from typing import Optional

from swiftbox.contract import StepContext, StepResult, declare
from swiftbox.device import Platform
from swiftbox.errors import SwiftboxError, UserError
from swiftbox.pipelines.serve import ServePlan, open_planned, plan_engine
from swiftbox.steps import ChatStep, ServeStep


def _serve_config(cfg: ChatStep) -> ServeStep:
    """The private server a local chat talks to (127.0.0.1, its own key)."""
    return ServeStep(adapters=cfg.adapters, dtype=cfg.dtype, trust_remote_code=cfg.trust_remote_code)


def check(cfg: ChatStep, platform: Platform, input: str) -> Optional[ServePlan]:
    """With --url: nothing to plan (the server is someone else's). Else the model's engine, picked and gated as
    serve's check does it, before any output exists."""
    if cfg.url:
        return None
    if not input:
        raise UserError("chat: give a MODEL to load or --url of a running server")
    notes: list[str] = []
    engine = plan_engine(_serve_config(cfg), platform, input, notes)
    return ServePlan(engine=engine, notes=tuple(notes))


def run(cfg: ChatStep, ctx: StepContext) -> StepResult:

    if cfg.url:
        key = cfg.api_key or os.environ.get("SWIFTBOX_API_KEY") or "unused"
        model = _load_remote_adapters(cfg.url, key, cfg.adapters) or cfg.model
        return StepResult(metrics=_session(cfg.url.rstrip("/"), key, model, cfg, None))
    from swiftbox.serving.app import build_app
    from swiftbox.serving.server import ServerThread

    plan = ctx.plan_as(ServePlan)
    backend, names, close = open_planned(_serve_config(cfg), ctx.input, plan.engine, ctx.platform,
                                         work_dir=ctx.work_dir, log=lambda m: print(m, file=sys.stderr, flush=True))
    key = secrets.token_urlsafe(16)
    server = None
    try:
        server = ServerThread(build_app(backend, api_key=key)).start()
        metrics = _session(server.url, key, names.primary, cfg, sampling_defaults(ctx.input))
        return StepResult(metrics={**metrics, "engine": backend.name})
    finally:
        if server is not None:
            server.stop()
        close()


def sampling_defaults(ref: str) -> dict:
    """The request's sampling settings from the model's generation_config.json: its do_sample settings where it
    samples, else greedy (temperature 0) - also where it has no generation config at all."""
    import json

    from swiftbox.modeling.loading import resolve_spec

    spec = resolve_spec(ref)
    config: dict = {}
    for folder in [*reversed(spec.adapters), spec.base]:
        try:
            config = json.loads((folder / "generation_config.json").read_text())
            break
        except (OSError, ValueError):
            continue
    if not config.get("do_sample"):
        return {"temperature": 0.0}
    out: dict = {"temperature": float(config.get("temperature") or 1.0)}
    if config.get("top_p") not in (None, 1.0):
        out["top_p"] = float(config["top_p"])
    extra = {k: config[k] for k in ("top_k", "repetition_penalty") if config.get(k) not in (None, 0, 1.0)}
    if extra:
        out["extra_body"] = extra
    return out


def request_sampling(cfg, defaults: dict | None) -> dict:
    """--temperature wins; else the model's generation_config (`defaults`); else greedy."""
    if cfg.temperature is not None:
        return {"temperature": cfg.temperature}
    return dict(defaults or {"temperature": 0.0})


def _load_remote_adapters(url: str, key: str, adapters: dict | None) -> str | None:
    """Load `adapters` into the server at `url`; the last one's name (the model to chat with), or None."""
    from swiftbox.serving.remote import Remote, RemoteError

    if not adapters:
        return None
    remote = Remote(url, key)
    try:
        served = remote.models()
        for name, path in adapters.items():
            if name in served:
                print(f"adapter {name}: already served", file=sys.stderr)
                continue
            print(remote.load(name, str(Path(path).expanduser().resolve())), file=sys.stderr)
    except RemoteError as exc:
        raise UserError(f"adapters: {url} refused it ({exc})") from None
    finally:
        remote.close()
    return list(adapters)[-1]


def _command(text: str, remote, model: str, served: list[str]) -> str:
    """A session command (/models, /use, /load, /unload): prints the outcome, returns the model to use."""
    from swiftbox.serving.remote import RemoteError

    cmd, *args = text.split()
    try:
        if cmd == "/models":
            served[:] = remote.models()
            print("  ".join(f"[{m}]" if m == model else m for m in served), file=sys.stderr)
        elif cmd == "/use" and len(args) == 1:
            served[:] = remote.models()
            if args[0] not in served:
                print(f"not served: {args[0]} (served: {', '.join(served)})", file=sys.stderr)
            else:
                model = args[0]
        elif cmd == "/load" and len(args) == 2:
            print(remote.load(args[0], str(Path(args[1]).expanduser().resolve())), file=sys.stderr)
            model = args[0]
        elif cmd == "/unload" and len(args) == 1:
            print(remote.unload(args[0]), file=sys.stderr)
            if model == args[0]:
                model = (remote.models() or [model])[0]
        else:
            print("commands: /models  /use NAME  /load NAME PATH  /unload NAME  /reset  /exit", file=sys.stderr)
    except RemoteError as exc:
        print(f"refused: {exc}", file=sys.stderr)
    return model


def _session(url: str, key: str, model, cfg, defaults: dict | None = None) -> dict:
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
    sampling = request_sampling(cfg, defaults)
    if cfg.prompt is not None:
        answer, ttft = _ask(client, model, history + [{"role": "user", "content": cfg.prompt}], cfg, sampling,
                            echo=True)
        return {"model": model, "answer": answer, "ttft_s": round(ttft, 4), "temperature": sampling["temperature"],
                "ok": True}
    print(f"chatting with {model} at {base}  (served: {', '.join(served)}; /reset clears, /models, /use NAME, "
          "/load NAME PATH, /unload NAME; /exit or Ctrl-D quits)", file=sys.stderr)
    from swiftbox.serving.remote import Remote

    remote = Remote(url, key)
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
        if text.startswith("/"):
            model = _command(text, remote, model, served)
            continue
        history.append({"role": "user", "content": text})
        answer, _ = _ask(client, model, history, cfg, sampling, echo=True, prefix="bot> ")
        history.append({"role": "assistant", "content": answer})
        turns += 1
    return {"model": model, "turns": turns, "ok": True}


def _ask(client, model: str, messages: list, cfg, sampling: dict, *, echo: bool, prefix: str = "") -> tuple[str, float]:
    import openai

    started = time.perf_counter()
    ttft, parts = None, []
    try:
        stream = client.chat.completions.create(model=model, messages=messages, max_tokens=cfg.max_tokens,
                                                stream=True, **sampling)
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


PIPELINE = declare("chat", ChatStep, produces_model=False, needs_input=False, check=check, run=run)

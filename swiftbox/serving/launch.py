"""From a serve config to a running engine behind the `Backend` seam: the served names, the engine choice,
the API key and exposure rule, and `open_backend` (loads the model for the built-in engine, or starts vLLM).

The serve step (swiftbox/pipelines/serve.py), the chat step and verify's served link all open their engine
here. The engine choice (`pick_engine`), the exposure rule and the pre-deploy gate (files + engine fit,
swiftbox.verify.startup_gate) run in the serve / chat step's check, before any output exists; `open_backend` gets
the engine it picked.

Exposure: the key comes from `api_key`, `api_key_file` or $SWIFTBOX_API_KEY; a non-loopback host without
one is refused unless both `insecure_no_auth` and `expose_without_auth` are set (docs/serving.md, "Threat model").
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Optional

from swiftbox.errors import Unsupported, UserError
from swiftbox.modeling.adapter_file import is_adapter_dir

if TYPE_CHECKING:
    from swiftbox.catalog.presets import Preset
    from swiftbox.device import Platform
    from swiftbox.modeling.loading import ModelSpec
    from swiftbox.serving.backend import Backend
    from swiftbox.serving.builtin.backend import BuiltinBackend
    from swiftbox.serving.engine_choice import EngineChoice
    from swiftbox.serving.vllm.child import VllmBackend
    from swiftbox.steps import EvalStep, ServeStep

Log = Callable[[str], None]


@dataclass
class Names:
    """What the served models are called: the base, the input adapter (if the input is one), extra adapters."""

    base: str
    primary: str                    # what a client asks for by default (the step's own model)
    loras: dict[str, str] = field(default_factory=dict)   # name -> adapter dir, input adapter first


def _short(ref: str) -> str:
    p = Path(ref)
    return p.name if (p.is_dir() or os.sep in ref) and p.name else ref


def served_names(cfg: ServeStep, ref: str, spec: ModelSpec) -> Names:
    extra = dict(cfg.adapters or {})
    for name, path in extra.items():
        if not name or any(c.isspace() for c in name):
            raise UserError(f"adapters: bad adapter name {name!r}; expected name=path with a non-empty name")
        if not is_adapter_dir(path):
            raise UserError(f"adapters.{name}: {path} is not a LoRA adapter directory (no adapter_config.json)")
    if spec.adapters:
        base = _short(spec.base_ref)
        primary = cfg.served_model_name or _short(ref)
        if primary == base:
            base = f"{base}-base"
        loras = {primary: str(spec.adapters[-1]), **extra}
    else:
        base = cfg.served_model_name or _short(ref)
        primary, loras = base, extra
    if base in extra:
        raise UserError(f"adapters: the name {base!r} is the base model's; choose another adapter name")
    return Names(base=base, primary=primary, loras=loras)


def choose_engine(cfg: ServeStep, platform: Platform, model: Optional[str] = None) -> EngineChoice:
    """The engine for this config and why. `auto`: vLLM where the platform prefers it when installed (CUDA, NPU);
    where it does not (the CPU: `vllm_auto_instead`), the per-machine measurement of both engines for `model`
    decides (serving/engine_choice.py): vLLM when installed and measured faster, else the built-in engine."""
    from swiftbox.serving.engine_choice import EngineChoice, decide_engine, find_record

    if cfg.engine == "vllm":
        platform.require("vllm")
        return EngineChoice("vllm", "engine: vllm")
    if cfg.engine == "builtin":
        return EngineChoice("builtin", "engine: builtin")
    refusal = platform.why_not("vllm")
    if platform.vllm_auto_instead is None:
        if refusal is None:
            return EngineChoice("vllm", f"{platform.vllm_package} on {platform.name}")
        return EngineChoice("builtin", f"vLLM not used: {refusal.why}")
    from swiftbox.device.vllm_cpu import REQUIREMENT

    dtype = platform.resolve_dtype(cfg.dtype)
    record = find_record(model, dtype, REQUIREMENT) if model else None
    return decide_engine(model, dtype, refusal.why if refusal is not None else None, record)


def pick_engine(cfg: ServeStep, platform: Platform, log: Log, model: Optional[str] = None) -> str:
    """`choose_engine`'s engine; an `auto` choice is logged with its reason (and the figures it read)."""
    choice = choose_engine(cfg, platform, model)
    if cfg.engine == "auto":
        log(choice.line())
    return choice.engine


KEY_ENV = "SWIFTBOX_API_KEY"
LOOPBACK_NAMES = {"localhost", "localhost.localdomain", "ip6-localhost"}


def api_key(cfg: ServeStep | EvalStep) -> Optional[str]:
    """The key clients must send: `api_key`, else the first line of `api_key_file`, else $SWIFTBOX_API_KEY."""
    if cfg.api_key:
        return cfg.api_key
    if cfg.api_key_file:
        path = Path(cfg.api_key_file).expanduser()
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeError) as exc:
            raise UserError(f"api_key_file: cannot read {path} ({getattr(exc, 'strerror', None) or exc})") from None
        key = lines[0].strip() if lines else ""
        if not key:
            raise UserError(f"api_key_file: {path} is empty; expected the API key on its first line")
        return key
    return os.environ.get(KEY_ENV) or None


def is_loopback(host: str) -> bool:
    import ipaddress

    if host.lower() in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_exposure(cfg: ServeStep, key: Optional[str], log: Log) -> None:
    """A server reachable from other machines needs a key, unless the user says in so many words that it does not."""
    if key or is_loopback(cfg.host):
        return
    if not cfg.insecure_no_auth:
        raise UserError(f"host {cfg.host}: serving beyond this machine without an API key lets anyone on the network "
                        f"use it; set {KEY_ENV} or --api-key-file (or pass --insecure-no-auth --expose-without-auth "
                        "to accept that)")
    if not cfg.expose_without_auth:   # one flag is easy to copy from a laptop recipe onto a server: it takes two
        raise UserError(f"host {cfg.host} with --insecure-no-auth: anyone on the network could use the model and load "
                        f"or unload adapters; set {KEY_ENV} or --api-key-file, serve on 127.0.0.1, or add "
                        "--expose-without-auth to say that is what you want")
    log(f"WARNING: serving on {cfg.host} with NO API key (--insecure-no-auth): anyone who can reach this port can "
        "use the model")


def open_backend(cfg: ServeStep, ref: str, platform: Platform, *, work_dir: Path, log: Log,
                 engine: Optional[str] = None) -> tuple[Backend, Names, Callable[[], None]]:
    """(backend, names, close) for this config: loads the model or starts vLLM (`engine`: already picked)."""
    from swiftbox.modeling.loading import resolve_spec
    from swiftbox.serving.adapters import make_policy

    spec = resolve_spec(ref)
    names = served_names(cfg, ref, spec)
    engine = engine or pick_engine(cfg, platform, log, model=ref)
    dtype = platform.resolve_dtype(cfg.dtype)
    backend: Backend
    if engine == "vllm":
        backend, names, close = _open_vllm(cfg, spec, names, platform, dtype, work_dir, log, preset_for(ref, spec))
    else:
        backend, names, close = _open_builtin(cfg, spec, names, platform, dtype, log)
    backend.runtime_adapters = make_policy(cfg, engine, spec, max_rank=backend.max_lora_rank, base_name=names.base)
    if backend.runtime_adapters is not None:
        log("runtime adapters: clients may load LoRA adapters from "
            + ", ".join(str(r) for r in backend.runtime_adapters.roots))
    return backend, names, close


def _open_builtin(cfg: ServeStep, spec: ModelSpec, names: Names, platform: Platform, dtype: str,
                  log: Log) -> tuple[BuiltinBackend, Names, Callable[[], None]]:
    from swiftbox.device.threads import ThreadGovernor
    from swiftbox.modeling.loading import bnb_config, load_model, load_tokenizer
    from swiftbox.serving.builtin.backend import BuiltinBackend
    from swiftbox.serving.builtin.engine import BuiltinEngine
    from swiftbox.serving.fit import BUILTIN_MAX_LORA_RANK, adapter_problems_for_builtin

    extra = {k: v for k, v in names.loras.items() if not (spec.adapters and k == names.primary)}
    for name, path in extra.items():   # before the model loads: a refusal costs nothing
        problems = adapter_problems_for_builtin(Path(path))
        if problems:
            raise Unsupported(f"adapters.{name}: the built-in engine cannot serve it: {problems[0]}")
    quant = bnb_config(cfg.quantization, platform, dtype) if cfg.quantization else None
    tokenizer = load_tokenizer(spec, trust_remote_code=cfg.trust_remote_code)
    input_adapter = [names.primary] * len(spec.adapters) if spec.adapters else None
    model = load_model(spec, platform, dtype, trust_remote_code=cfg.trust_remote_code, quantization_config=quant,
                       adapter_names=input_adapter)
    for name, path in extra.items():
        from peft import PeftModel

        if hasattr(model, "peft_config"):
            model.load_adapter(path, adapter_name=name)
        else:
            model = PeftModel.from_pretrained(model, path, adapter_name=name)
    model.eval()
    limit = cfg.max_model_len or int(getattr(model.config, "max_position_embeddings", 2048) or 2048)
    threads = ThreadGovernor()      # the CPU thread policy: the cores other processes leave free
    engine = BuiltinEngine(model, tokenizer, base_name=names.base, adapters=list(names.loras),
                           max_batch_size=cfg.max_batch_size, max_model_len=limit, device=platform.torch_device(0),
                           max_waiting=cfg.max_queue, prefill_chunk=cfg.prefill_chunk, threads=threads)
    engine.start()
    log(f"built-in engine: {names.base} + {len(names.loras)} adapter(s), {dtype}, batch {cfg.max_batch_size}, "
        f"context {limit}, prefill chunk {cfg.prefill_chunk}; {threads.current.line()}")
    backend = BuiltinBackend(engine, tokenizer, max_model_len=limit,
                             trust_request_chat_template=cfg.trust_request_chat_template)
    backend.max_lora_rank = cfg.max_lora_rank or BUILTIN_MAX_LORA_RANK
    return backend, names, engine.shutdown


def preset_for(ref: str, spec: ModelSpec) -> Optional[Preset]:
    """The registry preset of the served model (by name/id, or an id inside the resolved base path), or None."""
    from swiftbox.catalog import presets as registry

    found = registry.find(ref)
    if found:
        return found
    base = str(spec.base).replace("--", "/").lower()
    return next((p for p in registry.PRESETS if p.hf_id.lower() in base or p.modelscope_id.lower() in base), None)


def _open_vllm(cfg: ServeStep, spec: ModelSpec, names: Names, platform: Platform, dtype: str, work_dir: Path,
               log: Log, preset: Optional[Preset] = None) -> tuple[VllmBackend, Names, Callable[[], None]]:
    from swiftbox.serving.server import bind
    from swiftbox.serving.vllm.child import VllmBackend, VllmProcess
    from swiftbox.serving.vllm.plan import plan

    if len(spec.adapters) > 1:
        raise UserError("model: vLLM serves one adapter on its base; merge the earlier adapters first (merge step)")
    probe = bind("127.0.0.1", 0)
    port = probe.getsockname()[1]
    probe.close()
    p = plan(cfg, platform, model_path=str(spec.base), base_name=names.base, loras=names.loras, dtype=dtype, port=port,
             preset=preset)
    log("vllm: " + " ".join(p.argv))  # the internal key travels in the env, not argv
    process = VllmProcess(p, Path(work_dir) / "vllm.log")
    process.start(timeout=cfg.startup_timeout)
    backend = VllmBackend(process)
    return backend, names, process.stop

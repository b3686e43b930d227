"""What a runtime adapter may be: a plain LoRA delta on the served base, checked before any engine sees it.

A PEFT adapter directory can ask for much more than a delta. Its config can ask PEFT to rewrite the base weights
while it builds the adapter (`init_lora_weights` pissa/olora/corda/loftq/lora_ga), to change the architecture
(`layer_replication`), to wrap whole modules (`modules_to_save`, `trainable_token_indices`, `target_parameters`)
or to train base biases (`bias`); its weights file can carry any tensor, and PEFT hands every key without
`lora_` straight to `load_state_dict` - a base weight in an adapter file overwrites the served base for everyone.
So a runtime load is checked here, in the front door's worker thread, and only what passed reaches the engine:

- the config: LoRA only, each option either known to be a plain delta or at its default (one 400 naming the field;
  an unconverted PiSSA/OLoRA adapter is told how to convert it), rank at most the engine's cap, the module
  patterns PEFT would run as regular expressions resolved here under a time limit into plain module names;
- the weights (`adapter_model.safetensors`): every tensor a LoRA matrix (`...lora_A.weight`, `...lora_B.weight`,
  the embedding `lora_embedding_A/B`, `lora_B.bias` with `lora_bias`), of a floating type, of a rank the config
  declares; their size (counted at 4 bytes a value, as PEFT keeps adapters in float32) read from the header and
  held against the memory left before any data is read; then every value finite.

The result (`CheckedAdapter`) holds the LoRA options PEFT is given (a fixed list; `init_lora_weights` set so PEFT
runs no base-reading initialisation) and the tensors already read: the built-in engine builds the adapter from
those, never from the files again (builtin/adapter_slots.py), so a file swapped after the check changes nothing.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from swiftbox.serving import fit

WEIGHTS = "adapter_model.safetensors"
BYTES_PER_VALUE = 4           # PEFT keeps LoRA matrices in float32 (autocast_adapter_dtype)
FLOAT_DTYPES = ("F16", "BF16", "F32", "F64")
# LoraConfig options whose every value is a plain delta (or only describes one); what PEFT is given at load
PASSED = ("r", "lora_alpha", "target_modules", "exclude_modules", "lora_dropout", "fan_in_fan_out", "bias",
          "use_rslora", "layers_to_transform", "layers_pattern", "rank_pattern", "alpha_pattern", "lora_bias",
          "base_model_name_or_path", "revision", "task_type")
# options that only record where the adapter came from or configure an initialisation that is not run here
IGNORED = ("peft_type", "auto_mapping", "peft_version", "inference_mode", "init_lora_weights", "megatron_core",
           "loftq_config", "eva_config", "corda_config", "lora_ga_config", "runtime_config", "qalora_group_size",
           "ensure_weight_tying")
WHY = {   # an option that makes the adapter more than a LoRA delta -> why a runtime adapter cannot have it
    "layer_replication": "it changes the model's architecture by copying layers",
    "modules_to_save": "it replaces whole modules with trained copies",
    "trainable_token_indices": "it trains embedding rows of the base",
    "target_parameters": "it reparametrizes the base model's parameters",
    "use_dora": "DoRA rescales the base weights' columns",
    "megatron_config": "Megatron-parallel LoRA layers",
}
PATTERN_BUDGET_S = 0.25       # per regular expression, over all the module names
MAX_PATTERN = 512
LORA_KEY = re.compile(r"^base_model\.model\.([\w.]+)\.(lora_A\.weight|lora_B\.weight|lora_B\.bias|"
                      r"lora_embedding_A|lora_embedding_B)$")
PLAIN_NAME = re.compile(r"^[\w.\-]+$")


class AdapterRefused(ValueError):
    """Why the adapter cannot be loaded: `field` is what the client's 400 names."""

    def __init__(self, field: str, message: str, status: int = 400, code: str = "adapter_unsupported"):
        super().__init__(message)
        self.field, self.status, self.code = field, status, code


@dataclass
class CheckedAdapter:
    path: Path
    options: dict[str, Any]                 # LoraConfig keyword arguments PEFT is given
    rank: int
    nbytes: int
    tensors: dict[str, Any] = field(default_factory=dict, repr=False)


def check_config(config: dict, *, engine: str, max_rank: int, module_names: Callable[[], list[str]]
                 ) -> dict[str, Any]:
    """The LoraConfig options to build this adapter with, or AdapterRefused naming the first field at fault."""
    from peft import LoraConfig

    if config.get("peft_type", "LORA") != "LORA":
        raise AdapterRefused("peft_type", f"peft_type {str(config.get('peft_type'))[:40]!r}: only LoRA adapters are "
                                          "loaded at run time")
    problem = fit.init_problem(config)
    if problem:
        raise AdapterRefused("init_lora_weights", problem)
    defaults = {f.name: f.default for f in LoraConfig.__dataclass_fields__.values()}
    for name, value in config.items():
        if name in PASSED or name in IGNORED or name not in defaults:   # unknown names: PEFT drops them too
            continue
        default = defaults[name]
        if value in (None, False, [], {}) or (not callable(default) and value == default):
            continue
        why = WHY.get(name, "this server does not know it to leave the base model untouched")
        raise AdapterRefused(name, f"{name} {str(value)[:80]} ({why}; a runtime adapter may only add a LoRA delta: "
                                   "merge it and serve the merged model)")
    if config.get("bias", "none") != "none":
        raise AdapterRefused("bias", f"bias {str(config['bias'])[:20]!r} (it trains and saves the base model's own "
                                     "biases; a runtime adapter may only add a LoRA delta)")
    options = {k: config[k] for k in PASSED if k in config and config[k] is not None}
    _check_numbers(options, max_rank, engine)
    _resolve_patterns(options, module_names)
    return {**options, "init_lora_weights": True, "inference_mode": True}


def _check_numbers(options: dict, max_rank: int, engine: str) -> None:
    def integer(value: Any) -> bool:
        return isinstance(value, int) and not isinstance(value, bool)

    def number(value: Any) -> bool:
        return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)

    r = options.get("r", 8)
    if not integer(r) or r < 1:
        raise AdapterRefused("r", f"r {str(r)[:40]} is not a positive integer")
    for name in ("rank_pattern", "alpha_pattern"):
        if not isinstance(options.get(name, {}), dict):
            raise AdapterRefused(name, f"{name} is not an object of module pattern -> number")
    ranks = {"r": r, **{f"rank_pattern[{k[:40]!r}]": v for k, v in options.get("rank_pattern", {}).items()}}
    for where, rank in ranks.items():
        if not integer(rank) or rank < 1:
            raise AdapterRefused("rank_pattern", f"{where} {str(rank)[:40]} is not a positive integer")
        if rank > max_rank:
            whose = ("the built-in engine's cap on runtime adapters (vLLM's largest max_lora_rank too)"
                     if engine == "builtin" else "the max_lora_rank vLLM was started with")
            raise AdapterRefused("r" if where == "r" else "rank_pattern",
                                 f"{where} = {rank} > {max_rank}, {whose}; restart the server with a larger "
                                 "--max-lora-rank (at most 512), or train a smaller rank")
    alphas = {"lora_alpha": options.get("lora_alpha", 8), **options.get("alpha_pattern", {})}
    for where, alpha in alphas.items():
        if not number(alpha):
            raise AdapterRefused("lora_alpha", f"{str(where)[:40]}: {str(alpha)[:40]} is not a finite number")
    dropout = options.get("lora_dropout", 0.0)
    if not number(dropout) or not 0 <= dropout < 1:
        raise AdapterRefused("lora_dropout", f"lora_dropout {str(dropout)[:40]} is not a number in [0, 1)")
    layers = options.get("layers_to_transform")
    if layers is not None and not (integer(layers) or (isinstance(layers, list) and len(layers) <= 100_000
                                                        and all(integer(x) for x in layers))):
        raise AdapterRefused("layers_to_transform", "layers_to_transform is not a layer index or a list of them")


def _resolve_patterns(options: dict, module_names: Callable[[], list[str]]) -> None:
    """PEFT runs a string target_modules / exclude_modules (and every rank_pattern / alpha_pattern key) as a
    regular expression against every module name, on the engine's thread: a catastrophic one would stall every
    client. Each is run here instead, under a time limit, and PEFT is given the plain module names it matched."""
    for name in ("target_modules", "exclude_modules"):
        value = options.get(name)
        if value is None or value == "all-linear":
            continue
        if isinstance(value, list):
            if not all(isinstance(v, str) and 0 < len(v) <= MAX_PATTERN for v in value):
                raise AdapterRefused(name, f"{name} is not a list of module names")
            continue      # PEFT matches list entries as names (exact or dotted suffix), never as patterns
        if not isinstance(value, str):
            raise AdapterRefused(name, f"{name} is neither a module name list nor a pattern")
        matched = _matches(name, value, module_names(), full=True)
        if name == "target_modules" and not matched:
            raise AdapterRefused(name, f"target_modules pattern {value[:80]!r} matches no module of the served model")
        options[name] = matched
    for name in ("rank_pattern", "alpha_pattern"):
        resolved: dict[str, Any] = {}
        for key, value in (options.get(name) or {}).items():
            if PLAIN_NAME.match(key) and len(key) <= MAX_PATTERN:
                resolved[key] = value          # dots and names: PEFT's (.*\.)?(key)$ stays cheap
                continue
            for module in _matches(name, key, module_names(), full=False):
                resolved[re.escape(module)] = value
        if name in options:
            options[name] = resolved
    layers = options.get("layers_pattern")
    if layers is not None:
        names = [layers] if isinstance(layers, str) else layers
        if not isinstance(names, list) or not all(isinstance(n, str) and re.fullmatch(r"\w{1,64}", n) for n in names):
            raise AdapterRefused("layers_pattern", "layers_pattern is not a layer container name (such as 'layers')")


def _matches(field_name: str, pattern: str, names: list[str], *, full: bool) -> list[str]:
    """The names `pattern` matches as PEFT would match it, run by the `regex` module (which can stop a match: the
    standard `re` PEFT uses cannot) within PATTERN_BUDGET_S for all the names together."""
    import time

    import regex

    if len(pattern) > MAX_PATTERN:
        raise AdapterRefused(field_name, f"{field_name}: a pattern longer than {MAX_PATTERN} characters")
    deadline = time.monotonic() + PATTERN_BUDGET_S
    try:
        compiled = regex.compile(pattern if full else rf"(?:.*\.)?(?:{pattern})$")
        run = compiled.fullmatch if full else compiled.match
        found = []
        for name in names:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            if run(name, timeout=left, concurrent=True):
                found.append(name)
        return found
    except TimeoutError:
        raise AdapterRefused(field_name, f"{field_name}: the pattern {pattern[:80]!r} takes too long to match a "
                                         "module name (catastrophic backtracking); list the module names") from None
    except (regex.error, RecursionError, OverflowError) as exc:
        raise AdapterRefused(field_name, f"{field_name}: {pattern[:80]!r} is not a valid pattern ({exc})") from None


def check_weights(path: Path, options: dict, *, bytes_left: int, budget_hint: str, keep: bool) -> CheckedAdapter:
    """The adapter's tensors (kept when `keep`), checked as the module docstring says, or AdapterRefused."""
    import torch
    from safetensors import safe_open

    file = path / WEIGHTS
    declared = {options.get("r", 8), *(options.get("rank_pattern") or {}).values()}
    ranks: dict[str, dict[str, int]] = {}
    values = 0
    try:
        with safe_open(str(file), framework="pt") as handle:
            header = {k: (handle.get_slice(k).get_dtype(), handle.get_slice(k).get_shape()) for k in handle.keys()}  # noqa: SIM118
            for key, (dtype, shape) in header.items():
                found = LORA_KEY.match(key)
                if not found:
                    raise AdapterRefused("weights", f"{WEIGHTS} holds {key[:120]}, which is not a LoRA matrix (an "
                                                    "adapter file carries lora_A / lora_B only; any other tensor would "
                                                    "overwrite the served model's own weights)")
                if dtype not in FLOAT_DTYPES or not 1 <= len(shape) <= 4:
                    raise AdapterRefused("weights", f"{key[:120]}: a {dtype} tensor of shape {shape}, not a LoRA "
                                                    "matrix")
                module, kind = found.group(1), found.group(2)
                if kind in ("lora_A.weight", "lora_embedding_A"):
                    ranks.setdefault(module, {})["A"] = shape[0]
                elif kind != "lora_B.bias":
                    ranks.setdefault(module, {})["B"] = shape[1] if len(shape) > 1 else -1
                values += math.prod(shape)
            if not header:
                raise AdapterRefused("weights", f"{WEIGHTS} holds no tensors")
            for module, pair in ranks.items():
                a, b = pair.get("A"), pair.get("B")
                if a is None or b is None or a != b:
                    raise AdapterRefused("weights", f"{module[:120]}: lora_A and lora_B do not form a pair (ranks "
                                                    f"{a} and {b})")
                if a not in declared:
                    raise AdapterRefused("weights", f"{module[:120]} has rank {a}, but adapter_config.json declares "
                                                    f"rank {sorted(x for x in declared if isinstance(x, int))}")
            nbytes = values * BYTES_PER_VALUE
            if nbytes > bytes_left:
                raise AdapterRefused("weights", f"the adapter takes {nbytes / 2**20:.1f} MB, more than the "
                                                f"{max(bytes_left, 0) / 2**20:.1f} MB runtime adapters have left "
                                                f"({budget_hint})", code="adapter_limit")
            tensors = {}
            for key in header:
                tensor = handle.get_tensor(key)
                if not bool(torch.isfinite(tensor).all()):
                    raise AdapterRefused("weights", f"{key[:120]} holds NaN or inf values: every answer through this "
                                                    "adapter would be garbage (weights must be finite)")
                if keep:
                    tensors[key] = tensor
    except AdapterRefused:
        raise
    except Exception as exc:  # noqa: BLE001 - safetensors' own error types: a file that does not read
        reason = getattr(exc, "strerror", None) if isinstance(exc, OSError) else None   # an OSError names the path
        reason = (reason or " ".join(str(exc).replace(str(path), path.name).split())[:160] or type(exc).__name__)
        raise AdapterRefused("weights", f"{WEIGHTS} cannot be read ({reason})") from None
    rank = max((p["A"] for p in ranks.values()), default=0)
    return CheckedAdapter(path=path, options=options, rank=rank, nbytes=nbytes, tensors=tensors)


def module_names_of(base_dir: Path) -> list[str]:
    """The module names of the served model that hold weights, from its safetensors headers (nothing is loaded)."""
    from safetensors import safe_open

    names: set[str] = set()
    for shard in sorted(Path(base_dir).glob("*.safetensors")):
        try:
            with safe_open(str(shard), framework="pt") as handle:
                names.update(k.rsplit(".", 1)[0] for k in handle.keys())  # noqa: SIM118
        except Exception:  # noqa: BLE001 - an unreadable shard: the engine would not have loaded either
            continue
    return sorted(names)

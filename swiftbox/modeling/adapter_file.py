"""An adapter's `adapter_config.json`, read once into a typed record, and each consumer's limits as one function.

After vLLM's `PEFTHelper` (vllm/lora/peft_helper.py: `from_local_dir` + `validate_legal`): the file is parsed and
its fields checked in one place (`AdapterFile.read`), so a malformed file is refused in one line naming the file and
the field, and every reader of an adapter (serve, verify, merge, quantize, the loaders) sees the same values.
What each consumer can take is one function over the record (`limits`): the built-in engine and vLLM both cap
runtime adapters at rank 512 (vLLM's largest `max_lora_rank`); vLLM also refuses `modules_to_save`, DoRA, adapter
bias and LoRA on embeddings; a GGUF LoRA holds plain LoRA matrices only.

Writers (PEFT's `save_pretrained`, training's rsLoRA rewrite) stay where they are; `CONFIG` is the file's name.
"""
from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Mapping, Optional, Union

from swiftbox.errors import UserError

CONFIG = "adapter_config.json"
MAX_RUNTIME_RANK = 512      # the built-in engine's cap on runtime adapters = vLLM's largest --max-lora-rank
TARGETS = ("builtin", "vllm", "gguf")
BIASES = ("none", "all", "lora_only")
# PEFT init_lora_weights values whose initialisation subtracts the adapter's start from the base weights
# (peft/tuners/lora/layer.py: pissa_init, olora_init, corda_init, loftq_init, lora_ga_init): the trained adapter is
# a delta on that rewritten base until save_pretrained(path_initial_model_for_weight_conversion=...) converts it
BASE_REWRITING_PREFIXES = ("pissa", "olora", "corda", "loftq", "lora_ga")
# the other inits leave the base alone: their trained adapter is a plain delta on the untouched base
PLAIN_INITS = ("gaussian", "eva", "orthogonal", "mica")
CONVERT_HINT = ("convert it to a plain LoRA with PEFT (model.save_pretrained(out, "
                "path_initial_model_for_weight_conversion=<the adapter saved before training>))")
NOT_LINEAR = ("embed_tokens", "lm_head", "wte", "word_embeddings", "embed_out")


class AdapterFileError(UserError):
    """A malformed adapter_config.json: `field` is the key at fault ("" for the file as a whole), `reason` the
    message without the directory (what a server may show a client)."""

    def __init__(self, folder: Path, field_name: str, reason: str):
        super().__init__(f"{folder}: {reason}")
        self.field, self.reason = field_name, reason


def is_adapter_dir(path: Union[str, os.PathLike]) -> bool:
    """A directory holding an adapter_config.json (PEFT's mark of an adapter)."""
    return (Path(path) / CONFIG).is_file()


def _integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _names(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


@dataclass(frozen=True)
class AdapterFile:
    """The fields of an adapter_config.json every swiftbox consumer reads (PEFT's defaults where absent);
    `raw` keeps the whole file (read-only) for the options a loader passes on to PEFT unchanged."""

    path: Path
    peft_type: str = "LORA"
    r: int = 8
    rank_pattern: Mapping[str, int] = field(default_factory=dict)
    lora_alpha: float = 8
    alpha_pattern: Mapping[str, float] = field(default_factory=dict)
    target_modules: Union[tuple[str, ...], str, None] = None
    modules_to_save: Optional[tuple[str, ...]] = None
    use_dora: bool = False
    bias: str = "none"
    init: Union[bool, str] = True               # init_lora_weights
    base_model_name_or_path: Optional[str] = None
    use_rslora: bool = False
    raw: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def read(cls, folder: Union[str, Path]) -> AdapterFile:
        """The record of `folder`/adapter_config.json, or AdapterFileError naming the file and the field."""
        folder = Path(folder)
        try:
            config = json.loads((folder / CONFIG).read_text(encoding="utf-8"))
        except OSError as exc:
            raise AdapterFileError(folder, "", f"{CONFIG} cannot be read ({exc.strerror or type(exc).__name__})"
                                   ) from None
        except (ValueError, RecursionError) as exc:
            raise AdapterFileError(folder, "", f"{CONFIG} cannot be read ({' '.join(str(exc).split())[:160]})"
                                   ) from None
        if not isinstance(config, dict):
            raise AdapterFileError(folder, "", f"{CONFIG} is not a JSON object")
        return cls.parse(config, folder)

    @classmethod
    def parse(cls, config: dict[str, Any], folder: Path) -> AdapterFile:
        """The record of an already decoded adapter_config.json (AdapterFileError on a field of the wrong kind)."""
        def bad(name: str, what: str) -> AdapterFileError:
            return AdapterFileError(folder, name, f"{CONFIG}: {name} {str(config.get(name))[:60]} is not {what}")

        def get(name: str, default: Any) -> Any:
            value = config.get(name)
            return default if value is None else value

        peft_type, r, alpha = get("peft_type", "LORA"), get("r", 8), get("lora_alpha", 8)
        if not isinstance(peft_type, str):
            raise bad("peft_type", "a PEFT method name")
        if not _integer(r) or r < 1:
            raise bad("r", "a positive integer")
        if not _number(alpha):
            raise bad("lora_alpha", "a finite number")
        ranks, alphas = get("rank_pattern", {}), get("alpha_pattern", {})
        if not isinstance(ranks, dict) or not all(_integer(v) and v >= 1 for v in ranks.values()):
            raise bad("rank_pattern", "an object of module pattern -> positive integer")
        if not isinstance(alphas, dict) or not all(_number(v) for v in alphas.values()):
            raise bad("alpha_pattern", "an object of module pattern -> finite number")
        targets, saved = config.get("target_modules"), config.get("modules_to_save")
        if not (targets is None or isinstance(targets, str) or _names(targets)):
            raise bad("target_modules", "a module name list or a pattern")
        if not (saved is None or _names(saved)):
            raise bad("modules_to_save", "a module name list")
        bias, init = get("bias", "none"), get("init_lora_weights", True)
        if bias not in BIASES:
            raise bad("bias", f"one of {', '.join(BIASES)}")
        if not isinstance(init, (bool, str)):
            raise bad("init_lora_weights", "true, false or an initialisation's name")
        for name in ("use_dora", "use_rslora"):
            if not isinstance(get(name, False), bool):
                raise bad(name, "true or false")
        base = config.get("base_model_name_or_path")
        if not (base is None or isinstance(base, str)):
            raise bad("base_model_name_or_path", "a model name or path")
        return cls(path=folder, peft_type=peft_type, r=r, rank_pattern=MappingProxyType(dict(ranks)),
                   lora_alpha=alpha, alpha_pattern=MappingProxyType(dict(alphas)),
                   target_modules=tuple(targets) if isinstance(targets, list) else targets,
                   modules_to_save=tuple(saved) if saved else None, use_dora=get("use_dora", False), bias=bias,
                   init=init, base_model_name_or_path=base or None, use_rslora=get("use_rslora", False),
                   raw=MappingProxyType(dict(config)))

    @property
    def max_rank(self) -> int:
        """The largest LoRA rank: `r` and every per-module rank in `rank_pattern`."""
        return max([self.r, *self.rank_pattern.values()])

    @property
    def kind(self) -> str:
        """lora | dora | the PEFT type in lower case (what merge records as the method)."""
        return "dora" if self.use_dora else self.peft_type.lower()

    def targets(self) -> list[str]:
        """target_modules as a list (a pattern string is one entry)."""
        value = self.target_modules
        return [value] if isinstance(value, str) else list(value or [])


def rewrites_base(init: Any) -> bool:
    """An init_lora_weights that rewrote the base weights while training (PiSSA, OLoRA, CorDA, LoftQ, LoRA-GA)."""
    return isinstance(init, str) and init.lower().startswith(BASE_REWRITING_PREFIXES)


def init_problem(init: Any) -> Optional[str]:
    """Why `init_lora_weights` makes the adapter something other than a plain delta on its base (None: it does not)."""
    if rewrites_base(init):
        return (f"init_lora_weights {init!r} rewrote the base weights while training, so this adapter is a delta on "
                f"that rewritten base, not on the base it names; {CONVERT_HINT}")
    if not (isinstance(init, bool) or init in PLAIN_INITS):
        return f"init_lora_weights {str(init)[:80]!r} is not one PEFT knows"
    return None


def type_problem(adapter: AdapterFile) -> Optional[str]:
    """The peft_type rule, once: swiftbox serves, merges and converts LoRA (and DoRA) adapters only."""
    if adapter.peft_type != "LORA":
        return f"peft_type {adapter.peft_type} (swiftbox serves, merges and converts LoRA adapters only)"
    return None


def rank_problem(rank: int, limit: int = MAX_RUNTIME_RANK) -> Optional[str]:
    """The rank-vs-limit rule, once: a LoRA rank above what the engines load at run time."""
    if rank > limit:
        return f"rank {rank} > {limit}, the largest rank the built-in engine and vLLM serve (vLLM's max_lora_rank)"
    return None


def limits(adapter: AdapterFile, target: str) -> list[str]:
    """What stops `target` (builtin | vllm | gguf) from taking this adapter, from its config (empty: it fits).
    Weight-file checks (resized vocabularies, tensor names) are the engines' own (serving/fit.py)."""
    if target not in TARGETS:
        raise ValueError(f"unknown adapter target {target!r}")
    raw = adapter.raw
    if raw.get("layer_replication"):
        return [f"layer_replication {raw['layer_replication']} (it changes the model's architecture by copying "
                "layers; engines serve adapters that only add a delta: merge it and serve the merged model)"]
    problems = [p for p in (type_problem(adapter),) if p]
    if target == "gguf":
        if adapter.use_dora:
            problems.append("DoRA (a GGUF LoRA has no magnitude vectors)")
        if adapter.modules_to_save:
            problems.append(f"modules_to_save {list(adapter.modules_to_save)} (full layers are not LoRA matrices)")
        return problems
    if target == "builtin":
        if adapter.use_dora:
            problems.append("DoRA (PEFT cannot pick a DoRA adapter per row of a shared batch: 'Cannot pass "
                            "`adapter_names` when DoRA is enabled'; merge it and serve the merged model)")
    else:
        if adapter.modules_to_save:
            problems.append(f"modules_to_save {list(adapter.modules_to_save)} (vLLM only supports modules_to_save "
                            "being None; merge the adapter and serve the merged model)")
        if adapter.use_dora:
            problems.append("DoRA (vLLM does not support use_dora; merge it, or serve with --engine builtin)")
        if adapter.bias != "none":
            problems.append(f"bias {adapter.bias!r} (vLLM does not load adapter biases)")
        odd = [t for t in adapter.targets() if any(n in t for n in NOT_LINEAR)]
        if odd:
            problems.append(f"target_modules {odd} (vLLM applies LoRA to linear layers only)")
    rank = rank_problem(adapter.max_rank)
    if rank:
        problems.append(rank)
    return problems

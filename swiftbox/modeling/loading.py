"""Load a model reference - plain model, adapter artifact, or a chain of them - onto the platform.

Shared by every pipeline that needs weights (sft/dpo continuing from an adapter, eval, merge,
quantize, serve, chat). Weights load from safetensors; remote code only when the user allows it.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from swiftbox import quant_methods
from swiftbox.artifacts import is_adapter_dir, read_manifest
from swiftbox.errors import UserError
from swiftbox.hub.resolve import resolve_model
from swiftbox.modeling.adapter_file import AdapterFile
from swiftbox.steps import DTYPE_NAMES


@dataclass
class ModelSpec:
    """What a reference points at: a base model dir plus adapters to apply in order."""

    base: Path
    base_ref: str
    adapters: list[Path] = field(default_factory=list)
    quantized: Optional[str] = None  # e.g. "gptq" when the base dir holds a quantized export

    @property
    def tokenizer_dir(self) -> Path:
        for adapter in reversed(self.adapters):
            if (adapter / "tokenizer_config.json").is_file():
                return adapter
        return self.base


def adapter_base_ref(adapter: Path) -> str:
    manifest = read_manifest(adapter) or {}
    base = manifest.get("base_model")
    if not base:
        base = AdapterFile.read(adapter).base_model_name_or_path   # a malformed config: one line naming the field
    if base is not None and not isinstance(base, str):
        raise UserError(f"{adapter}: the adapter's base model is not a name or path ({type(base).__name__})")
    if not base:
        raise UserError(f"{adapter}: adapter does not say its base model; pass base: (--base)")
    return base


def resolve_spec(ref: str, base: Optional[str] = None, *, revision: Optional[str] = None) -> ModelSpec:
    """Follow adapter artifacts back to their base model."""
    path = resolve_model(ref, revision=revision)
    adapters: list[Path] = []
    seen = set()
    while is_adapter_dir(path):
        if path in seen:
            raise UserError(f"{path}: adapter lineage loops back on itself")
        seen.add(path)
        adapters.insert(0, path)
        ref = base if (base and len(adapters) == 1) else adapter_base_ref(path)
        path = resolve_model(ref)
    quant = read_quantization(path).get("quant_method")
    return ModelSpec(base=path, base_ref=ref, adapters=adapters, quantized=quant)


def read_quantization(folder: Path) -> dict:
    """The `quantization_config` of a saved model (empty when it has none)."""
    try:
        return json.loads((Path(folder) / "config.json").read_text()).get("quantization_config") or {}
    except (OSError, ValueError, AttributeError):
        return {}


def torch_dtype(name: str):
    import torch

    if name not in DTYPE_NAMES:
        raise UserError(f"dtype: expected one of {', '.join(DTYPE_NAMES)}, got {name!r}")
    return getattr(torch, name)


def load_tokenizer(spec: ModelSpec, trust_remote_code: bool = False):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(spec.tokenizer_dir, trust_remote_code=trust_remote_code)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return tok


def load_model(spec: ModelSpec, platform, dtype: str, *, merge_adapters: bool = False,
               trust_remote_code: bool = False, quantization_config=None, adapter_names: Optional[list[str]] = None):
    """The base model in `dtype` on the platform's first device, with the spec's adapters attached. What the
    libraries print while loading (a quantized model's kernel builds, gptqmodel's log bar) goes to the run's log."""
    from swiftbox import logs

    with logs.captured(f"loading {spec.base.name}"):
        return _load_model(spec, platform, dtype, merge_adapters=merge_adapters, trust_remote_code=trust_remote_code,
                           quantization_config=quantization_config, adapter_names=adapter_names)


def _load_model(spec: ModelSpec, platform, dtype: str, *, merge_adapters: bool, trust_remote_code: bool,
                quantization_config, adapter_names: Optional[list[str]]):
    method = quant_methods.by_export(spec.quantized)     # how a quantized export is recognised (config.json)
    if method is not None and method.sixteen_bit:
        dtype = gptq_dtype(platform, dtype)
    kwargs = dict(dtype=torch_dtype(dtype), trust_remote_code=trust_remote_code, use_safetensors=True)
    if quantization_config is not None:
        kwargs["quantization_config"] = quantization_config
    try:
        if method is not None and method.loader and quantization_config is None:   # the method loads it its way
            model = quant_methods.resolve(method.loader)(spec, platform, dtype, kwargs)
        else:
            model = load_with_transformers(spec, platform, kwargs)
    except OSError as exc:
        raise UserError(f"{spec.base}: cannot load model ({str(exc).splitlines()[0]})") from None
    model = apply_adapters(model, spec.adapters, merge_all=merge_adapters, names=adapter_names)
    model.eval()
    return model


def load_with_transformers(spec: ModelSpec, platform, kwargs: dict):
    """transformers' own load of `spec.base` (a quantized export by its saved quantization_config)."""
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(spec.base, device_map=platform.device_map(), **kwargs)


def load_gptq(spec: ModelSpec, platform, dtype: str, kwargs: dict):
    """The gptq record's loader: through transformers where it opens GPTQ (optimum + gptqmodel), else gptqmodel."""
    if not transformers_loads_gptq():
        if spec.adapters:
            raise UserError(f"{spec.base}: adapters on a GPTQ model need the python package 'optimum' "
                            "(pip install optimum); or merge the adapter before quantizing")
        return load_gptq_with_gptqmodel(spec.base, platform, dtype, trust_remote_code=kwargs["trust_remote_code"])
    try:
        return load_with_transformers(spec, platform, kwargs)
    except NotImplementedError:
        # gptqmodel's auto-selected kernel can refuse a layer shape (Hopper's Machete wants widths divisible
        # by 128; small models have 64-wide k/v projections): its torch kernel takes any shape
        any_shape = {**kwargs, "quantization_config": gptq_any_shape_config(spec.base)}
        return load_with_transformers(spec, platform, any_shape)


def apply_adapters(model, adapters: list[Path], *, merge_all: bool = False, trainable: bool = False,
                   names: Optional[list[str]] = None):
    """The one adapter-chain rule: adapters stack in order, all but the last merged in, the last left attached
    (trainable when asked) unless `merge_all` - so outputs equal base+adapter1+...+adapterN."""
    from peft import PeftModel

    for i, adapter in enumerate(adapters):
        last = i == len(adapters) - 1
        name = names[i] if names and i < len(names) else "default"
        model = PeftModel.from_pretrained(model, str(adapter), adapter_name=name, is_trainable=trainable and last)
        if merge_all or not last:
            model = model.merge_and_unload()
    return model


def merge_into(model, adapters: list[Path]):
    """Merge a chain of adapters into `model` whatever task each was trained for (an SFT adapter, a causal-LM one,
    under a reward model's classification head): each loads as a plain PeftModel, not as its task's wrapper."""
    from peft import PeftConfig, PeftModel

    for adapter in adapters:
        config = PeftConfig.from_pretrained(str(adapter))
        config.task_type = None
        model = PeftModel.from_pretrained(model, str(adapter), config=config).merge_and_unload()
    return model


def transformers_loads_gptq() -> bool:
    """transformers 5 loads GPTQ checkpoints through optimum's GPTQ integration plus gptqmodel kernels (the gptq
    record's `loads_with` names what that needs)."""
    return "transformers" in quant_methods.GPTQ.loaders()


def gptq_any_shape_config(path: Path):
    """The export's own GPTQ settings, loaded with gptqmodel's torch kernel (any layer shape, any device)."""
    from transformers import GPTQConfig

    stored = json.loads((Path(path) / "config.json").read_text())["quantization_config"]
    return GPTQConfig(bits=stored["bits"], group_size=stored.get("group_size", 128), backend="gptq_torch")


def gptq_dtype(platform, dtype: str) -> str:
    """GPTQ/AWQ/FP8 kernels compute in 16-bit (gptqmodel's 8-bit CPU kernel refuses float32): bf16 where supported
    (the rule lives in swiftbox/device/dtype_policy.py)."""
    from swiftbox.device.dtype_policy import kernel_dtype

    return kernel_dtype(platform, dtype)


def load_gptq_with_gptqmodel(path, platform, dtype: str, *, trust_remote_code: bool = False):
    """A GPTQ export as a plain transformers model, loaded by gptqmodel (used where optimum is absent)."""

    platform.require("gptq")
    from swiftbox.compat import gptqmodel_env

    gptqmodel_env()
    from gptqmodel import GPTQModel

    wrapped = GPTQModel.load(str(path), device=platform.torch_device(0), dtype=torch_dtype(dtype),
                             trust_remote_code=trust_remote_code)
    return wrapped.model


BNB_KINDS = ("bnb-4bit", "bnb-8bit")


def bnb_config(kind: str, platform, compute_dtype: Optional[str] = None):
    """A `BitsAndBytesConfig` for load-time quantization (serving's `quantization: bnb-4bit|bnb-8bit`).

    4-bit is NF4 with double quantization, computing in `compute_dtype` (default: the platform's);
    8-bit is LLM.int8(). Refused with exit 3 where bitsandbytes has no backend (e.g. Ascend).
    """
    if kind not in BNB_KINDS:
        raise UserError(f"quantization: expected one of {', '.join(BNB_KINDS)}, got {kind!r}")
    platform.require("bnb")
    from transformers import BitsAndBytesConfig

    if kind == "bnb-8bit":
        return BitsAndBytesConfig(load_in_8bit=True)
    return BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
                              bnb_4bit_compute_dtype=torch_dtype(platform.resolve_dtype(compute_dtype)))

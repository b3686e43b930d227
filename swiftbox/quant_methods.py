"""The quantization methods, one `QuantMethod` record each: the one home of every fact about a method.

Who reads what (nothing else names a method's facts):
- the schema (steps.QuantizeStep): `--method` choices, the bits each allows and its default, named types (gguf);
- the device layer (device/base.py): the capability `feature` a method needs and the package behind it, which
  `Platform.why_not` / `supports` check; dtype_policy: whose kernels compute in 16-bit;
- the quantize step (pipelines/quantize.py, its library in export/): the writer (imported lazily from `writer`),
  calibration, the on-disk layout its quality gate inspects, the gate's tolerances, which libraries load the
  export (manifest);
- modeling/loading.py: how an export is recognised (config.json's `quant_method`) and loaded (`loader`);
- engine fit (serving/fit.py, read by serve, verify and the menu): which engines serve it;
- the menu (menus/flows.py, menus/device_info.py): the method's label and the capability it greys out by.

This module imports nothing of swiftbox and nothing heavy, so every layer can read it (tests/unit/test_layers.py puts
it in the base layer). How to add a method: docs/architecture.md, "How to add a quantization method".
"""
from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Optional

ENGINES = ("builtin", "vllm", "llama.cpp")


@dataclass(frozen=True)
class Layout:
    """How one quantized linear layer `m` is stored in safetensors: a tensor that must exist with one of `dtypes`,
    and a companion tensor (scales, quant state) whose name starts with `companion` - the pair proves the layout."""

    tensor: str
    dtypes: tuple[str, ...]
    companion: str


@dataclass(frozen=True)
class Loader:
    """A library that opens an export, and the python modules it needs for that (all must be importable)."""

    library: str
    needs: tuple[str, ...] = ()

    def available(self) -> bool:
        try:
            return all(importlib.util.find_spec(mod) is not None for mod in self.needs)
        except (ImportError, ValueError):  # a dotted name whose parent package is absent
            return False


@dataclass(frozen=True)
class QuantMethod:
    name: str                                   # the schema's choice: quantize --method NAME
    title: str                                  # how prose names it (GPTQ, FP8, ...)
    bits: tuple[int, ...]                       # bits the schema allows; the first is the default
    help: str                                   # the method's part of --method's help ("awq (gptqmodel 7.6.0)")
    menu: str                                   # the menu's label for it
    feature: str                                # the device capability it needs (Platform.why_not(feature))
    writer: str                                 # "module:function", imported when the step runs (see whole_step)
    tolerances: Mapping[int, Mapping[str, float]]   # the quality gate's bounds by bits (docs/export.md)
    engines: tuple[str, ...]                    # which serving engines serve an export (ENGINES)
    loads_with: tuple[Loader, ...]              # libraries that open an export (the manifest's loads_with)
    package: Optional[str] = None               # python package the feature needs (None: the platform alone says)
    install: Optional[tuple[str, str]] = None   # (why, instead) when that package is more than `pip install`
    whole_step: bool = False                    # writer is run(cfg, ctx) -> StepResult, measuring and gating itself;
    #                                             else write(cfg, spec, ctx, tokenizer, calib, dtype, group_size) ->
    #                                             facts, inside the shared flow that measures and gates
    #                                             (export/checkpoint.py)
    calibrated: bool = False                    # needs calibration rows (and a group size that divides every layer)
    sixteen_bit: bool = False                   # its kernels compute in 16-bit: the export loads in bf16/fp16
    layouts: Mapping[int, Layout] = field(default_factory=dict)   # bits -> stored layout the quality gate inspects
    quant_method: Optional[str] = None          # config.json quantization_config.quant_method of an export
    loader: Optional[str] = None                # "module:function" loading an export where from_pretrained alone
    #                                             cannot: loader(spec, platform, dtype, kwargs) -> model
    builtin_dequantizes: bool = False           # where the device lacks `feature`, the built-in engine still runs
    #                                             an export, dequantized to bf16 by transformers
    types: Mapping[str, int] = field(default_factory=dict)   # named types that carry the bits (gguf: --type)
    checker: str = "swiftbox.export.checks:check_checkpoint"    # "module:function": checker(cfg, input) -> the
    #                                             step's plan; every refusal of the input (exit 2/3), run by the
    #                                             step's check before anything is written

    def tolerance(self, bits: int) -> dict[str, float]:
        """The gate's bounds for `bits`: the row of the largest bits not above it (else the smallest row)."""
        at_most = [b for b in self.tolerances if b <= bits]
        return dict(self.tolerances[max(at_most) if at_most else min(self.tolerances)])

    def layout(self, bits: int) -> Layout:
        return self.layouts[bits]

    def loaders(self) -> list[str]:
        """The libraries that open an export on this machine."""
        return [loader.library for loader in self.loads_with if loader.available()]


def _every(bits: tuple[int, ...], layout: Layout) -> dict[int, Layout]:
    return {b: layout for b in bits}


# documented tolerances of transformers-format exports (docs/export.md), by bits; the step's `tolerance:` overrides
CHECKPOINT_TOLERANCES: dict[int, dict[str, float]] = {
    4: {"min_cosine": 0.95, "min_argmax_agreement": 0.65, "max_perplexity_ratio": 1.25, "max_accuracy_drop": 0.05,
        "max_size_ratio": 0.6},
    8: {"min_cosine": 0.99, "min_argmax_agreement": 0.9, "max_perplexity_ratio": 1.05, "max_accuracy_drop": 0.05,
        "max_size_ratio": 0.8},
}
# GGUF, measured in llama.cpp, by the bits a type is gated as (max_size_ratio comes from the type's bits per weight)
GGUF_TOLERANCES: dict[int, dict[str, float]] = {
    16: {"max_perplexity_ratio": 1.01, "min_cosine": 0.999, "min_argmax_agreement": 0.97, "min_greedy_agreement": 0.75},
    8: {"max_perplexity_ratio": 1.03, "min_cosine": 0.99, "min_argmax_agreement": 0.85, "min_greedy_agreement": 0.5},
    6: {"max_perplexity_ratio": 1.06, "min_cosine": 0.99, "min_argmax_agreement": 0.85, "min_greedy_agreement": 0.0},
    5: {"max_perplexity_ratio": 1.12, "min_cosine": 0.98, "min_argmax_agreement": 0.75, "min_greedy_agreement": 0.0},
    4: {"max_perplexity_ratio": 1.25, "min_cosine": 0.95, "min_argmax_agreement": 0.65, "min_greedy_agreement": 0.0},
}
PACKED_INT = Layout("{m}.qweight", ("I32", "I16", "I8", "U8"), "{m}.scales")
TRANSFORMERS = Loader("transformers")
WRITERS = "swiftbox.export.writers."

GPTQ = QuantMethod(
    "gptq", "GPTQ", (4, 8), "gptq", "GPTQ 4/8-bit (gptqmodel)", feature="gptq", package="gptqmodel",
    writer=WRITERS + "gptqmodel:write", calibrated=True, sixteen_bit=True,
    tolerances=CHECKPOINT_TOLERANCES, layouts=_every((4, 8), PACKED_INT), quant_method="gptq",
    # transformers 5 opens GPTQ through optimum's GPTQ integration plus gptqmodel's kernels; else gptqmodel does
    loads_with=(Loader("gptqmodel"), Loader("transformers", ("optimum.gptq", "gptqmodel"))),
    loader="swiftbox.modeling.loading:load_gptq", engines=("builtin", "vllm"))
AWQ = QuantMethod(
    "awq", "AWQ", (4,), "awq (gptqmodel 7.6.0)", "AWQ 4-bit (gptqmodel)", feature="awq", package="gptqmodel",
    writer=WRITERS + "gptqmodel:write", calibrated=True, sixteen_bit=True,
    tolerances=CHECKPOINT_TOLERANCES, layouts=_every((4,), PACKED_INT), quant_method="awq",
    loads_with=(TRANSFORMERS, Loader("gptqmodel")), engines=("builtin", "vllm"))
BNB = QuantMethod(
    "bnb", "bitsandbytes", (4, 8), "bnb (bitsandbytes NF4 / int8)", "bitsandbytes NF4 / int8", feature="bnb",
    package="bitsandbytes", writer=WRITERS + "transformers:write", tolerances=CHECKPOINT_TOLERANCES,
    layouts={4: Layout("{m}.weight", ("U8",), "{m}.weight.quant_state"), 8: Layout("{m}.weight", ("I8",), "{m}.SCB")},
    quant_method="bitsandbytes", loads_with=(TRANSFORMERS,), engines=("builtin", "vllm"))
FP8 = QuantMethod(
    "fp8", "FP8", (8,), "fp8 (FP8 GPUs)", "FP8 (Ada/Hopper GPUs)", feature="fp8",
    writer=WRITERS + "transformers:write", sixteen_bit=True, tolerances=CHECKPOINT_TOLERANCES,
    layouts={8: Layout("{m}.weight", ("F8_E4M3", "F8_E5M2"), "{m}.weight_scale")}, quant_method="fp8",
    loads_with=(TRANSFORMERS,), engines=("builtin", "vllm"), builtin_dequantizes=True)
GGUF = QuantMethod(
    "gguf", "GGUF", (4, 5, 6, 8, 16), "gguf (llama.cpp / Ollama, with the gguf extra)", "GGUF for llama.cpp / Ollama",
    feature="gguf", package="llama_cpp",
    install=("llama.cpp's Python bindings (llama-cpp-python, built from source) are not installed",
             "SWIFTBOX_EXTRAS=quant,serve,dev,gguf ./install.sh (builds llama.cpp once, about 10-25 min on 2 cores), "
             "or python -m swiftbox.export.llamacpp.setup; --method gptq/awq/bnb need no build"),
    writer=WRITERS + "gguf_adapter:run_step", checker=WRITERS + "gguf_adapter:check", whole_step=True,
    tolerances=GGUF_TOLERANCES,
    loads_with=(Loader("llama.cpp"), Loader("ollama"), Loader("lm-studio")), engines=("llama.cpp",),
    # llama.cpp's type names (lower case) and the bits each is gated as; --bits alone picks the first of its bits
    types={"f16": 16, "bf16": 16, "q8_0": 8, "q6_k": 6, "q5_k_m": 5, "q4_k_m": 4})

# the registry, in the order the schema's error, the docs and the menu list them; the first is the default
METHODS: dict[str, QuantMethod] = {m.name: m for m in (GPTQ, AWQ, BNB, FP8, GGUF)}
DEFAULT = "gptq"


def names() -> tuple[str, ...]:
    return tuple(METHODS)


def get(name: str) -> QuantMethod:
    """The method called `name` (KeyError for an unknown one: the schema has refused it already)."""
    return METHODS[name]


def by_export(quant_method: Optional[str]) -> Optional[QuantMethod]:
    """The method whose exports carry `quant_method` in config.json's quantization_config (None: no such method)."""
    return next((m for m in METHODS.values() if quant_method and m.quant_method == quant_method), None)


def features() -> tuple[str, ...]:
    """The device capabilities the methods need, each once, in the registry's order."""
    return tuple(dict.fromkeys(m.feature for m in METHODS.values()))


def package_for(feature: str) -> Optional[tuple[str, Optional[tuple[str, str]]]]:
    """(package, install hint) behind a method's `feature` (None: no method's, or no package needed)."""
    for m in METHODS.values():
        if m.feature == feature and m.package:
            return m.package, m.install
    return None


def computes_in_16_bit(quant_method: Optional[str]) -> bool:
    """Whether an export with this config.json quant_method runs 16-bit kernels."""
    method = by_export(quant_method)
    return method is not None and method.sixteen_bit


def served_by(engine: str) -> list[QuantMethod]:
    return [m for m in METHODS.values() if engine in m.engines]


def choice_error(value: Any) -> Optional[str]:
    """pydantic's literal message when `value` is not a method's name (None when it is)."""
    if isinstance(value, str) and value in METHODS:
        return None
    return "Input should be " + or_list([repr(n) for n in METHODS])


def or_list(items: list[str]) -> str:
    """'a', 'b' or 'c' - the way pydantic and the docs list choices."""
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} or {items[-1]}"


def and_list(items: list[str]) -> str:
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"


def resolve(path: str) -> Any:
    """The object a "module:attribute" path names, imported now (writers and loaders stay unimported until used)."""
    module, _, attribute = path.partition(":")
    return getattr(importlib.import_module(module), attribute)

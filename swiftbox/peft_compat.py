"""Keep PEFT usable when gptqmodel is installed without `optimum`.

PEFT 0.21 asks `is_gptqmodel_available()` while injecting *any* LoRA layer, and that probe raises
ImportError ("gptqmodel requires optimum ...") instead of returning False when gptqmodel is present but
optimum is not - which is exactly the [quant] extra here (gptqmodel for GPTQ export, no optimum). We make
the probe answer False in that case: PEFT's GPTQ-LoRA layers need optimum anyway, plain LoRA needs nothing.
"""
from __future__ import annotations

import importlib

_PATCHED = False
_MODULES = ("peft.import_utils", "peft.tuners.lora.gptq", "peft.tuners.lora.awq", "peft.utils.quantization_utils",
            "peft.utils.other")


def patch_peft_gptq_probe() -> None:
    global _PATCHED
    if _PATCHED:
        return
    import peft.import_utils as iu

    original = iu.is_gptqmodel_available

    def is_gptqmodel_available() -> bool:
        try:
            return original()
        except ImportError:
            return False

    for name in _MODULES:
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        if getattr(module, "is_gptqmodel_available", None) is original:
            module.is_gptqmodel_available = is_gptqmodel_available
    _PATCHED = True

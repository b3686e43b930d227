"""bitsandbytes (NF4 4-bit / LLM.int8 8-bit) and FP8 exports: load the source with a transformers
quantization config, then `save_pretrained` - the saved `quantization_config` makes a plain
`AutoModelForCausalLM.from_pretrained(dir)` load it quantized again, no flags needed.
"""
from __future__ import annotations

import gc


def quantization_config(cfg, platform, compute_dtype: str):
    from swiftbox.modeling.loading import bnb_config

    if cfg.method == "bnb":
        return bnb_config("bnb-4bit" if cfg.bits == 4 else "bnb-8bit", platform, compute_dtype)
    from transformers import FineGrainedFP8Config

    return FineGrainedFP8Config()  # e4m3 weights with 128x128 block scales: what vLLM's fp8 loader reads


def write(cfg, spec, ctx, tokenizer, calib: list[dict], dtype, group_size: int) -> dict:
    """Quantize `spec.base` at load time and save it into ctx.work_dir (no calibration pass is needed)."""
    from transformers import AutoModelForCausalLM

    from swiftbox.modeling.loading import torch_dtype

    compute = str(dtype).removeprefix("torch.")   # the step's compute dtype (swiftbox/device/dtype_policy.py)
    qconfig = quantization_config(cfg, ctx.platform, compute)
    model = AutoModelForCausalLM.from_pretrained(spec.base, quantization_config=qconfig, dtype=torch_dtype(compute),
                                                 device_map=ctx.platform.device_map(), use_safetensors=True,
                                                 trust_remote_code=cfg.trust_remote_code)
    model.save_pretrained(ctx.work_dir, max_shard_size=cfg.max_shard_size)
    del model
    gc.collect()
    ctx.platform.empty_cache()
    if cfg.method == "bnb":
        kind = "nf4, double quantization" if cfg.bits == 4 else "LLM.int8"
        return {"tool": "bitsandbytes", "scheme": kind, "compute_dtype": compute}
    return {"tool": "transformers FineGrainedFP8", "scheme": "float8_e4m3fn, 128x128 block scales"}

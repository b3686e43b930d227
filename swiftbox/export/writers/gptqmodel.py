"""GPTQ and AWQ exports through gptqmodel (pinned 7.6.0): one calibrated pass, saved as a transformers
checkpoint whose `quantization_config` names the method (transformers loads both through gptqmodel).

auto-gptq and AutoAWQ are end-of-life and cannot import next to transformers 5; gptqmodel carries both
methods behind the same `GPTQModel.load(path, config).quantize(rows)` API.
"""
from __future__ import annotations

import gc
from pathlib import Path

from swiftbox import logs
from swiftbox.compat import gptqmodel_env, gptqmodel_layer_callback, gptqmodel_log_dir
from swiftbox.export.progress import layer_progress


def quantize_config(cfg, group_size: int):
    """gptqmodel's config object for `cfg.method` (gptq | awq)."""
    from gptqmodel import QuantizeConfig

    if cfg.method == "awq":
        from gptqmodel.quantization.config import AWQConfig

        # GEMM is the AWQ layout transformers and vLLM load; zero points when asymmetric
        return AWQConfig(bits=cfg.bits, group_size=group_size, sym=cfg.sym, offload_to_disk=False)
    return QuantizeConfig(bits=cfg.bits, group_size=group_size, desc_act=cfg.desc_act, sym=cfg.sym,
                          damp_percent=cfg.damp_percent, offload_to_disk=False)


def decoder_layers(model_dir: Path):
    """The number of decoder layers gptqmodel walks (config.json's num_hidden_layers; None: unknown)."""
    import json

    try:
        config = json.loads((Path(model_dir) / "config.json").read_text())
    except (OSError, ValueError):
        return None
    value = config.get("num_hidden_layers") or (config.get("text_config") or {}).get("num_hidden_layers")
    return value if isinstance(value, int) else None


def write(cfg, spec, ctx, tokenizer, calib: list[dict], dtype, group_size: int) -> dict:
    """Quantize `spec.base` with the calibration rows into ctx.work_dir; returns the manifest's method facts."""
    gptqmodel_env()
    # gptqmodel prints its progress, log bar and kernel builds itself (print, C++): into the run's log; swiftbox
    # draws its own layers-done bar on the terminal
    with logs.captured(f"gptqmodel {cfg.method} {cfg.bits}-bit") as terminal:
        from gptqmodel import GPTQModel

        kwargs = {}
        if cfg.method == "awq":
            from gptqmodel.utils.backend import BACKEND

            # pack with the portable torch kernel: the saved GEMM layout is the same, and it also runs off-GPU
            kwargs["backend"] = BACKEND.AWQ_TORCH
        model = GPTQModel.load(str(spec.base), quantize_config(cfg, group_size), device=ctx.platform.torch_device(0),
                               dtype=dtype, trust_remote_code=cfg.trust_remote_code)
        with gptqmodel_log_dir(Path(ctx.work_dir) / "logs"), \
                layer_progress(f"quantize {cfg.method} {cfg.bits}-bit", decoder_layers(spec.base), terminal) as done, \
                gptqmodel_layer_callback(model, done):
            model.quantize(calib, batch_size=cfg.batch_size, tokenizer=tokenizer, **kwargs)
        model.save(str(ctx.work_dir), max_shard_size=cfg.max_shard_size)
    del model
    gc.collect()
    ctx.platform.empty_cache()
    facts = {"tool": "gptqmodel", "group_size": group_size, "sym": cfg.sym}
    if cfg.method == "gptq":
        facts["desc_act"] = cfg.desc_act
    return facts

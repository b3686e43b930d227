"""Distributed settings for `transformers.TrainingArguments`, and the refusals of known-broken combinations.

The training pipelines call `training_arguments_extra(cfg, platform)` and merge the result into their
TrainingArguments kwargs: the DDP backend from the platform (gloo/nccl/hccl), a DeepSpeed config path
(a bundled ZeRO preset or the user's json) or the FSDP options. DeepSpeed and FSDP themselves are
driven by transformers/accelerate; swiftbox only picks and checks the config.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

from swiftbox.device import Platform
from swiftbox.errors import Unsupported, UserError
from swiftbox.steps import DEEPSPEED_PRESETS as PRESETS
from swiftbox.steps import TrainBase
from swiftbox.versions import older_than, package_version

# flat under configs/ so the package-data glob `configs/*` ships them in the wheel
CONFIG_DIR = Path(__file__).resolve().parents[2] / "configs"
INSTALL_HINT = "pip install 'swiftbox[deepspeed]'"
# QLoRA under ZeRO-3 needs bnb_4bit_quant_storage (bitsandbytes 0.43) and the matching loaders
QLORA_ZERO3_FLOORS = {"bitsandbytes": "0.43.0", "transformers": "4.39.0", "peft": "0.10.0", "accelerate": "0.28.0"}


def preset_path(name: str) -> Path:
    return CONFIG_DIR / f"deepspeed_{name}.json"


def deepspeed_config_path(value: str) -> Path:
    """A preset name -> the bundled json; else the user's path, which must hold a JSON object."""
    if value in PRESETS:
        return preset_path(value)
    path = Path(value).expanduser()
    if not path.is_file():
        raise UserError(f"deepspeed: {value} is neither a preset ({', '.join(PRESETS)}) nor an existing json file")
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise UserError(f"deepspeed: {path} is not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise UserError(f"deepspeed: {path} must hold a JSON object (a DeepSpeed config)")
    return path.resolve()


def zero_stage(value: str) -> int:
    data = json.loads(deepspeed_config_path(value).read_text())
    return int((data.get("zero_optimization") or {}).get("stage", 0))


def check_distributed(cfg: TrainBase, platform: Platform) -> None:
    """Refuse, in one line, the combinations known not to work. Exit 2 for bad input, 3 for unavailable.
    Run once per step, by the training pipelines' `check` (before any output directory exists)."""
    if cfg.deepspeed and cfg.fsdp:
        raise UserError("deepspeed and fsdp: pick one sharding engine, not both")
    if cfg.node_rank >= cfg.nnodes:
        raise UserError(f"node_rank: {cfg.node_rank} is not below nnodes ({cfg.nnodes})")
    if not cfg.deepspeed:
        return
    refusal = platform.refusals.get("deepspeed")
    if refusal is not None:
        raise Unsupported(f"deepspeed is not available on {platform.name}: {refusal.why}; use {refusal.instead} "
                          "instead")
    stage = zero_stage(cfg.deepspeed)  # also checks a user path before anything is installed or launched
    if package_version("deepspeed") is None:
        raise Unsupported(f"deepspeed: the deepspeed package is not installed on {platform.name}; "
                          f"{INSTALL_HINT}, or drop deepspeed: to train with plain DDP")
    if cfg.method == "qlora" and stage == 3:
        old = qlora_zero3_blockers()
        if old:
            raise Unsupported(f"method qlora with ZeRO-3 needs {', '.join(old)}; upgrade them, "
                              "or use deepspeed: zero2, or method lora")


def qlora_zero3_blockers() -> list[str]:
    """Packages too old for 4-bit weights sharded by ZeRO-3 ('name>=floor (have x)'); [] when it works."""
    out = []
    for pkg, floor in QLORA_ZERO3_FLOORS.items():
        have = package_version(pkg)
        if have is None or older_than(have, floor):
            out.append(f"{pkg}>={floor} (have {have or 'none'})")
    return out


def training_arguments_extra(cfg: TrainBase, platform: Platform) -> dict[str, Any]:
    """Keyword arguments for TrainingArguments that make a torchrun worker train as one of many."""
    from swiftbox.training.distributed.ranks import world_size

    extra: dict = {}
    if world_size() > 1 or cfg.deepspeed or cfg.fsdp:
        extra["ddp_backend"] = platform.dist_backend
    if cfg.deepspeed:
        extra["deepspeed"] = str(deepspeed_config_path(cfg.deepspeed))
    if cfg.fsdp:
        extra["fsdp"] = cfg.fsdp
    return extra


def model_device_map(cfg: TrainBase, platform: Platform) -> Optional[str]:
    """`device_map` for from_pretrained in a training step: each rank on its own local device; None when
    ZeRO-3 or FSDP shards the weights (transformers refuses a device_map with ZeRO-3)."""
    from swiftbox.training.distributed.ranks import local_rank

    if cfg.fsdp or (cfg.deepspeed and zero_stage(cfg.deepspeed) == 3):
        return None
    return platform.device_map(local_rank())


def quantization_extra(cfg: TrainBase, torch_dtype: Any) -> dict[str, Any]:
    """Extra BitsAndBytesConfig kwargs: sharded QLoRA (ZeRO-3/FSDP) stores 4-bit weights in the compute dtype."""
    sharded = (cfg.deepspeed and zero_stage(cfg.deepspeed) == 3) or bool(cfg.fsdp)
    return {"bnb_4bit_quant_storage": torch_dtype} if cfg.method == "qlora" and sharded else {}

"""A simulated Ascend NPU: a fake `torch_npu` in sys.modules and PyTorch's PrivateUse1 backend renamed
to `npu` - enough for torch, accelerate and transformers to report `npu:0`.

Renaming PrivateUse1 cannot be undone in a process, so tests run this in a subprocess:
    python tests/npu_sim.py SOC_NAME COMMAND   (COMMAND: plan | cli ARGS...)
"""
from __future__ import annotations

import importlib.machinery
import json
import sys
import types
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def install_fake_npu(soc: str = "Ascend910B2", count: int = 8) -> None:
    import torch

    npu = types.ModuleType("torch_npu.npu")
    npu.is_available = lambda: True
    npu.device_count = lambda: count
    npu.get_device_name = lambda index=0: soc
    npu.current_device = lambda: 0
    npu.set_device = lambda device: None
    npu.mem_get_info = lambda index=0: (60 * 2**30, 64 * 2**30)
    npu.synchronize = lambda *a: None
    npu.empty_cache = lambda: None
    npu.is_bf16_supported = lambda: soc.startswith("Ascend910B")
    npu.max_memory_allocated = lambda *a: 0
    npu.reset_peak_memory_stats = lambda *a: None
    npu.manual_seed = npu.manual_seed_all = lambda seed: None
    npu.is_initialized = lambda: True
    torch_npu = types.ModuleType("torch_npu")
    torch_npu.__spec__ = importlib.machinery.ModuleSpec("torch_npu", None)
    torch_npu.__version__ = "2.13.0.post1+sim"
    torch_npu.npu = npu
    sys.modules["torch_npu"] = torch_npu
    sys.modules["torch_npu.npu"] = npu
    torch.utils.rename_privateuse1_backend("npu")
    torch._register_device_module("npu", npu)


def plan() -> dict:
    import accelerate
    from transformers.utils import is_torch_npu_available

    from swiftbox.device import current_platform

    platform = current_platform()
    return {
        "platform": platform.name,
        "torch_device": str(platform.torch_device(0)),
        "device_map": platform.device_map(),
        "dtype": platform.default_dtype(),
        "backend": platform.dist_backend,
        "env": platform.env_for("0,1,2,3,4,5,6,7"),
        "qlora": platform.supports("qlora-bnb"),
        "gptq": platform.supports("gptq"),
        "transformers_npu": is_torch_npu_available(),
        "accelerate_device": str(accelerate.PartialState().device),
    }


if __name__ == "__main__":
    install_fake_npu(sys.argv[1])
    if sys.argv[2] == "plan":
        print(json.dumps(plan()))
    else:
        from swiftbox.cli import main

        raise SystemExit(main(sys.argv[3:]))

"""CPU platform: always available; fp32 by default; gloo for multi-process."""
from __future__ import annotations

import os
import platform as _platform

from swiftbox.device.base import DeviceMemory, Platform, Refusal


class CpuPlatform(Platform):
    name = "cpu"
    device_type = "cpu"
    dist_backend = "gloo"
    visible_devices_env = None
    default_env = {}
    refusals = {
        "vllm": Refusal("vLLM needs a CUDA GPU or an Ascend NPU "
                        "(vllm-ascend)", "the built-in engine (engine: builtin)"),
        "vllm-colocate": Refusal("TRL's vLLM colocate mode runs vLLM on a CUDA GPU inside the trainer",
                                 "rollouts by the model's own generate (use_vllm: false)"),
        "flash-attn": Refusal("flash-attn is a CUDA kernel library", "attn_implementation sdpa (the default)"),
        "deepspeed": Refusal("DeepSpeed ZeRO targets accelerators", "torchrun with gloo DDP (devices: N)"),
        "fp8": Refusal("FP8 weights need FP8 matmul hardware (NVIDIA compute capability 8.9+: Ada, Hopper)",
                       "--method awq or gptq (4-bit) or --method bnb --bits 8 here, or quantize on an FP8 GPU"),
        "fp16": Refusal("fp16 matmuls on CPU are slow and unstable for training", "float32 or bfloat16"),
    }

    @classmethod
    def is_available(cls) -> bool:
        return True

    def device_count(self) -> int:
        # processes, not cores: CPU "devices" are the ranks a gloo run may use
        return 1

    def device_name(self, index: int = 0) -> str:
        return _platform.processor() or _platform.machine() or "cpu"

    def bf16_supported(self) -> bool:
        return True  # works (slowly) through torch's CPU kernels

    def default_dtype(self) -> str:
        return "float32"

    def training_args(self, dtype: str) -> dict:
        return {"use_cpu": True, "bf16": dtype == "bfloat16", "fp16": False}

    def memory(self, index: int = 0) -> DeviceMemory:
        try:
            pages = os.sysconf("SC_PHYS_PAGES")
            size = os.sysconf("SC_PAGE_SIZE")
            avail = os.sysconf("SC_AVPHYS_PAGES")
            return DeviceMemory(pages * size, avail * size)
        except (ValueError, OSError, AttributeError):
            return DeviceMemory(None, None)

    def max_memory_allocated(self) -> int | None:
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB

    def versions(self) -> dict[str, str]:
        return {"cpu_count": str(os.cpu_count())}

"""NVIDIA CUDA platform: nccl, CUDA_VISIBLE_DEVICES, bf16 from compute capability 8.0 (Ampere) on."""
from __future__ import annotations

import os
from typing import Any

from swiftbox.device.base import DeviceMemory, Platform, Refusal, _importable

FP8_CAPABILITY = (8, 9)  # Ada (sm_89) and Hopper (sm_90) have FP8 tensor cores


class CudaPlatform(Platform):
    name = "cuda"
    device_type = "cuda"
    dist_backend = "nccl"
    visible_devices_env = "CUDA_VISIBLE_DEVICES"
    default_env = {}
    refusals = {}
    profiler_activities = ("CPU", "CUDA")

    # Liger's Triton kernels transformers applies to the model (Trainer's use_liger_kernel). Its fused linear
    # cross-entropy stays off: TRL's trainers put their own chunked LM head on the model and refuse it.
    LIGER = {"rope": True, "rms_norm": True, "swiglu": True, "cross_entropy": False,
             "fused_linear_cross_entropy": False}

    def attn_implementation(self, packed: bool) -> str:
        """Packed rows attend per sample: flash-attn's varlen kernel where flash-attn is installed (cu_seqlens from
        the collator), else `sdpa_varlen` (swiftbox/device/attention.py: SDPA once per sample, causal, so torch picks
        its flash / memory-efficient kernel per sample; the same code the CPU runs, exact by
        tests/unit/test_packing_exact.py) instead of transformers' SDPA over a dense L x L block-diagonal mask,
        which at packed lengths of 8-32k tokens is a 64 MiB-1 GiB mask per layer call and forces SDPA's masked
        kernel. Padded batches use SDPA."""
        if not packed:
            return "sdpa"
        if _importable("flash_attn"):
            return "flash_attention_2"
        from swiftbox.device.attention import register

        return register()

    def training_kernels(self) -> dict[str, Any]:
        if not _importable("liger_kernel"):
            return {}
        return {"use_liger_kernel": True, "liger_kernel_config": dict(self.LIGER)}

    @classmethod
    def is_available(cls) -> bool:
        try:
            import torch

            return bool(torch.cuda.is_available()) and torch.cuda.device_count() > 0
        except Exception:  # a broken driver must mean "not available", never a crash
            return False

    @classmethod
    def unavailable_reason(cls) -> str | None:
        try:
            import torch

            if torch.version.cuda is None:
                return f"torch {torch.__version__} is not a CUDA build"
            if not torch.cuda.is_available():
                return (f"torch {torch.__version__} (CUDA {torch.version.cuda}) finds no usable GPU: driver missing or "
                        f"too old, or CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', '(unset)')}")
            if torch.cuda.device_count() == 0:
                return "no CUDA device visible"
        except Exception as exc:
            return f"{type(exc).__name__}: {exc}".splitlines()[0][:200]
        return None

    def device_count(self) -> int:
        import torch

        return torch.cuda.device_count()

    def device_name(self, index: int = 0) -> str:
        import torch

        return torch.cuda.get_device_name(index)

    def bf16_supported(self) -> bool:
        import torch

        return bool(torch.cuda.is_bf16_supported())

    def hardware_refusal(self, feature: str) -> Refusal | None:
        if feature != "fp8":
            return None
        major, minor = self.compute_capability(0)
        if (major, minor) < FP8_CAPABILITY:
            return Refusal(f"{self.device_name(0)} (compute capability {major}.{minor}) has no FP8 tensor cores; "
                           "FP8 needs 8.9+ (Ada, Hopper)", "--method awq or gptq (4-bit) or --method bnb --bits 8")
        return None

    def compute_capability(self, index: int = 0) -> tuple[int, int]:
        import torch

        return tuple(torch.cuda.get_device_capability(index))

    def memory(self, index: int = 0) -> DeviceMemory:
        import torch

        free, total = torch.cuda.mem_get_info(index)
        return DeviceMemory(total, free)

    def synchronize(self) -> None:
        import torch

        torch.cuda.synchronize()

    def empty_cache(self) -> None:
        import torch

        torch.cuda.empty_cache()

    def max_memory_allocated(self) -> int | None:
        import torch

        return torch.cuda.max_memory_allocated()

    def reset_peak_memory(self) -> None:
        import torch

        torch.cuda.reset_peak_memory_stats()

    def versions(self) -> dict[str, str]:
        import torch

        return {"cuda": str(torch.version.cuda)}

"""Huawei Ascend NPU platform, written against torch_npu's documented API.

- torch_npu is imported guarded: with the wheel installed but no CANN toolkit the import raises, so
  every exception means "not available" (and `npu_import_error()` keeps the reason for doctor).
- `torch_npu.contrib.transfer_to_npu` is never imported: it rewrites torch.cuda.* globally.
- bf16 needs Ascend 910B or newer (910B*, 910_93* / A3); 910A, 910 ProA and 310P run fp16.
"""
from __future__ import annotations

import importlib.util
from typing import Any

from swiftbox.device.base import DeviceMemory, Platform, Refusal

_IMPORT_ERROR: str | None = None


def _torch_npu() -> Any:
    """Import torch_npu, or return None (never raises). Records why an installed one failed."""
    global _IMPORT_ERROR
    try:
        if importlib.util.find_spec("torch_npu") is None:
            return None
    except (ImportError, ValueError):
        return None
    try:
        import torch_npu  # noqa: F401  (registers torch.npu)

        return torch_npu
    except BaseException as exc:  # CANN missing raises all sorts: ImportError, OSError, RuntimeError
        if isinstance(exc, KeyboardInterrupt):
            raise
        _IMPORT_ERROR = f"{type(exc).__name__}: {exc}".splitlines()[0][:200]
        return None


def npu_import_error() -> str | None:
    return _IMPORT_ERROR


def soc_supports_bf16(soc_name: str) -> bool:
    """Ascend910B1..B4, Ascend910_93xx (A3) and later do bf16; Ascend910A/ProA/ProB and 310P do not."""
    name = soc_name.replace(" ", "")
    if name.startswith("Ascend910B") or name.startswith("Ascend910_93") or name.startswith("Ascend910C"):
        return True
    return False


class NpuPlatform(Platform):
    name = "npu"
    device_type = "npu"
    dist_backend = "hccl"
    visible_devices_env = "ASCEND_RT_VISIBLE_DEVICES"
    default_env = {
        "HCCL_CONNECT_TIMEOUT": "1200",
        "VLLM_WORKER_MULTIPROC_METHOD": "spawn",
        "PYTORCH_NPU_ALLOC_CONF": "expandable_segments:True",
    }
    vllm_package = "vllm_ascend"
    vllm_quantizations = ()  # vllm-ascend's quantized path is msModelSlim W8A8/W4A8, not GPTQ/AWQ/bnb/FP8 files
    vllm_quantization_instead = "serve the merged model, or quantize with msModelSlim (W8A8) for vllm-ascend"

    def attn_implementation(self, packed: bool) -> str:
        # transformers maps flash_attention_2 on Ascend to torch_npu.npu_fusion_attention (integrations/
        # npu_flash_attention.py); a packed batch goes through its varlen form (input_layout "TND", cumulative
        # sequence lengths from position_ids), so samples never attend across each other and no mask is built
        return "flash_attention_2" if packed else "sdpa"
    refusals = {
        "qlora-bnb": Refusal(
            "bitsandbytes has no released Ascend backend, so 4-bit QLoRA cannot load",
            "method lora (or dora) in bf16/fp16",
        ),
        "bnb": Refusal("bitsandbytes has no released Ascend backend", "a bf16/fp16 model, or a GPTQ export made on "
                                                                      "CPU/CUDA"),
        "gptq": Refusal(
            "gptqmodel has no Ascend kernels",
            "quantize on a CPU or CUDA machine, or msModelSlim W8A8 for vllm-ascend",
        ),
        "awq": Refusal(
            "swiftbox has not validated gptqmodel's AWQ path on Ascend, and vllm-ascend does not serve AWQ",
            "quantize on a CPU or CUDA machine, or msModelSlim W8A8 for vllm-ascend",
        ),
        "fp8": Refusal("torch_npu has no FP8 weight format for Ascend 910/310", "msModelSlim W8A8 for vllm-ascend"),
        "vllm-colocate": Refusal("TRL's vLLM colocate mode drives CUDA vLLM; swiftbox has not validated it with "
                                 "vllm-ascend", "rollouts by the model's own generate (use_vllm: false)"),
        "flash-attn": Refusal("flash-attn is CUDA-only", "attn_implementation sdpa (torch_npu fuses it)"),
    }

    @classmethod
    def is_available(cls) -> bool:
        mod = _torch_npu()
        if mod is None:
            return False
        try:
            import torch

            return bool(torch.npu.is_available()) and torch.npu.device_count() > 0
        except Exception as exc:
            global _IMPORT_ERROR
            _IMPORT_ERROR = f"torch.npu.is_available() failed: {exc}"[:200]
            return False

    @classmethod
    def unavailable_reason(cls) -> str | None:
        try:
            if importlib.util.find_spec("torch_npu") is None:
                return "torch_npu is not installed"
        except (ImportError, ValueError) as exc:
            return f"torch_npu cannot be located: {exc}"
        if cls.is_available():
            return None
        return npu_import_error() or "torch_npu imported but torch.npu.is_available() is False (no device visible?)"

    def device_count(self) -> int:
        import torch

        return torch.npu.device_count()

    def device_name(self, index: int = 0) -> str:
        import torch

        return str(torch.npu.get_device_name(index))

    def bf16_supported(self) -> bool:
        return soc_supports_bf16(self.device_name(0))

    def memory(self, index: int = 0) -> DeviceMemory:
        import torch

        free, total = torch.npu.mem_get_info(index)
        return DeviceMemory(total, free)

    def synchronize(self) -> None:
        import torch

        torch.npu.synchronize()

    def empty_cache(self) -> None:
        import torch

        torch.npu.empty_cache()

    def max_memory_allocated(self) -> int | None:
        import torch

        return torch.npu.max_memory_allocated()

    def reset_peak_memory(self) -> None:
        import torch

        torch.npu.reset_peak_memory_stats()

    def profiler(self, settings: Any, trace_dir: Any, worker: str = "rank0") -> Any:
        from swiftbox.device.profiling import ascend_profiler

        return ascend_profiler(settings, trace_dir, worker)

    def profiler_traces(self, trace_dir: Any) -> list:
        from swiftbox.device.profiling import ascend_traces

        return ascend_traces(trace_dir)

    def versions(self) -> dict[str, str]:
        mod = _torch_npu()
        return {"torch_npu": getattr(mod, "__version__", "unknown") if mod else "not importable"}

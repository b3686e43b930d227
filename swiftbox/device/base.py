"""The Platform base class: static facts as class attributes, behaviour as methods (vLLM's shape).

Nothing here imports torch at module import time; methods import it when they are called.
"""
from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass
from typing import Any, ClassVar

from swiftbox import quant_methods
from swiftbox.device.devices import Devices, parse_devices
from swiftbox.errors import Unsupported

# feature -> the python package that must be importable for it (besides the platform's own support); a quantization
# method's feature, its package and install hint are its record's (swiftbox/quant_methods.py)
FEATURE_PACKAGES: dict[str, str] = {
    "qlora-bnb": "bitsandbytes",
    "vllm": "vllm",
    "vllm-colocate": "vllm",
    "flash-attn": "flash_attn",
    "deepspeed": "deepspeed",
}
# feature -> how to install what it needs, where that is more than `pip install PACKAGE`
FEATURE_INSTALL: dict[str, tuple[str, str]] = {}

OTHER_FEATURES = ("vllm", "flash-attn", "deepspeed", "multi-device",
                  "vllm-colocate")      # vllm-colocate: TRL's GRPO rollouts by vLLM inside the trainer


def features() -> tuple[str, ...]:
    """Every capability a platform answers for: precision, QLoRA, each quantization method's (read from its record
    now, so a method added there is known), then the rest."""
    return ("bf16", "fp16", "qlora-bnb", *quant_methods.features(), *OTHER_FEATURES)


FEATURES = features()


@dataclass(frozen=True)
class Refusal:
    """Why a feature is missing on a platform, and what to use instead."""

    why: str
    instead: str


# refused on every platform (none today; GGUF export needs only its extra: FEATURE_INSTALL)
ALWAYS_REFUSED: dict[str, Refusal] = {}


@dataclass
class DeviceMemory:
    total_bytes: int | None
    free_bytes: int | None


class Platform:
    name: ClassVar[str] = "base"
    device_type: ClassVar[str] = "cpu"
    dist_backend: ClassVar[str] = "gloo"
    visible_devices_env: ClassVar[str | None] = None
    # env every child process of this platform gets (merged under the user's own env)
    default_env: ClassVar[dict[str, str]] = {}
    # features this platform cannot do at all, with the reason and the alternative
    refusals: ClassVar[dict[str, Refusal]] = {}
    # python package that provides the platform's vLLM engine
    vllm_package: ClassVar[str] = "vllm"
    # torch.profiler.ProfilerActivity members a training profile records here
    profiler_activities: ClassVar[tuple[str, ...]] = ("CPU",)
    # checkpoint quantization formats (config.json quant_method) that engine serves here (None: every format whose
    # record in swiftbox/quant_methods.py lists vllm), and what to do otherwise
    vllm_quantizations: ClassVar[tuple[str, ...] | None] = None
    vllm_quantization_instead: ClassVar[str] = "serve the merged model, or use the built-in engine"
    # why `engine: auto` does not simply pick vLLM where it is installed (None: auto picks vLLM); where set, auto
    # follows this machine's measurement of both engines (swiftbox/serving/engine_choice.py)
    vllm_auto_instead: ClassVar[str | None] = None

    # -- detection -------------------------------------------------------------------------
    @classmethod
    def is_available(cls) -> bool:
        """True when this backend can run here. Must never raise nor initialise the runtime."""
        raise NotImplementedError

    @classmethod
    def unavailable_reason(cls) -> str | None:
        """Why `is_available()` says no, in one line (None when it says yes or has nothing to add)."""
        return None

    # -- devices ---------------------------------------------------------------------------
    def device_count(self) -> int:
        return 1

    def device_name(self, index: int = 0) -> str:
        return self.name

    def torch_device(self, index: int = 0) -> Any:
        import torch

        return torch.device(self.device_type, index) if self.device_type != "cpu" else torch.device("cpu")

    def device_map(self, index: int = 0) -> str:
        """A `device_map` value for `from_pretrained` that puts the whole model on one device."""
        return "cpu" if self.device_type == "cpu" else f"{self.device_type}:{index}"

    def memory(self, index: int = 0) -> DeviceMemory:
        return DeviceMemory(None, None)

    def synchronize(self) -> None:
        return None

    def empty_cache(self) -> None:
        return None

    def max_memory_allocated(self) -> int | None:
        """Peak bytes the framework allocated on the device (None where it does not track it)."""
        return None

    def reset_peak_memory(self) -> None:
        return None

    def training_memory(self) -> str | None:
        """Set up this process's memory for a training run (called once before the model loads); says what it did,
        or None where nothing is needed."""
        return None

    def release_freed_memory(self, start: bool = False) -> bool:
        """Called after every decoder layer's forward and backward and every step (training/memory_policy.py,
        `start` at a run's beginning): hand freed host memory back where the device's set-up asks for it (CPU trim
        mode); True when it did."""
        return False

    # -- precision -------------------------------------------------------------------------
    def bf16_supported(self) -> bool:
        return False

    def bf16_native(self) -> bool:
        """Whether bf16 matmuls run in hardware here (so bf16 can be faster than fp32, not only smaller)."""
        return self.bf16_supported()

    def default_dtype(self) -> str:
        """The compute dtype training and inference use unless told otherwise."""
        if self.bf16_supported():
            return "bfloat16"
        return "float16"

    def resolve_dtype(self, requested: str | None) -> str:
        if requested in (None, "", "auto"):
            return self.default_dtype()
        if requested == "bfloat16" and not self.bf16_supported():
            self.require("bf16")
        return requested

    def training_args(self, dtype: str) -> dict:
        """Keyword arguments for `transformers.TrainingArguments` on this platform."""
        return {"bf16": dtype == "bfloat16", "fp16": dtype == "float16"}

    # -- training speed --------------------------------------------------------------------
    def sft_batching(self) -> str:
        """SFT's default batching here: "packing" (padding-free, one flattened row per batch) or "grouped" (padded
        rows of similar length). Chosen by `bench sft --peers` per device (docs/training.md); packing pays where
        attention runs per sample on the flattened row (varlen flash attention), not with a dense block mask."""
        return "packing"

    def attn_implementation(self, packed: bool) -> str:
        """transformers' attention kernel for training. Packed (padding-free) batches need a variable-length kernel
        to attend per sample without a dense block mask; SDPA is the portable default."""
        return "sdpa"

    def training_kernels(self) -> dict[str, Any]:
        """Extra `TrainingArguments` that swap fused kernels into the model (none by default)."""
        return {}

    # -- capabilities ----------------------------------------------------------------------
    def _package_for(self, feature: str) -> str | None:
        if feature == "vllm":
            return self.vllm_package
        method = quant_methods.package_for(feature)
        return method[0] if method else FEATURE_PACKAGES.get(feature)

    def why_not(self, feature: str) -> Refusal | None:
        """None when `feature` works here; else why not and what to use instead."""
        known = features()
        if feature not in known:
            raise ValueError(f"unknown feature {feature!r}; known: {', '.join(known)}")
        if feature == "bf16" and not self.bf16_supported():
            return Refusal(f"bf16 is not supported by {self.describe()}", "dtype float16 (or float32)")
        refusal = ALWAYS_REFUSED.get(feature) or self.refusals.get(feature) or self.hardware_refusal(feature)
        if refusal is not None:
            return refusal
        if feature == "multi-device" and self.device_count() < 2:
            return Refusal(f"only {self.device_count()} {self.name} device(s) here", "a single device")
        pkg = self._package_for(feature)
        method = quant_methods.package_for(feature)
        install = method[1] if method else FEATURE_INSTALL.get(feature)
        if pkg and not _importable(pkg) and install:
            return Refusal(*install)
        if pkg and not _importable(pkg):
            return Refusal(f"the python package '{pkg}' is not installed", f"pip install {pkg.replace('_', '-')}")
        return None

    def hardware_refusal(self, feature: str) -> Refusal | None:
        """A refusal that depends on the device model found at run time (e.g. FP8 on older GPUs)."""
        return None

    def supports(self, feature: str) -> bool:
        return self.why_not(feature) is None

    def require(self, feature: str) -> None:
        refusal = self.why_not(feature)
        if refusal is not None:
            raise Unsupported(f"{feature} is not available on {self.name}: {refusal.why}; use {refusal.instead} "
                              "instead")

    def capability_matrix(self) -> dict[str, str]:
        out = {}
        for feature in features():
            refusal = self.why_not(feature)
            out[feature] = "yes" if refusal is None else f"no - {refusal.why}"
        return out

    # -- the vLLM engine's launch ----------------------------------------------------------
    def vllm_launch(self, cfg: Any, weights_bytes: int) -> tuple[list[str] | None, list[str], dict[str, str],
                                                                  list[str]]:
        """(command, extra flags, extra env, notes) for this platform's vLLM child. command None: the `vllm serve`
        CLI; else a command that takes `--model MODEL` (the OpenAI api_server module)."""
        return None, [], {}, []

    # -- child processes -------------------------------------------------------------------
    def env_for(self, devices: Devices | list[int] | int | str | None = None) -> dict[str, str]:
        """Environment for a child process (torchrun worker, vLLM server) that must use `devices`.

        The platform decision travels through SWIFTBOX_DEVICE so children never re-guess it.
        """
        env = dict(self.default_env)
        env["SWIFTBOX_DEVICE"] = self.name
        parsed = parse_devices(devices)
        ids = parsed.resolve() if parsed is not None else None
        if ids is not None and self.visible_devices_env:
            env[self.visible_devices_env] = ",".join(str(i) for i in ids)
        return env

    # -- profiling -------------------------------------------------------------------------
    def profiler(self, settings: Any, trace_dir: Any, worker: str = "rank0") -> Any:
        """A profiler (start/step/stop) over the `profile:` window `settings`, writing traces to `trace_dir`."""
        from swiftbox.device.profiling import torch_profiler

        return torch_profiler(self.profiler_activities, settings, trace_dir, worker)

    def profiler_traces(self, trace_dir: Any) -> list:
        """The Chrome trace files `profiler()` wrote under `trace_dir`."""
        from swiftbox.device.profiling import torch_traces

        return torch_traces(trace_dir)

    def describe(self) -> str:
        return f"{self.name} ({self.device_name(0)})"

    def versions(self) -> dict[str, str]:
        return {}


def _importable(pkg: str) -> bool:
    try:
        return importlib.util.find_spec(pkg) is not None
    except (ImportError, ValueError):
        return False


# environment variables that change what a run computes or how it is placed (recorded in manifests and
# checked by `compare`): device visibility, collectives, allocators, threads, determinism switches
RELEVANT_ENV_PREFIXES = ("CUDA_", "ASCEND_", "HCCL_", "NCCL_", "PYTORCH_", "TORCH_", "CUBLAS_", "OMP_", "MKL_",
                         "ACCELERATE_", "TASK_QUEUE_ENABLE", "COMBINED_ENABLE", "INF_NAN_MODE_ENABLE",
                         "SWIFTBOX_DEVICE", "SWIFTBOX_CPU_BF16", "TOKENIZERS_PARALLELISM", "LOCAL_WORLD_SIZE",
                         "WORLD_SIZE")
SECRET_WORDS = ("TOKEN", "KEY", "SECRET", "PASSWORD")


def relevant_env(environ: dict | None = None) -> dict[str, str]:
    """The environment variables that matter for comparing two runs (never secrets)."""
    env = dict(os.environ) if environ is None else environ
    return {k: env[k] for k in sorted(env)
            if k.startswith(RELEVANT_ENV_PREFIXES) and not any(w in k for w in SECRET_WORDS)}

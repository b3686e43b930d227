"""CPU platform: always available; gloo for multi-process. Default dtype: bf16 where the CPU multiplies bf16
natively (x86 AMX-BF16 or AVX512_BF16, Arm's BF16 extension: bf16 GEMMs then run at 2-16x the fp32 rate), else
fp32: bf16 always works on a CPU (torch's kernels), but without those units (e.g. an AVX2-only EPYC) torch converts
to fp32 and back and bf16 is slower than fp32 itself. `bf16_native()` says which, from the kernel's CPU flags, unless
`SWIFTBOX_CPU_BF16=on|off` forces the answer (`auto`, the default, reads the flags): `on` makes any CPU behave as a
bf16-native one (bf16 still computes correctly through torch's kernels, only slower), so the bf16 policy can be
tested on an AVX2 box; `off` makes an AMX machine compute in fp32."""
from __future__ import annotations

import ctypes
import functools
import os
import platform as _platform
from typing import Any

from swiftbox.device import vllm_cpu
from swiftbox.device.base import DeviceMemory, Platform, Refusal
from swiftbox.errors import UserError

# /proc/cpuinfo flags of the units that multiply bf16 natively: Intel Sapphire Rapids+ AMX, Cooper Lake / Zen 4+
# AVX512_BF16, Arm v8.6+ BF16 (its "Features" line)
NATIVE_BF16_FLAGS = ("amx_bf16", "avx512_bf16", "bf16")
CPUINFO = "/proc/cpuinfo"
BF16_ENV = "SWIFTBOX_CPU_BF16"
BF16_MODES = ("auto", "on", "off")
ATTENTION_ENV = "SWIFTBOX_CPU_ATTENTION"
ATTENTION_MODES = ("auto", "sdpa", "sdpa_varlen")


def attention_mode(environ: dict | None = None) -> str:
    """SWIFTBOX_CPU_ATTENTION: auto (the default: packed rows attend per sample through sdpa_varlen,
    swiftbox/device/attention.py), sdpa (transformers' kernel over the dense block-diagonal mask: the override) or
    sdpa_varlen. A bad value is a UserError (exit 2, one line)."""
    raw = (os.environ if environ is None else environ).get(ATTENTION_ENV, "")
    mode = raw.strip().lower() or "auto"
    if mode not in ATTENTION_MODES:
        raise UserError(f"{ATTENTION_ENV}: expected one of {', '.join(ATTENTION_MODES)}, got {raw!r}")
    return mode


def bf16_mode(environ: dict | None = None) -> str:
    """SWIFTBOX_CPU_BF16: auto (read the CPU flags, the default), on (behave as a bf16-native CPU), off (fp32).
    A bad value is a UserError (exit 2, one line)."""
    raw = (os.environ if environ is None else environ).get(BF16_ENV, "")
    mode = raw.strip().lower() or "auto"
    if mode not in BF16_MODES:
        raise UserError(f"{BF16_ENV}: expected one of {', '.join(BF16_MODES)}, got {raw!r}")
    return mode


def cpu_flags(cpuinfo: str | None = None) -> set[str]:
    """The CPU feature flags Linux reports, from `cpuinfo` text or the CPUINFO file (empty where it is missing:
    other OSes count as none)."""
    if cpuinfo is None:
        try:
            with open(CPUINFO, encoding="utf-8", errors="replace") as fh:
                cpuinfo = fh.read()
        except OSError:
            return set()
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            return set(value.split())
    return set()


def native_bf16_flags(flags: set[str] | None = None) -> list[str]:
    """Which native-bf16 matmul units this CPU has (empty: none; bf16 would be emulated)."""
    found = cpu_flags() if flags is None else flags
    return [f for f in NATIVE_BF16_FLAGS if f in found]


MALLOC_ENV = "SWIFTBOX_CPU_MALLOC"
TRIM_BUDGET = 256 << 20          # trim mode: how far the resident set may pass the run's own peak in use
MALLOC_MODES = ("auto", "trim", "mmap", "default")
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3      # glibc's mallopt parameters (malloc.h)
MMAP_THRESHOLD = 256 * 1024


@functools.lru_cache(maxsize=1)
def _libc() -> ctypes.CDLL | None:
    """glibc, loaded once (trim mode asks it after every decoder layer); None elsewhere."""
    try:
        return ctypes.CDLL("libc.so.6")
    except OSError:
        return None


def return_freed_memory() -> str | None:
    """glibc only: allocations from MMAP_THRESHOLD up are mmapped (a fixed threshold also stops glibc raising it
    after each large free) and free heap above 1 MiB is trimmed. Returns what it set, None off glibc."""
    libc = _libc()
    try:
        ok = libc is not None and libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD) and \
            libc.mallopt(M_TRIM_THRESHOLD, 1 << 20)
    except AttributeError:
        return None
    return f"malloc: mmap threshold {MMAP_THRESHOLD // 1024} KiB (freed tensors return to the OS)" if ok else None


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                     "fsmblks", "uordblks", "fordblks", "keepcost")]


@functools.lru_cache(maxsize=1)
def _mallinfo2() -> Any:
    """glibc's mallinfo2 with its return type set, or None (no glibc, or one older than 2.33)."""
    libc = _libc()
    fn = getattr(libc, "mallinfo2", None) if libc is not None else None
    if fn is not None:
        fn.restype = _MallInfo2
    return fn


def in_use_bytes() -> int | None:
    """Bytes malloc has handed to the program (heap chunks in use + mmapped chunks, every arena); None off glibc."""
    fn = _mallinfo2()
    if fn is None:
        return None
    info = fn()
    return int(info.uordblks) + int(info.hblkhd)


def resident_bytes() -> int | None:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


def trim_freed_memory() -> bool:
    """glibc's malloc_trim(0): the free pages of every arena go back to the OS (madvise), the heap's layout stays, so
    later allocations reuse the same addresses. False off glibc."""
    libc = _libc()
    try:
        if libc is None:
            return False
        libc.malloc_trim(0)
    except AttributeError:
        return False
    return True


class HeapCap:
    """Trim mode's rule: keep the resident set within `budget` of what the program itself needs at its peak.

    The freed heap stays resident for reuse (a step's temporaries and the next step's activations land on pages
    already faulted in, as with glibc's defaults) until the resident set passes base + (peak bytes in use - bytes in
    use at the start) + budget; then malloc_trim hands the free pages back. Holes that would otherwise pile up as
    fast as the saved activations (3.2 GB beside 3.65 GB in use in one forward on the real-model LoRA job) cost
    page faults only when they would raise the peak."""

    def __init__(self, budget: int = 0):
        self.budget = budget or TRIM_BUDGET
        self.base_rss = resident_bytes() or 0
        self.base_in_use = in_use_bytes() or 0
        self.peak_in_use = self.base_in_use

    def check(self) -> bool:
        used, rss = in_use_bytes(), resident_bytes()
        if used is None or rss is None:
            return False
        self.peak_in_use = max(self.peak_in_use, used)
        if rss <= self.base_rss + (self.peak_in_use - self.base_in_use) + self.budget:
            return False
        return trim_freed_memory()


def malloc_mode() -> str:
    """SWIFTBOX_CPU_MALLOC: auto (the measured default: trim), trim, mmap or default; anything else exits 2."""
    raw = os.environ.get(MALLOC_ENV, "")
    mode = raw.strip().lower() or "auto"
    if mode not in MALLOC_MODES:
        raise UserError(f"{MALLOC_ENV}: expected {', '.join(MALLOC_MODES)}, got {raw!r}")
    return mode


class CpuPlatform(Platform):
    _heap_cap: HeapCap | None = None          # trim mode's rule for the running training run
    name = "cpu"
    device_type = "cpu"
    dist_backend = "gloo"
    visible_devices_env = None
    default_env = {}
    refusals = {
        "vllm-colocate": Refusal("TRL's vLLM colocate mode runs vLLM on a CUDA GPU inside the trainer",
                                 "rollouts by the model's own generate (use_vllm: false)"),
        "flash-attn": Refusal("flash-attn is a CUDA kernel library", "attn_implementation sdpa (the default)"),
        "deepspeed": Refusal("DeepSpeed ZeRO targets accelerators", "torchrun with gloo DDP (devices: N)"),
        "fp8": Refusal("FP8 weights need FP8 matmul hardware (NVIDIA compute capability 8.9+: Ada, Hopper)",
                       "--method awq or gptq (4-bit) or --method bnb --bits 8 here, or quantize on an FP8 GPU"),
        "fp16": Refusal("fp16 matmuls on CPU are slow and unstable for training", "float32 or bfloat16"),
    }

    # vLLM's CPU backend (vllm-cpu, its own venv: device/vllm_cpu.py) serves unquantized checkpoints here
    vllm_package = "vllm-cpu"
    vllm_quantizations = ()
    vllm_quantization_instead = "serve the merged model with vLLM, or the quantized one with the built-in engine"
    vllm_auto_instead = ("which engine serves more tokens/s on a CPU depends on the CPU and its load: auto follows "
                         "this machine's measurement of both (./launch.sh bench serve-vllm MODEL records it; "
                         "swiftbox/serving/engine_choice.py)")
    # below these, torch.compile's start-up (~100 s more, measured) costs more than its speed-up returns
    EAGER_BELOW_CORES = 8

    @classmethod
    def is_available(cls) -> bool:
        return True

    def attn_implementation(self, packed: bool) -> str:
        """Packed rows attend per sample through `sdpa_varlen` (SDPA once per sample: the sum of l_i^2 instead of
        L^2 over a dense block-diagonal mask; exact by tests/unit/test_packing_exact.py). The measured rule: it won
        or tied on every CPU measured (1.42x AVX512-BF16 EPYC, 1.12x AVX2 EPYC, 0.98x loaded AMX Xeon;
        docs/devices.md), so it is the default for packed batches on every CPU; SWIFTBOX_CPU_ATTENTION=sdpa keeps
        transformers' masked kernel. Padded batches use SDPA."""
        if packed and attention_mode() in ("auto", "sdpa_varlen"):
            from swiftbox.device.attention import register

            return register()
        return "sdpa"

    def hardware_refusal(self, feature: str) -> Refusal | None:
        if feature != "vllm":
            return None
        why = vllm_cpu.missing_reason()
        return None if why is None else Refusal(why, "`./launch.sh install vllm`, or the built-in engine "
                                                     "(engine: builtin)")

    def _package_for(self, feature: str) -> str | None:
        return None if feature == "vllm" else super()._package_for(feature)   # its own venv, not importable here

    def vllm_launch(self, cfg: object, weights_bytes: int) -> tuple[list[str] | None, list[str], dict[str, str],
                                                                      list[str]]:
        """vLLM-CPU's command, extra flags, env and notes: the api_server module of its venv (the renamed
        distribution breaks the `vllm` CLI), a KV cache sized from free memory (vLLM-CPU otherwise reserves 92% of
        RAM; $VLLM_CPU_KVCACHE_SPACE, GiB, overrides), eager mode on small boxes (SWIFTBOX_VLLM_COMPILE=1 asks for
        torch.compile), and vLLM's own thread binding left as is (it keeps a core for the engine core process)."""
        from swiftbox.device.vllm_kv import kv_cache_bytes

        flags: list[str] = []
        env: dict[str, str] = {}
        notes: list[str] = []
        if not os.environ.get("VLLM_CPU_KVCACHE_SPACE"):
            kv = kv_cache_bytes(self.memory().free_bytes, weights_bytes)
            flags += ["--kv-cache-memory-bytes", str(kv)]
            notes.append(f"KV cache {kv / 2**20:.0f} MiB (from free memory; VLLM_CPU_KVCACHE_SPACE=GiB overrides)")
        cores = os.cpu_count() or 1
        if cores < self.EAGER_BELOW_CORES and os.environ.get("SWIFTBOX_VLLM_COMPILE", "") not in ("1", "on"):
            flags.append("--enforce-eager")
            notes.append(f"eager mode ({cores} cores; SWIFTBOX_VLLM_COMPILE=1 compiles)")
        return vllm_cpu.server_command(), flags, env, notes

    def device_count(self) -> int:
        # processes, not cores: CPU "devices" are the ranks a gloo run may use
        return 1

    def device_name(self, index: int = 0) -> str:
        return _platform.processor() or _platform.machine() or "cpu"

    def bf16_supported(self) -> bool:
        return True  # works (slowly) through torch's CPU kernels

    def bf16_native(self) -> bool:
        """True where the CPU has a native bf16 matmul unit (AMX / AVX512-BF16 / Arm BF16), or SWIFTBOX_CPU_BF16
        forces the answer (on / off)."""
        mode = bf16_mode()
        if mode != "auto":
            return mode == "on"
        return bool(native_bf16_flags())

    def default_dtype(self) -> str:
        return "bfloat16" if self.bf16_native() else "float32"

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

    def training_memory(self) -> str | None:
        """The allocator set-up for a training run (SWIFTBOX_CPU_MALLOC). glibc's default dynamic threshold serves
        every tensor up to 32 MiB from the heap, and a forward pass's freed holes pile up as fast as the saved
        activations (3.2 GB free beside 3.65 GB in use on the real-model LoRA job: an 8 GB peak). Modes:
        trim (auto's choice): glibc's thresholds, and the free heap handed back whenever the resident set passes
        the program's own peak + TRIM_BUDGET, checked after every decoder layer (`release_freed_memory`, HeapCap);
        mmap: every tensor from 256 KiB up mmapped and unmapped when freed (the same peak, ~1.5x slower: a page
        fault per 4 KiB of every temporary); default: glibc alone (fastest, the 8 GB peak). docs/benchmarks.md."""
        mode = self.malloc_mode()
        if mode == "mmap":
            return return_freed_memory()
        if mode == "trim":
            return f"malloc: free heap back to the OS past the run's peak + {TRIM_BUDGET >> 20} MiB"
        return None

    def malloc_mode(self) -> str:
        mode = malloc_mode()
        return "trim" if mode == "auto" else mode

    def release_freed_memory(self, start: bool = False) -> bool:
        """After every decoder layer's forward and backward and every step (training/memory_policy.py): in trim
        mode, the free heap goes back to the OS when the resident set passes the run's own peak + TRIM_BUDGET
        (HeapCap; `start` takes a new baseline at a run's beginning)."""
        if self.malloc_mode() != "trim":
            return False
        if start or self._heap_cap is None:
            self._heap_cap = HeapCap(TRIM_BUDGET)
        return self._heap_cap.check()

    def max_memory_allocated(self) -> int | None:
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB

    def versions(self) -> dict[str, str]:
        flags = ",".join(native_bf16_flags()) or "none"
        mode = bf16_mode()
        return {"cpu_count": str(os.cpu_count()),
                "native_bf16": flags if mode == "auto" else f"{flags} ({BF16_ENV}={mode})"}

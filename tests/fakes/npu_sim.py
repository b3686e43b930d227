"""A simulated Ascend NPU: a fake `torch_npu` in sys.modules and PyTorch's PrivateUse1 backend renamed
to `npu` - enough for torch, accelerate and transformers to report `npu:0`.

Renaming PrivateUse1 cannot be undone in a process, so tests run this in a subprocess:
    python tests/fakes/npu_sim.py SOC_NAME COMMAND   (COMMAND: plan | cli ARGS...)
"""
from __future__ import annotations

import importlib.machinery
import json
import sys
import types
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


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


def install_fake_npu_profiler() -> dict:
    """torch_npu.profiler as its documented API names it (profile, schedule, ProfilerActivity, ProfilerLevel,
    AiCMetrics, _ExperimentalConfig, tensorboard_trace_handler); every call is recorded in the returned dict."""
    calls: dict = {"steps": 0}
    prof = types.ModuleType("torch_npu.profiler")
    prof.ProfilerActivity = types.SimpleNamespace(CPU="Activity.CPU", NPU="Activity.NPU")
    prof.ProfilerLevel = types.SimpleNamespace(Level_none="Level_none", Level0="Level0", Level1="Level1",
                                               Level2="Level2")
    prof.AiCMetrics = types.SimpleNamespace(AiCoreNone="AiCoreNone", PipeUtilization="PipeUtilization",
                                            ArithmeticUtilization="ArithmeticUtilization", Memory="Memory",
                                            MemoryL0="MemoryL0", MemoryUB="MemoryUB",
                                            ResourceConflictRatio="ResourceConflictRatio", L2Cache="L2Cache")
    prof._ExperimentalConfig = lambda **kw: calls.setdefault("experimental_config", kw) and ("config", kw)
    prof.schedule = lambda **kw: calls.setdefault("schedule", kw) and ("schedule", kw)
    prof.tensorboard_trace_handler = lambda dir_name, worker_name=None, **kw: (
        calls.setdefault("handler", {"dir_name": dir_name, "worker_name": worker_name}) and "handler")

    class Profile:
        def __init__(self, **kw):
            calls["profile"] = {k: v for k, v in kw.items()}

        def start(self):
            calls["started"] = True

        def step(self):
            calls["steps"] += 1

        def stop(self):
            calls["stopped"] = True

    prof.profile = Profile
    sys.modules["torch_npu"].profiler = prof
    sys.modules["torch_npu.profiler"] = prof
    return calls


def profiler_plan(trace_dir: str) -> dict:
    from swiftbox.device import current_platform
    from swiftbox.steps import ProfileConfig

    calls = install_fake_npu_profiler()
    settings = ProfileConfig(wait=1, warmup=1, active=2, repeat=2, level="level1", aic_metrics="pipe_utilization",
                             l2_cache=True, record_shapes=True)
    platform = current_platform()
    prof = platform.profiler(settings, trace_dir, worker="rank3")
    prof.start()
    prof.step()
    prof.stop()
    out = Path(trace_dir) / "rank3_1_ascend_pt" / "ASCEND_PROFILER_OUTPUT"
    out.mkdir(parents=True)
    (out / "trace_view.json").write_text("[]")
    calls["traces"] = [str(p) for p in platform.profiler_traces(trace_dir)]
    calls["platform"] = platform.name
    return json.loads(json.dumps(calls, default=str))


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
    elif sys.argv[2] == "profiler":
        print(json.dumps(profiler_plan(sys.argv[3])))
    else:
        from swiftbox.cli import main

        raise SystemExit(main(sys.argv[3:]))

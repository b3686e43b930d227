"""Simulated Ascend NPU (no hardware): the launch plan, dtype by SoC, capability refusals, and that
accelerate/transformers agree on npu:0; plus a broken torch_npu falling back to CPU."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT, run_cli

SIM = str(Path(__file__).parents[1] / "fakes" / "npu_sim.py")


def sim(soc: str, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    full = dict(os.environ, PYTHONPATH=str(ROOT), **(env or {}))
    full.pop("SWIFTBOX_DEVICE", None)
    return subprocess.run([sys.executable, SIM, soc, *args], capture_output=True, text=True, env=full, timeout=300)


def test_910b_launch_plan_matches_accelerate_and_transformers():
    out = sim("Ascend910B2", "plan")
    assert out.returncode == 0, out.stderr
    plan = json.loads(out.stdout.strip().splitlines()[-1])
    assert plan["platform"] == "npu" and plan["torch_device"] == "npu:0" and plan["device_map"] == "npu:0"
    assert plan["accelerate_device"] in ("npu", "npu:0") and plan["transformers_npu"] is True
    assert plan["dtype"] == "bfloat16" and plan["backend"] == "hccl"
    env = plan["env"]
    assert env["ASCEND_RT_VISIBLE_DEVICES"] == "0,1,2,3,4,5,6,7"
    assert env["VLLM_WORKER_MULTIPROC_METHOD"] == "spawn" and int(env["HCCL_CONNECT_TIMEOUT"]) > 0
    assert plan["qlora"] is False and plan["gptq"] is False


def test_910a_falls_back_to_fp16():
    plan = json.loads(sim("Ascend910A", "plan").stdout.strip().splitlines()[-1])
    assert plan["dtype"] == "float16"


def test_simulated_npu_doctor_and_refusals():
    out = sim("Ascend910B2", "cli", "doctor", "--json")
    assert out.returncode == 0, out.stderr
    info = json.loads(out.stdout)
    assert info["platform"] == "npu" and info["device_count"] == 8
    assert info["capabilities"]["qlora-bnb"].startswith("no")
    # QLoRA on NPU: exit 3, naming LoRA as the alternative, before any work is done
    out = sim("Ascend910B2", "cli", "sft", "toy", "--dataset", "recipes/data/parity_sft.jsonl", "--method", "qlora",
              "--output", "/tmp/swiftbox-never-written")
    assert out.returncode == 3, out.stderr
    assert "lora" in out.stderr.lower() and not Path("/tmp/swiftbox-never-written").exists()


def test_broken_torch_npu_falls_back_to_cpu(tmp_path):
    pkg = tmp_path / "torch_npu"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("raise ImportError('libascendcl.so: cannot open shared object file')\n")
    env = {"PYTHONPATH": os.pathsep.join([str(ROOT), str(tmp_path)])}
    out = run_cli("doctor", "--json", env=env)
    assert out.returncode == 0, out.stderr
    info = json.loads(out.stdout)
    assert info["platform"] == "cpu" and "libascendcl" in info["torch_npu_error"]
    assert "libascendcl" in info["unavailable"]["npu"]  # the reason is shown, not dropped
    assert "torch_npu is installed but unusable" in out.stderr
    out = run_cli("doctor", "--device", "npu", env=env)
    assert out.returncode == 3 and "libascendcl" in out.stderr and "Traceback" not in out.stderr


def test_profile_window_on_npu_uses_torch_npu_profiler_with_its_experimental_config(tmp_path):
    out = sim("Ascend910B2", "profiler", str(tmp_path))
    assert out.returncode == 0, out.stderr
    calls = json.loads(out.stdout.strip().splitlines()[-1])
    assert calls["platform"] == "npu"
    assert calls["experimental_config"] == {"profiler_level": "Level1", "aic_metrics": "PipeUtilization",
                                            "l2_cache": True}
    assert calls["schedule"] == {"wait": 1, "warmup": 1, "active": 2, "repeat": 2}
    assert calls["handler"] == {"dir_name": str(tmp_path), "worker_name": "rank3"}
    profile = calls["profile"]
    assert profile["activities"] == ["Activity.CPU", "Activity.NPU"]
    assert profile["record_shapes"] is True and profile["profile_memory"] is True and profile["with_stack"] is False
    assert profile["experimental_config"][0] == "config" and profile["on_trace_ready"] == "handler"
    assert calls["started"] and calls["steps"] == 1 and calls["stopped"]
    assert calls["traces"] == [str(tmp_path / "rank3_1_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "trace_view.json")]

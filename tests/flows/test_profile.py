"""The `profile:` window on training steps: a profiled toy SFT writes a trace that TensorBoard's PyTorch
profiler plugin loads, a summary whose shares add up, and the same losses as an unprofiled run; a window
beyond the last step is exit 2; the recorded steps follow torch.profiler.schedule; the summary arithmetic."""
from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from swiftbox.diagnose.trace_summary import op_self_times, phase_times, summarize
from swiftbox.runner import run_recipe
from swiftbox.steps import SftStep
from swiftbox.training.profile_window import recorded
from tests.conftest import ROOT, run_cli

pytestmark = pytest.mark.usefixtures("one_torch_thread")
STEP = {"dataset": "recipes/data/parity_sft.jsonl#48", "max_steps": 4, "batch_size": 8, "save_steps": 100,
        "logging_steps": 1, "learning_rate": 1e-3, "seed": 7}


def sft(tmp_path, name, **extra):
    summary = run_recipe({"name": name, "model": "toy", "steps": [{"sft": {**STEP, **extra}}]},
                         runs_root=tmp_path, log=lambda m: None)
    out = Path(summary["steps"][0]["output"])
    return out, json.loads((out / "swiftbox.json").read_text())


def test_profiled_sft_loads_in_tensorboard_plugin_adds_up_and_keeps_the_losses(tmp_path):
    plain_dir, plain = sft(tmp_path, "plain")
    prof_dir, prof = sft(tmp_path, "profiled", profile={"wait": 1, "warmup": 1, "active": 2})
    # profiling never changes results: every logged loss and the final loss are identical
    assert prof["metrics"]["train_loss"] == plain["metrics"]["train_loss"]
    assert [h.get("loss") for h in prof["log_history"]] == [h.get("loss") for h in plain["log_history"]]
    assert not (plain_dir / "profile").exists()

    summary = json.loads((prof_dir / "profile" / "summary.json").read_text())
    assert summary["steps_recorded"] == 2 and summary["window"]["active"] == 2
    shares = summary["phase_share"]
    assert set(shares) == {"data_wait", "lm_head_loss", "forward", "backward", "optimizer", "other"}
    assert all(v >= 0 for v in shares.values()) and math.isclose(sum(shares.values()), 1.0, abs_tol=1e-9)
    assert shares["forward"] > 0.05 and shares["backward"] > 0.05 and shares["optimizer"] > 0
    # TRL's fused head + loss never calls the head module: timed from the backbone's end, its backward by node name
    assert shares["lm_head_loss"] > 0
    ms = summary["phase_ms"]
    assert math.isclose(sum(ms.values()), summary["step_ms_mean"] * 2, rel_tol=1e-3)
    assert summary["top_ops"] and summary["top_ops"][0]["self_ms"] >= summary["top_ops"][-1]["self_ms"]
    assert summary["tokens_per_second"] > 0 and summary["peak_memory_bytes_traced"] > 0
    assert "share of step time" in (prof_dir / "profile" / "summary.txt").read_text()
    traces = [Path(t) for t in summary["traces"]]
    assert traces and all(t.is_file() and t.is_relative_to(prof_dir) for t in traces)

    # what TensorBoard's profiler plugin makes of the trace directory (its own loader, not a file check)
    out = subprocess.run([sys.executable, str(ROOT / "tests" / "fakes" / "tb_profile_load.py"), str(traces[0].parent)],
                         capture_output=True, text=True, timeout=300, cwd=str(tmp_path))
    assert out.returncode == 0, out.stderr[-2000:]
    loaded = json.loads(out.stdout.strip().splitlines()[-1])
    assert len(loaded) == 1 and loaded[0]["worker"] == "rank0"
    assert {"overall", "operator", "trace"} <= set(loaded[0]["views"])
    assert loaded[0]["steps"] == 2 and loaded[0]["ops"] > 10


def test_window_beyond_max_steps_is_exit_2_before_anything_runs(tmp_path):
    out = run_cli("sft", "toy", "--dataset", "recipes/data/parity_sft.jsonl#16", "--max-steps", "3",
                  "--profile.wait", "1", "--profile.active", "3", "--output", str(tmp_path / "never"))
    assert out.returncode == 2, out.stderr[-2000:]
    assert len(out.stderr.strip().splitlines()) == 1 and "Traceback" not in out.stderr
    assert "sft.profile" in out.stderr and "step 5" in out.stderr and "max_steps is 3" in out.stderr
    assert not (tmp_path / "never").exists() and not (tmp_path / "never.partial").exists()


def test_window_beyond_an_epoch_based_run_is_refused_at_train_start(tmp_path):
    from swiftbox.device import CpuPlatform
    from swiftbox.errors import UserError
    from swiftbox.steps import ProfileConfig
    from swiftbox.training.profile_window import ProfileWindow

    window = ProfileWindow(ProfileConfig(wait=2, warmup=1, active=3), CpuPlatform(), tmp_path / "w", tmp_path / "f",
                           "dpo", True)
    state = SimpleNamespace(max_steps=5, global_step=0, num_input_tokens_seen=0)
    with pytest.raises(UserError, match=r"dpo.profile: .* ends at step 6, but this run has 5 step"):
        window.on_train_begin(SimpleNamespace(process_index=0), state, None)
    assert window.prof is None and not (tmp_path / "w").exists()


@pytest.mark.slow
def test_window_beyond_the_last_epoch_step_is_exit_2_from_the_cli(tmp_path):
    out = run_cli("sft", "toy", "--dataset", "recipes/data/parity_sft.jsonl#16", "--epochs", "1", "--batch-size", "8",
                  "--profile.active", "5", "--output", str(tmp_path / "never"))
    assert out.returncode == 2, out.stderr[-2000:]
    assert "profile" in out.stderr.strip().splitlines()[-1] and "2 step" in out.stderr and "Traceback" not in out.stderr
    assert not (tmp_path / "never").exists()


def test_profile_block_schema():
    assert SftStep(dataset="d", profile=True).profile.active == 3
    assert SftStep(dataset="d", profile={"active": 2, "repeat": 2}).profile.last_step() == 8
    assert SftStep(dataset="d").profile is None
    out = run_cli("sft", "toy", "--dataset", "d.jsonl", "--profile.active", "0")
    assert out.returncode == 2 and "profile.active" in out.stderr


@pytest.mark.parametrize("wait,warmup,active,repeat", [(1, 1, 2, 1), (0, 0, 1, 3), (2, 1, 1, 0), (0, 2, 3, 2)])
def test_recorded_steps_follow_torch_profiler_schedule(wait, warmup, active, repeat):
    import torch

    schedule = torch.profiler.schedule(wait=wait, warmup=warmup, active=active, repeat=repeat)
    settings = SimpleNamespace(wait=wait, warmup=warmup, active=active, repeat=repeat)
    record = {torch.profiler.ProfilerAction.RECORD, torch.profiler.ProfilerAction.RECORD_AND_SAVE}
    for step in range(30):
        assert recorded(settings, step) == (schedule(step) in record), step


def X(name, ts, dur, cat="user_annotation", tid=1):
    return {"ph": "X", "name": name, "ts": ts, "dur": dur, "cat": cat, "pid": 1, "tid": tid}


def test_summary_assigns_each_moment_once_and_computes_self_time(tmp_path):
    events = [
        X("ProfilerStep#3", 0, 100), X("ProfilerStep#4", 100, 100),
        X("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 0, 10),
        X("swiftbox::forward", 10, 40),
        X("autograd::engine::evaluate_function: MmBackward0", 50, 30, cat="cpu_op", tid=2),
        X("autograd::engine::evaluate_function: MmBackward0", 45, 10, cat="cpu_op", tid=3),  # 45-50 is forward's
        X("swiftbox::optimizer", 80, 10), X("Optimizer.step#AdamW.step", 82, 5),
        X("swiftbox::forward", 300, 50),        # outside every recorded step: not counted
        X("aten::linear", 10, 30, cat="cpu_op"), X("aten::mm", 12, 20, cat="cpu_op"), X("aten::t", 33, 2, cat="cpu_op"),
        {"ph": "i", "name": "[memory]", "ts": 20, "pid": 1, "tid": 1, "args": {"Total Allocated": 4096}},
    ]
    steps, times = phase_times([e for e in events if e["ph"] == "X"])
    assert steps == [(0, 200)]
    assert times == {"data_wait": 10, "lm_head_loss": 0, "forward": 40, "backward": 30, "optimizer": 10, "other": 110}
    ops = op_self_times(events)
    assert ops["aten::linear"] == {"calls": 1, "total_us": 30, "self_us": 8.0} and ops["aten::mm"]["self_us"] == 20
    trace = tmp_path / "w.pt.trace.json"
    trace.write_text(json.dumps({"traceEvents": events}))
    summary = summarize([trace])
    assert math.isclose(sum(summary["phase_share"].values()), 1.0) and summary["phase_share"]["other"] == 0.55
    assert summary["peak_memory_bytes_traced"] == 4096 and summary["steps_recorded"] == 2


def test_a_run_stopped_before_the_window_notes_it_instead_of_failing(tmp_path):
    from swiftbox.device import CpuPlatform
    from swiftbox.steps import ProfileConfig
    from swiftbox.training.profile_window import ProfileWindow

    window = ProfileWindow(ProfileConfig(), CpuPlatform(), tmp_path / "w", tmp_path / "f", "sft", True)
    (tmp_path / "w" / "trace").mkdir(parents=True)
    summary = window.write_summary()
    assert summary["steps_recorded"] == 0 and "before the window" in summary["note"]
    assert json.loads((tmp_path / "w" / "summary.json").read_text()) == summary

"""`./launch.sh models` estimates against a measured peak: LoRA SFT on the toy, peak RSS from the step's
own metrics (CPU: ru_maxrss of the process). docs/models.md lists these and the bench model's figures."""
from __future__ import annotations

import json

import pytest

from swiftbox.catalog.presets import Preset, memory_gib
from tests.conftest import run_cli


@pytest.mark.slow  # a real (tiny) training run in a child process
def test_lora_estimate_is_within_2x_of_the_measured_peak_on_the_toy(tmp_path):
    res = run_cli("sft", "toy", "--dataset", "recipes/data/parity_sft.jsonl", "--method", "lora", "--max-steps", "5",
                  "--output", str(tmp_path / "sft"), env={"SWIFTBOX_DEVICE": "cpu"})
    assert res.returncode == 0, res.stderr
    metrics = json.loads(res.stdout.strip().splitlines()[-1])["metrics"]
    measured = metrics["peak_memory_bytes"] / 2**30
    toy = Preset("toy", "toy", "toy", "toy", metrics["total_params"] / 1e9, "ChatML")
    estimate = memory_gib(toy, "lora", "float32")
    assert 0.5 <= estimate / measured <= 2.0, (estimate, measured)

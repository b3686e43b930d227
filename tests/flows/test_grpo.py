"""GRPO on the pretrained toy: rewards move the policy (short, default suite), the quickstart proof from a
deliberately weak SFT adapter (slow), a user reward file and a reward model as rewards, and 2 gloo processes
(slow)."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from swiftbox.artifacts import read_manifest
from swiftbox.runner import run_recipe

ROOT = Path(__file__).resolve().parents[2]
SFT_DATA = "recipes/data/parity_sft.jsonl"
EVAL_DATA = "recipes/data/parity_eval.jsonl"
# a few SFT steps teach the answer format (yes / no), not the rule: held-out accuracy stays near chance
FORMAT_SFT = {"dataset": SFT_DATA + "#64", "max_steps": 4, "learning_rate": 3e-3, "batch_size": 16, "save_steps": 100}
# the weak start of the proof: 48 of the quickstart's 125 steps, held-out accuracy 0.64 (measured)
WEAK_SFT = {"dataset": SFT_DATA, "max_steps": 48, "learning_rate": 3e-3, "batch_size": 16, "save_steps": 100}

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def run(tmp_path, name, *steps):
    return run_recipe({"name": name, "model": "toy", "steps": list(steps)}, runs_root=tmp_path, log=lambda m: None)


def always_yes(tmp_path, start: int, n: int) -> str:
    """Parity questions whose reference is always "yes": what a few GRPO steps can learn."""
    lines = (ROOT / SFT_DATA).read_text().splitlines()[start:start + n]
    rows = [{"messages": [json.loads(line)["messages"][0], {"role": "assistant", "content": "yes"}]} for line in lines]
    path = tmp_path / f"yes-{start}.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def test_grpo_exact_reward_moves_the_policy_toward_the_reference(tmp_path):
    held_out = always_yes(tmp_path, 300, 32)
    summary = run(tmp_path, "g",
                  {"sft": FORMAT_SFT},
                  {"eval": {"dataset": held_out}},
                  {"grpo": {"dataset": always_yes(tmp_path, 100, 64), "rewards": ["exact"], "num_generations": 4,
                            "batch_size": 16, "max_steps": 6, "learning_rate": 5e-3, "max_completion_length": 3,
                            "logging_steps": 1, "save_steps": 100}},
                  {"eval": {"dataset": held_out}})
    before, m, after = (summary["steps"][i]["metrics"] for i in (1, 2, 3))
    print(f"\nGRPO short: held-out {before['accuracy']} -> {after['accuracy']}, reward {m['reward_first']} -> "
          f"{m['reward_last']}, kl {m['kl_last']}, {m['steps_per_second']} steps/s")
    assert after["accuracy"] >= before["accuracy"] + 0.2 and after["accuracy"] >= 0.8
    assert m["reward_last"] > m["reward_first"] and m["accuracy_last"] == m["reward_exact_last"]
    assert m["kl_first"] == pytest.approx(0.0, abs=1e-3) and m["kl_last"] > 0
    assert m["reference_reward/exact"] == 1.0 and m["steps"] == 6 and math.isfinite(m["train_loss"])
    out = tmp_path / "g" / "grpo"
    manifest = read_manifest(out)
    assert manifest["continued_from"] == str(tmp_path / "g" / "sft") and manifest["rewards"] == [
        {"spec": "exact", "weight": 1.0}]
    assert (out / "loss.png").is_file() and (out / "adapter_model.safetensors").is_file()
    assert not (out / "ref").exists() and any({"reward", "kl", "accuracy"} <= set(e) for e in manifest["log_history"])


def test_user_reward_file_and_reward_model(tmp_path, toy_dir):
    """A user's function and a sequence-classification reward model both feed GRPO; a function that returns
    the wrong shape mid-run is one line, exit 2, naming its file."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    rm = tmp_path / "rm"
    AutoModelForSequenceClassification.from_pretrained(str(toy_dir), num_labels=1).save_pretrained(rm)
    AutoTokenizer.from_pretrained(str(toy_dir)).save_pretrained(rm)
    user = tmp_path / "my_rewards.py"
    user.write_text("def short(completions, **kwargs):\n    return [1.0 if len(c) < 5 else 0.0 for c in completions]\n"
                    "def broken(completions, **kwargs):\n    return [0.0]\n")
    grpo = {"dataset": SFT_DATA + "#16", "num_generations": 2, "batch_size": 4, "max_steps": 2,
            "max_completion_length": 4, "logging_steps": 1, "save_steps": 100}
    summary = run(tmp_path, "u", {"grpo": {**grpo, "rewards": {f"{user}:short": 1.0, f"model:{rm}": 0.5}}})
    m = summary["steps"][0]["metrics"]
    assert {"reward_short_first", "reward_reward_model_first", "accuracy_first"} <= m.keys()
    assert math.isfinite(m["reward_reward_model_last"]) and m["reference_reward/short"] == 1.0

    from swiftbox.errors import UserError

    with pytest.raises(UserError, match=r"reward .*my_rewards.py:broken: returned 1 value\(s\)"):
        run(tmp_path, "b", {"grpo": {**grpo, "rewards": [f"{user}:broken"]}})
    assert not (tmp_path / "b" / "grpo").exists()


@pytest.mark.slow
def test_grpo_lifts_a_weak_sft_adapter_on_the_quickstart_task(tmp_path):
    """The proof: held-out accuracy of a deliberately weak SFT adapter (0.64) rises with GRPO and the `exact`
    reward; recipes/quickstart-align.yaml runs the same steps. Measured 0.64 -> 0.91 (sampled reward at
    temperature 1.5: 0.44 -> 0.80) in 24 steps of 16 prompts x 8 answers (docs/training.md)."""
    summary = run(tmp_path, "p",
                  {"sft": WEAK_SFT},
                  {"eval": {"dataset": EVAL_DATA}},
                  {"grpo": {"dataset": SFT_DATA, "rewards": ["exact"], "num_generations": 8, "batch_size": 128,
                            "max_steps": 24, "learning_rate": 1e-3, "lr_scheduler": "constant", "temperature": 1.5,
                            "beta": 0.04, "max_completion_length": 4, "logging_steps": 1, "save_steps": 100}},
                  {"eval": {"dataset": EVAL_DATA}})
    before, m, after = (summary["steps"][i]["metrics"] for i in (1, 2, 3))
    print(f"\nGRPO proof: held-out {before['accuracy']} -> {after['accuracy']}, reward {m['reward_first']} -> "
          f"{m['reward_last']}, {m['steps_per_second']} steps/s")
    assert before["accuracy"] <= 0.7 and after["accuracy"] >= 0.85
    assert m["reward_last"] > m["reward_first"]


@pytest.mark.slow
def test_grpo_on_two_gloo_processes(tmp_path, monkeypatch, capfd):
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    summary = run(tmp_path, "d", {"grpo": {"dataset": SFT_DATA + "#32", "rewards": ["exact", "length"],
                                           "num_generations": 2, "batch_size": 4, "max_steps": 2, "devices": 2,
                                           "max_completion_length": 4, "logging_steps": 1, "save_steps": 100}})
    out = tmp_path / "d" / "grpo"
    manifest = read_manifest(out)
    assert summary["steps"][0]["metrics"]["world_size"] == 2 and manifest["distributed"]["backend"] == "gloo"
    assert manifest["metrics"]["steps"] == 2 and (out / "adapter_model.safetensors").is_file()
    assert "-m torch.distributed.run --standalone --nnodes 1 --nproc-per-node 2" in capfd.readouterr().err

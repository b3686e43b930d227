"""KTO, ORPO, SimPO and the reward model (rm) on the pretrained toy.

Default suite (short): each step trains a few steps on a preference a few steps can learn (always "yes" over
"no"), the reward margin moves the right way, and the rm's reward model, loaded with the public scoring API,
ranks held-out chosen above rejected. KTO's data formats and the exit-2 refusals need no model.
Slow: the quickstart's SFT policy, then each method on the full parity data: margins up, task accuracy kept,
the rm ranks the held-out parity pairs (docs/training.md quotes these numbers).
"""
from __future__ import annotations

import json
import math

import pytest

from swiftbox.artifacts import read_manifest
from swiftbox.errors import UserError
from swiftbox.runner import run_recipe
from tests.conftest import ROOT

DPO_DATA = str(ROOT / "recipes" / "data" / "parity_dpo.jsonl")
KTO_DATA = str(ROOT / "recipes" / "data" / "parity_kto.jsonl")
HELDOUT = str(ROOT / "recipes" / "data" / "parity_heldout_dpo.jsonl")
EVAL_DATA = str(ROOT / "recipes" / "data" / "parity_eval.jsonl")
FAST = {"batch_size": 8, "save_steps": 100, "logging_steps": 1}

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def run(tmp_path, name, *steps):
    return run_recipe({"name": name, "model": "toy", "steps": list(steps)}, runs_root=tmp_path, log=lambda m: None)


def questions(path=DPO_DATA):
    return [json.loads(line)["prompt"] for line in open(path)]


def write(tmp_path, name, rows):
    path = tmp_path / name
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def always_yes(tmp_path, start=0, n=48):
    """Pairs that always prefer "yes": a preference a few steps can learn, so the margin must move."""
    return write(tmp_path, f"yes{start}.jsonl",
                 [{"prompt": q, "chosen": "yes", "rejected": "no"} for q in questions()[start:start + n]])


# -- data: KTO rows in the peers' formats --------------------------------------------------------------------

def test_kto_rows_in_each_format_split_like_dpo_pairs(toy_dir):
    from transformers import AutoTokenizer

    from swiftbox import data
    from swiftbox.data.formats import kto_row

    msgs = [{"role": "user", "content": "Is 4 even?"}, {"role": "assistant", "content": "yes"}]
    rows = [kto_row({"prompt": "Is 4 even?", "completion": "yes", "label": True}),                # TRL
            kto_row({"messages": msgs, "label": "true"}),                                           # ms-swift
            kto_row({"conversations": [{"from": "human", "value": "Is 4 even?"}, {"from": "gpt", "value": "yes"}],
                     "kto_tag": 1}),                                                                # LLaMA-Factory
            kto_row({"instruction": "Is 4 even?", "output": "yes", "kto_tag": True})]              # alpaca + tag
    assert all(r == rows[0] for r in rows) and rows[0]["label"] is True
    assert kto_row({"prompt": "Is 4 even?", "completion": "no", "label": False})["label"] is False
    tok = AutoTokenizer.from_pretrained(toy_dir)
    kto, _ = data.kto_strings(rows[:1], tok, 64)
    pair, _ = data.dpo_strings([{"prompt": rows[0]["prompt"], "chosen": rows[0]["completion"],
                                 "rejected": [{"role": "assistant", "content": "no"}]}], tok, 64)
    assert kto[0]["prompt"] == pair[0]["prompt"] and kto[0]["completion"] == pair[0]["chosen"]
    assert kto[0]["prompt"].endswith("assistant\n") and kto[0]["completion"] == "yes<|im_end|>"


@pytest.mark.parametrize("row,word", [
    ({"prompt": "Is 4 even?", "completion": "yes", "label": "maybe"}, "label must be true"),
    ({"prompt": "Is 4 even?", "completion": "yes"}, "fit no KTO format"),
])
def test_bad_kto_rows_are_one_line(tmp_path, row, word):
    from swiftbox.data import load_kto

    with pytest.raises(UserError, match=word):
        load_kto(write(tmp_path, "bad.jsonl", [row]))


def test_kto_with_one_label_only_is_refused(tmp_path):
    rows = [{"prompt": q, "completion": "yes", "label": True} for q in questions()[:8]]
    with pytest.raises(UserError, match="both good"):
        run(tmp_path, "k", {"kto": {"dataset": write(tmp_path, "good.jsonl", rows), "max_steps": 1, **FAST}})
    assert not (tmp_path / "k" / "kto").exists()


@pytest.mark.parametrize("kind,settings", [
    ("kto", {"beta": float("nan")}), ("kto", {"desirable_weight": float("inf")}), ("orpo", {"beta": 1e300}),
    ("simpo", {"gamma": float("inf")}), ("simpo", {"cpo_alpha": -1}), ("rm", {"center_rewards": float("nan")}),
    ("rm", {"epochs": 1e300}),
])
def test_non_finite_or_unbounded_settings_are_bad_input(kind, settings):
    from pydantic import ValidationError

    from swiftbox.steps import STEP_TYPES

    with pytest.raises(ValidationError):
        STEP_TYPES[kind](dataset=DPO_DATA, **settings)


@pytest.mark.parametrize("kind", ["kto", "orpo", "simpo", "rm"])
def test_device_refusals_come_from_the_shared_training_check(kind):
    """QLoRA where bitsandbytes' 4-bit cannot run (a simulated NPU): exit 3 naming LoRA, before any output."""
    from swiftbox.device import NpuPlatform
    from swiftbox.errors import Unsupported
    from swiftbox.pipelines import load_pipeline
    from swiftbox.steps import STEP_TYPES

    with pytest.raises(Unsupported, match="lora"):
        load_pipeline(kind).check(STEP_TYPES[kind](dataset=DPO_DATA, method="qlora"), NpuPlatform(), "toy")


def test_kto_reference_adapter_needs_an_adapter_method():
    from swiftbox.device import CpuPlatform
    from swiftbox.pipelines import load_pipeline
    from swiftbox.steps import KtoStep

    with pytest.raises(UserError, match="kto.ref_adapter"):
        load_pipeline("kto").check(KtoStep(dataset=KTO_DATA, method="full", ref_adapter="x"), CpuPlatform(),
                                   "toy")
    with pytest.raises(UserError, match="kto.ref_adapter toy: not an adapter directory"):   # before any output
        load_pipeline("kto").check(KtoStep(dataset=KTO_DATA, ref_adapter="toy"), CpuPlatform(), "toy")


# -- short runs: the margin moves the right way ----------------------------------------------------------------

@pytest.mark.parametrize("kind,settings", [
    ("kto", {"beta": 0.5}),
    ("orpo", {"beta": 0.5}),
    ("simpo", {"beta": 2.0, "gamma": 0.5}),
])
def test_preference_steps_raise_the_reward_margin(tmp_path, kind, settings):
    data = always_yes(tmp_path)
    if kind == "kto":   # each pair as two unpaired rows: "yes" good, "no" bad
        pairs = [json.loads(line) for line in open(data)]
        data = write(tmp_path, "yes_kto.jsonl", [{"prompt": p["prompt"], "completion": c, "label": c == "yes"}
                                                 for p in pairs for c in ("yes", "no")])
    summary = run(tmp_path, kind, {kind: {"dataset": data, "max_steps": 6, "learning_rate": 5e-3, **settings,
                                          **FAST}})
    m = summary["steps"][0]["metrics"]
    assert math.isfinite(m["train_loss"]) and m["steps"] == 6
    assert m["reward_margin_last"] > m["reward_margin_first"] + 0.01, m
    if kind == "kto":
        assert m["rows"] == 96 and m["reward_margin_first"] == pytest.approx(0.0, abs=1e-6)  # policy == reference
    else:
        assert m["pairs"] == 48 and m["reward_accuracy_last"] >= m["reward_accuracy_first"]
    out = tmp_path / kind / kind
    manifest = read_manifest(out)
    assert manifest["artifact"] == "adapter" and manifest["base_model"] == "toy"
    assert (out / "adapter_model.safetensors").is_file() and (out / "loss.png").is_file()
    assert not (out / "ref").exists()


def test_reward_model_ranks_held_out_pairs_and_scores_through_the_public_api(tmp_path):
    from swiftbox.training import reward_model

    held = always_yes(tmp_path, start=200, n=40)               # questions the rm never saw
    summary = run(tmp_path, "r", {"rm": {"dataset": always_yes(tmp_path, n=64), "eval_dataset": held,
                                         "max_steps": 8, "learning_rate": 1e-3, **FAST}},
                  {"eval": {"dataset": EVAL_DATA, "limit": 4}})
    m = summary["steps"][0]["metrics"]
    assert m["eval_reward_accuracy"] >= 0.9 and m["reward_margin_last"] > m["reward_margin_first"], m
    out = tmp_path / "r" / "rm"
    manifest = read_manifest(out)
    assert manifest["artifact"] == "reward-model" and manifest["base_model"] == "toy"
    assert "score" in json.loads((out / "adapter_config.json").read_text())["modules_to_save"]
    assert summary["steps"][1]["output"] and read_manifest(tmp_path / "r" / "eval")["input"] == "toy"  # not a policy

    rm = reward_model.load(out)
    prompts = questions()[200:240]
    chosen = rm.score([rm.chat_text(p, "yes") for p in prompts])
    rejected = rm.score([rm.chat_text(p, "no") for p in prompts])
    assert sum(c > r for c, r in zip(chosen, rejected)) / len(prompts) >= 0.9
    assert reward_model.score(out, [rm.chat_text(prompts[0], "yes")]) == pytest.approx(chosen[:1], abs=1e-5)


# -- slow: the full numbers on the quickstart's task ------------------------------------------------------------

@pytest.mark.slow
def test_each_method_after_the_quickstart_sft_keeps_the_task_and_the_rm_ranks_parity(tmp_path):
    sft = run(tmp_path, "s", {"sft": {"dataset": str(ROOT / "recipes" / "data" / "parity_sft.jsonl"), "epochs": 5,
                                      "learning_rate": 3e-3, "batch_size": 16, "save_steps": 1000}},
              {"eval": {"dataset": EVAL_DATA}})
    before = sft["steps"][1]["metrics"]["accuracy"]
    assert before >= 0.95
    adapter = sft["steps"][0]["output"]
    common = {"model": adapter, "learning_rate": 1e-4, "batch_size": 8, "save_steps": 1000}
    for kind, settings in [("kto", {"dataset": KTO_DATA}), ("orpo", {"dataset": DPO_DATA}),
                           ("simpo", {"dataset": DPO_DATA})]:
        summary = run(tmp_path, kind, {kind: {**settings, **common}}, {"eval": {"dataset": EVAL_DATA}})
        m, acc = summary["steps"][0]["metrics"], summary["steps"][1]["metrics"]["accuracy"]
        assert m["reward_margin_last"] > m["reward_margin_first"], (kind, m)
        assert acc >= before - 0.05, (kind, acc)
    rm = run(tmp_path, "rm", {"rm": {"dataset": DPO_DATA, "eval_dataset": HELDOUT, **common, "learning_rate": 1e-3}})
    assert rm["steps"][0]["metrics"]["eval_reward_accuracy"] >= 0.9


def test_dpo_runs_its_policy_and_reference_forwards_unpadded_with_per_sample_attention(tmp_path, monkeypatch):
    """The DPO step on the CPU: the padded [chosen; rejected] batches reach the decoder as one packed row (batch 1)
    and attention runs per sequence (no SDPA call over the packed row's full length, none over a padded batch)."""
    import torch

    calls: list[tuple[int, int]] = []
    original = torch.nn.functional.scaled_dot_product_attention

    def spy(q, k, v, *a, **kw):
        calls.append((q.shape[0], q.shape[-2]))
        return original(q, k, v, *a, **kw)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", spy)
    pairs = [{"prompt": q, "chosen": "yes" * (1 + i % 5), "rejected": "no"} for i, q in enumerate(questions()[:8])]
    summary = run(tmp_path, "dpo-unpadded", {"dpo": {"dataset": write(tmp_path, "p.jsonl", pairs), "max_steps": 1,
                                                     **FAST}})
    assert summary["steps"][0]["metrics"]["steps"] == 1
    assert calls and {b for b, _ in calls} == {1}          # never a padded [2 x batch, longest] call
    assert len(calls) % 16 == 0 and len({n for _, n in calls}) > 1    # one call per sequence: 8 pairs, 2 sides

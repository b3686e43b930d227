"""LoRA initialisations (lora.init, lora.use_rslora): PiSSA and OLoRA adapters are saved converted to a plain LoRA
that reproduces the trained model on the untouched base (fp32 and bf16, like with like), rsLoRA is saved with the
equal plain scaling, a PiSSA sft trains, verifies and merges, EVA initialises from the data, and the
combinations that cannot work are one line, exit 2."""
from __future__ import annotations

import json

import pytest

from swiftbox import cli
from swiftbox.errors import UserError
from swiftbox.runner import run_recipe
from tests.conftest import ROOT

SFT_DATA = str(ROOT / "recipes" / "data" / "parity_sft.jsonl")
DPO_DATA = str(ROOT / "recipes" / "data" / "parity_dpo.jsonl")

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _train_a_little(tm, steps: int = 3):
    """A few optimizer steps on the adapter (next-token loss on fixed tokens): the weights move as training does."""
    import torch

    torch.manual_seed(0)
    ids = torch.randint(3, 200, (2, 24))
    params = [p for p in tm.model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=2e-2)
    tm.model.train()
    for _ in range(steps):
        opt.zero_grad()
        tm.model(input_ids=ids, labels=ids).loss.backward()
        opt.step()
    tm.model.eval()
    return ids


def _logits(model, ids):
    import torch

    with torch.no_grad():
        return model(input_ids=ids).logits.float()


def _base(dtype: str):
    from transformers import AutoModelForCausalLM

    from swiftbox.hub.resolve import resolve_model
    from swiftbox.modeling.loading import torch_dtype

    return AutoModelForCausalLM.from_pretrained(str(resolve_model("toy")), dtype=torch_dtype(dtype)).eval()


def _base_plus(adapter_dir, dtype: str):
    from peft import PeftModel

    return PeftModel.from_pretrained(_base(dtype), str(adapter_dir)).eval()


def _relative(a, b) -> float:
    return float((a - b).abs().max() / max(1.0, float(a.abs().max())))


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("init", ["pissa", "olora"])
def test_base_rewriting_init_is_saved_as_a_plain_lora_that_reproduces_the_trained_model(init, dtype, tmp_path):
    from swiftbox.device.cpu import CpuPlatform
    from swiftbox.device.dtype_policy import relative_tolerance
    from swiftbox.steps import SftStep
    from swiftbox.training import lora_init
    from swiftbox.training.model import load_for_training

    cfg = SftStep(dataset="x.jsonl", lora={"init": init, "rank": 4, "alpha": 8})
    tm = load_for_training("toy", cfg, CpuPlatform(), dtype)
    assert tm.initial_adapter and tm.model.peft_config["default"].init_lora_weights is True   # TRL's ref copy: plain
    ids = _train_a_little(tm)
    trained = _logits(tm.model, ids)

    lora_init.save(tm.model, tmp_path, None, tm.initial_adapter)
    config = json.loads((tmp_path / "adapter_config.json").read_text())
    assert config["init_lora_weights"] is True and config["r"] == 8 and config["lora_alpha"] == 16
    assert not list(tmp_path.glob(".lora-init-*")), "the initial adapter's scratch copy was left behind"
    restored = _logits(_base_plus(tmp_path, dtype), ids)
    tolerance = relative_tolerance(dtype)
    assert _relative(trained, restored) <= tolerance, (init, dtype, _relative(trained, restored))
    # the check can fail: the base alone is far off, and so is the adapter saved without PEFT's conversion
    assert _relative(trained, _logits(_base(dtype), ids)) > 4 * tolerance
    raw = tmp_path / "raw"
    tm.model.save_pretrained(str(raw))
    assert _relative(trained, _logits(_base_plus(raw, dtype), ids)) > 4 * tolerance


def test_a_trainers_copy_of_a_pissa_adapter_leaves_the_model_alone():
    """TRL's preference/GRPO trainers add a frozen "ref" copy of the adapter with the adapter's own config: with the
    config still saying pissa, PEFT would carve the residual out of the base a second time. At the start the model
    equals its base, before and after that copy; a second load starts from the same adapter (a resumed run)."""
    import torch

    from swiftbox.device.cpu import CpuPlatform
    from swiftbox.steps import DpoStep
    from swiftbox.training.model import load_for_training

    cfg = DpoStep(dataset="x.jsonl", lora={"init": "pissa", "rank": 4})
    tm = load_for_training("toy", cfg, CpuPlatform(), "float32")
    ids = torch.randint(3, 200, (1, 16))
    base = _logits(_base("float32"), ids)
    assert _relative(base, _logits(tm.model.eval(), ids)) <= 1e-4
    tm.model.add_adapter("ref", tm.model.peft_config["default"])        # what TRL does with a PeftModel
    assert _relative(base, _logits(tm.model, ids)) <= 1e-4
    again = load_for_training("toy", cfg, CpuPlatform(), "float32").initial_adapter
    assert again.keys() == tm.initial_adapter.keys()
    assert all(torch.equal(again[k], tm.initial_adapter[k]) for k in again)


def test_rslora_is_saved_with_the_equal_plain_scaling(tmp_path):
    from swiftbox.device.cpu import CpuPlatform
    from swiftbox.steps import SftStep
    from swiftbox.training import lora_init
    from swiftbox.training.model import load_for_training

    cfg = SftStep(dataset="x.jsonl", lora={"use_rslora": True, "rank": 16, "alpha": 8})
    tm = load_for_training("toy", cfg, CpuPlatform(), "float32")
    assert tm.model.peft_config["default"].use_rslora and tm.initial_adapter is None
    ids = _train_a_little(tm)
    trained = _logits(tm.model, ids)
    lora_init.save(tm.model, tmp_path, None, None)
    config = json.loads((tmp_path / "adapter_config.json").read_text())
    assert config["use_rslora"] is False and config["lora_alpha"] == pytest.approx(8 * 4) and config["r"] == 16
    assert _relative(trained, _logits(_base_plus(tmp_path, "float32"), ids)) <= 1e-4


def test_rslora_patterns_keep_each_modules_scaling(tmp_path):
    """Per-module ranks (EVA's rank_pattern) and alphas (alpha_pattern) keep alpha_m / sqrt(r_m) as plain scaling."""
    import math

    from swiftbox.training.lora_init import plain_scaling

    (tmp_path / "adapter_config.json").write_text(json.dumps(
        {"use_rslora": True, "r": 8, "lora_alpha": 16, "rank_pattern": {"q_proj": 4}, "alpha_pattern": {"v_proj": 32}}))
    plain_scaling(tmp_path)
    c = json.loads((tmp_path / "adapter_config.json").read_text())
    scale = {m: c["alpha_pattern"].get(m, c["lora_alpha"]) / c["rank_pattern"].get(m, c["r"])
             for m in ("q_proj", "v_proj", "o_proj")}
    assert c["use_rslora"] is False
    assert scale == pytest.approx({"q_proj": 16 / 2, "v_proj": 32 / math.sqrt(8), "o_proj": 16 / math.sqrt(8)})


def test_pissa_sft_trains_verifies_and_merges(tmp_path):
    """End to end through the runner: sft with PiSSA, the saved adapter passes verify's files section (a plain delta),
    merge's parity check holds, and a later step cannot re-initialise the adapter it continues."""
    from swiftbox.artifacts import read_manifest
    from swiftbox.verify.files import check_adapter
    from swiftbox.verify.report import Report

    sft = {"dataset": SFT_DATA + "#16", "max_steps": 2, "learning_rate": 3e-3, "batch_size": 8, "save_steps": 100,
           "lora": {"init": "pissa", "rank": 4, "alpha": 8}}
    summary = run_recipe({"name": "p", "model": "toy", "steps": [{"sft": sft}, {"merge": {}}]}, runs_root=tmp_path,
                         log=lambda m: None)
    out = tmp_path / "p" / "sft"
    assert read_manifest(out)["config"]["lora"]["init"] == "pissa"
    assert json.loads((out / "adapter_config.json").read_text())["init_lora_weights"] is True
    report = Report(str(out), "builtin")
    assert check_adapter(report, "sft", out) and report.ok, report.as_dict()
    merge = summary["steps"][1]["metrics"]
    assert merge["relative_logit_diff"] < 1e-4 and merge["adapter_effect_max_abs"] > 1e-3
    with pytest.raises(UserError, match="lora.init olora: the input .* is an adapter"):
        run_recipe({"name": "q", "model": str(out), "steps": [
            {"dpo": {"dataset": DPO_DATA + "#8", "max_steps": 1, "lora": {"init": "olora"}}}]},
            runs_root=tmp_path, log=lambda m: None)


def test_eva_initialises_from_the_data_and_trains(tmp_path):
    """EVA (PEFT's SVD of each target's inputs on the training rows) on CPU: ranks redistributed, B still zero at
    the start, the adapter trains and saves with init eva (a plain delta)."""
    sft = {"dataset": SFT_DATA + "#32", "max_steps": 2, "batch_size": 8, "save_steps": 100,
           "lora": {"init": "eva", "rank": 4, "alpha": 8}}
    summary = run_recipe({"name": "e", "model": "toy", "steps": [{"sft": sft}]}, runs_root=tmp_path,
                         log=lambda m: None)
    out = tmp_path / "e" / "sft"
    config = json.loads((out / "adapter_config.json").read_text())
    assert config["init_lora_weights"] == "eva" and config["rank_pattern"], config
    assert summary["steps"][0]["metrics"]["steps"] == 2


BAD = [
    (["sft", "toy", "--dataset", SFT_DATA, "--lora.init", "svd"], "lora.init"),
    (["sft", "toy", "--dataset", SFT_DATA, "--lora.init", "pissa", "--method", "qlora"], "needs method lora"),
    (["sft", "toy", "--dataset", SFT_DATA, "--lora.init", "olora", "--method", "dora"], "needs method lora"),
    (["dpo", "toy", "--dataset", DPO_DATA, "--lora.init", "eva"], "available in sft, pt, gkd"),
    (["rm", "toy", "--dataset", DPO_DATA, "--lora.init", "pissa"], "score head"),
    (["sft", "toy", "--dataset", SFT_DATA, "--lora.init", "pissa", "--deepspeed", "zero2"], "plain DDP"),
]


@pytest.mark.parametrize("argv,word", BAD, ids=[" ".join(a[:1] + a[-2:]) for a, _ in BAD])
def test_impossible_combinations_are_one_line_exit_2(argv, word, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rc = cli.main(argv)
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1 and word in err, err
    assert not list(tmp_path.rglob("*.partial"))


def test_pissa_niter_is_accepted():
    from swiftbox.steps import SftStep

    assert SftStep(dataset="x", lora={"init": "pissa_niter_4"}).lora.rewrites_base()

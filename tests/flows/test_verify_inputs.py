"""Every `verify` input ends as a verdict, never a traceback (issue 32, class 5): hostile adapter configs and weights
fail a named check; an adapter trained with an initialisation that rewrote the base (PiSSA, OLoRA, CorDA, LoftQ,
LoRA-GA) fails until PEFT converts it to a plain LoRA; NaN weights fail; library banners go to the log, not the
screen. Before issue 32 most of these printed a traceback, and the PiSSA/OLoRA, NaN and layer_replication
adapters passed."""
from __future__ import annotations

import json
import math

import pytest

from swiftbox import cli
from tests.conftest import run_cli
from tests.support.adapters import shared_adapter

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def hostile(tmp_path, name: str, *, config=None, raw_config=None, weights=None):
    """A copy of the shared LoRA adapter with its config or weights replaced."""
    import shutil

    src = shared_adapter("lora")
    out = tmp_path / name
    shutil.copytree(src, out)
    data = json.loads((src / "adapter_config.json").read_text())
    if raw_config is not None:
        (out / "adapter_config.json").write_text(raw_config)
    elif config is not None:
        (out / "adapter_config.json").write_text(json.dumps({**data, **config}))
    if weights is not None:
        from safetensors.torch import load_file, save_file

        tensors = load_file(str(src / "adapter_model.safetensors"))
        save_file({k: weights(k, v).contiguous() for k, v in tensors.items()}, str(out / "adapter_model.safetensors"))
    return out


CONFIGS = {   # name -> (adapter_config.json change, a word the failing check names)
    "config not JSON": ({"raw_config": "{not json"}, "adapter_config.json"),
    "config a list": ({"raw_config": "[]"}, "adapter_config.json"),
    "config nested 100000 deep": ({"raw_config": "[" * 100_000 + "]" * 100_000}, "adapter_config.json"),
    "unknown peft_type": ({"config": {"peft_type": "NOPE"}}, "peft_type"),
    "rank 0": ({"config": {"r": 0}}, "r"),
    "rank a string": ({"config": {"r": "eight"}}, "r"),
    "alpha a string": ({"config": {"lora_alpha": "x"}}, "lora_alpha"),
    "targets absent": ({"config": {"target_modules": ["no_such_proj"]}}, "no_such_proj"),
    "rank unlike the weights": ({"config": {"r": 16}}, "does not load"),
    "modules_to_save without weights": ({"config": {"modules_to_save": ["lm_head"]}}, "does not load"),
    "layer_replication": ({"config": {"layer_replication": [[0, 2], [1, 3]]}}, "layer_replication"),
    "pissa": ({"config": {"init_lora_weights": "pissa"}}, "path_initial_model_for_weight_conversion"),
    "pissa_niter_4": ({"config": {"init_lora_weights": "pissa_niter_4"}}, "path_initial_model_for_weight_conversion"),
    "olora": ({"config": {"init_lora_weights": "olora"}}, "path_initial_model_for_weight_conversion"),
    "corda": ({"config": {"init_lora_weights": "corda"}}, "init_lora_weights"),
    "loftq": ({"config": {"init_lora_weights": "loftq"}}, "init_lora_weights"),
    "lora_ga": ({"config": {"init_lora_weights": "lora_ga"}}, "init_lora_weights"),
    "NaN weights": ({"weights": lambda k, v: v.fill_(math.nan)}, "finite"),
    "inf weights": ({"weights": lambda k, v: v.fill_(math.inf) if "lora_B" in k else v}, "finite"),
    "weights narrower than the rank": ({"weights": lambda k, v: v[..., :2] if "lora_A" in k else v}, "does not load"),
}


@pytest.mark.parametrize("case", list(CONFIGS))
def test_a_hostile_adapter_fails_verify_with_one_line_no_traceback(case, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    change, word = CONFIGS[case]
    adapter = hostile(tmp_path, "adapter", **change)
    rc = cli.main(["verify", str(adapter), "--no-serve"])
    out, err = capsys.readouterr()
    assert rc == 1, out + err
    fails = [line for line in out.splitlines() if line.startswith("FAIL ")]
    assert fails and any(word in line for line in fails), out
    assert "Traceback" not in out + err, err


@pytest.mark.slow   # ~33 s; trains and converts a PiSSA adapter
def test_pissa_converted_to_a_plain_lora_passes(tmp_path):
    """PEFT's own conversion (save_pretrained(path_initial_model_for_weight_conversion=...)) gives an adapter whose
    delta is against the untouched base: it passes, and base+adapter equals what was trained on the rewritten base."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from swiftbox.catalog.toy import toy_path
    from swiftbox.verify import verify

    torch.manual_seed(0)
    base = AutoModelForCausalLM.from_pretrained(toy_path(0), dtype=torch.float32)
    model = get_peft_model(base, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"],
                                            init_lora_weights="pissa", task_type="CAUSAL_LM"))
    model.peft_config["default"].base_model_name_or_path = str(toy_path(0))
    model.save_pretrained(tmp_path / "init")                          # the adapter as initialised
    with torch.no_grad():                                             # "training": move the adapter a little
        for name, param in model.named_parameters():
            if "lora_" in name:
                param.add_(0.01 * torch.randn_like(param))
    model.save_pretrained(tmp_path / "raw")                           # unconverted: a delta on the rewritten base
    model.save_pretrained(tmp_path / "plain", path_initial_model_for_weight_conversion=str(tmp_path / "init"))
    raw = verify(str(tmp_path / "raw"), serve=False)
    assert not raw.ok and any("pissa" in c.detail for c in raw.failures)
    plain = verify(str(tmp_path / "plain"), serve=False)
    assert plain.ok, [c.line() for c in plain.failures]


@pytest.mark.slow
def test_verify_library_banners_go_to_the_log_not_the_screen(tmp_path):
    """In a fresh process (import-time noise included): verify prints its table and verdict, nothing else."""
    res = run_cli("verify", str(shared_adapter("lora")), "--no-serve", cwd=tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    assert res.stderr.strip() == "", res.stderr
    assert res.stdout.strip().splitlines()[-1].startswith("verdict: ok")

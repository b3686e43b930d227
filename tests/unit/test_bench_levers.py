"""`bench sft-levers`: the pure parts (each lever alone, the ratio and loss-agreement rule, argument handling).
Nothing here trains; the bench itself runs on the real model (docs/benchmarks.md)."""
from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import ROOT

sys.path.insert(0, str(ROOT / "bench"))
import sft_levers as levers  # noqa: E402  (bench/sft_levers.py)


def test_each_lever_changes_one_setting():
    default = levers.settings("default")
    assert default == {"attention": "auto", "dtype": "float32", "packing": None, "label_only": True,
                       "checkpointing": False, "threads": None, "optim": None, "compile": False,
                       "malloc": "auto", "tunables": "", "fused_lora": True,
                       "folded_head": True}
    for lever in levers.LEVERS:
        changed = {k for k, v in levers.settings(lever).items() if default[k] != v}
        assert len(changed) == 1, (lever, changed)


def run(side, rnd, tps, losses, dtype="float32"):
    return {"side": side, "round": rnd, "tokens_per_s": tps, "losses": losses, "attn_implementation": "sdpa",
            "dtype": dtype, "batching": "packing", "label_positions_only": True}


def test_a_lever_is_kept_only_when_it_wins_every_round_without_changing_the_loss():
    runs = [run("default", 0, 100.0, [2.0, 1.9]), run("fast", 0, 120.0, [2.0, 1.9]),
            run("drift", 0, 130.0, [2.0, 1.8]), run("slow", 0, 90.0, [2.0, 1.9]),
            run("default", 1, 100.0, [2.0, 1.9]), run("fast", 1, 110.0, [2.0, 1.9000001]),
            run("drift", 1, 130.0, [2.0, 1.8]), run("slow", 1, 105.0, [2.0, 1.9])]
    out = levers.summarise(runs, ["fast", "drift", "slow"])["levers"]
    assert out["fast"]["kept"] and out["fast"]["ratio"] == 1.15 and out["fast"]["ratio_range"] == [1.1, 1.2]
    assert not out["drift"]["kept"] and not out["drift"]["same_loss"]          # faster, but a different loss
    assert out["drift"]["loss_max_rel_diff"] == pytest.approx(0.1 / 1.9, rel=1e-2)
    assert not out["slow"]["kept"]                                               # one round slower
    one_round = levers.summarise(runs[:4], ["fast"])["levers"]["fast"]
    assert one_round["ratio"] == 1.2 and not one_round["kept"]                   # one round decides nothing


def test_loss_curves_of_different_length_do_not_agree():
    assert levers.loss_agreement([1.0], [1.0, 0.9]) is None
    assert levers.loss_agreement([], []) is None
    assert levers.loss_agreement([1.0, 0.9], [1.0, 0.9]) == 0.0


@pytest.mark.parametrize("argv, message", [
    (["--levers", "dense_mask,flash"], "unknown lever flash"),
    (["--rows", "16"], "--rows must be at least 24"),
    (["--rounds", "0"], "--rounds at least 1"),
    (["--attention", "8,0"], "--attention takes sample counts >= 1"),
])
def test_bad_arguments_exit_2_with_one_line(argv, message):
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "sft_levers.py"), *argv], capture_output=True,
                          text=True, cwd=ROOT, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}, timeout=120)
    assert proc.returncode == 2
    assert message in proc.stderr and len(proc.stderr.strip().splitlines()) == 1

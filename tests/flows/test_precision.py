"""`precision A B`: a planted fault (one layer's weights perturbed) is named first, not a later symptom;
identical sides pass; fp32 vs bf16 stays above the default threshold; bad sides are exit 2."""
from __future__ import annotations

import csv
import json

import pytest

from swiftbox.diagnose.precision import Side, parse_side, precision, write_outputs
from swiftbox.errors import UserError
from tests.conftest import run_cli


@pytest.fixture(scope="module")
def planted(tmp_path_factory, toy_dir):
    """A copy of toy with one Linear in the middle of the execution order perturbed; returns (dir, name)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(toy_dir)
    order = []
    hooks = [m.register_forward_hook(lambda mod, a, o, n=n: order.append(n))
             for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)]
    with torch.no_grad():
        model(input_ids=torch.tensor([[1, 2, 3]]))
    for h in hooks:
        h.remove()
    name = order[len(order) // 2]
    weight = model.get_submodule(name).weight
    with torch.no_grad():
        weight += torch.randn(weight.shape, generator=torch.Generator().manual_seed(0)) * weight.std() * 2
    out = tmp_path_factory.mktemp("planted") / "model"
    model.save_pretrained(out)
    AutoTokenizer.from_pretrained(toy_dir).save_pretrained(out)
    return out, name, order


def test_planted_fault_is_named_first(planted, tmp_path, one_torch_thread):
    model_dir, name, linears = planted
    assert linears.index(name) > 0   # earlier modules exist that must not be blamed
    report = precision("toy@cpu:float32", f"{model_dir}@cpu:float32")
    assert report["first_culprit"] == name
    write_outputs(report, tmp_path / "r")
    rows = report["rows"]
    at = next(i for i, r in enumerate(rows) if r["module"] == name)
    assert all(r["cosine"] > 0.999999 and not r["below"] for r in rows[:at])   # upstream identical
    assert rows[at]["cosine"] < 0.99 and any(r["max_abs_err"] > 0 for r in rows[at + 1:])   # symptoms downstream
    with open(tmp_path / "r" / "precision.csv") as fh:
        assert len(list(csv.DictReader(fh))) == len(rows)
    assert (tmp_path / "r" / "precision.png").stat().st_size > 1000


@pytest.mark.slow
def test_identical_sides_pass_and_bf16_stays_close(tmp_path):
    out = run_cli("precision", "--a", "toy@cpu:float32", "--b", "toy@cpu:float32", "--json",
                  "--out", str(tmp_path / "same"))
    assert out.returncode == 0, out.stderr[-2000:]
    rows = json.loads((tmp_path / "same" / "precision.json").read_text())["rows"]
    assert rows and all(r["max_abs_err"] == 0 for r in rows)
    out = run_cli("precision", "toy@cpu:float32", "toy@cpu:bf16", "--grads", "--json", "--out", str(tmp_path / "bf16"))
    assert out.returncode == 0, out.stderr[-2000:]
    report = json.loads((tmp_path / "bf16" / "precision.json").read_text())
    assert report["b"].endswith(":bfloat16") and report["gradients"]
    assert 0 < max(r["max_rel_err"] for r in report["rows"]) < 0.1


def test_sides_parse_and_bad_input_is_exit_2(tmp_path):
    assert parse_side("hf:Qwen/Qwen2.5-0.5B@cpu:bf16") == Side("hf:Qwen/Qwen2.5-0.5B", "cpu", "bfloat16")
    assert parse_side("runs/q/merge") == Side("runs/q/merge", None, "auto")
    with pytest.raises(UserError):
        parse_side("toy@cpu:int3")
    for args in (("toy@cpu:int3", "toy"), ("toy",), ("toy", str(tmp_path / "missing") + "@cpu")):
        out = run_cli("precision", *args)
        assert out.returncode == 2 and "Traceback" not in out.stderr, (args, out.stderr[-1500:])

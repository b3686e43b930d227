"""`compare A B`: two SFT runs that differ only in the seed report exactly the seed (exit 1); a run against
itself passes (exit 0); bad input is exit 2; manifests record data / weight hashes, seeds and env."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from swiftbox.diagnose.compare import checks
from swiftbox.runner import run_recipe
from tests.conftest import run_cli

pytestmark = pytest.mark.usefixtures("one_torch_thread")
STEP = {"dataset": "recipes/data/parity_sft.jsonl#16", "max_steps": 1, "batch_size": 8, "save_steps": 100}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("compare")
    out = {}
    for name, seed in (("a", 1), ("b", 1), ("c", 2)):
        summary = run_recipe({"name": name, "model": "toy", "steps": [{"sft": {**STEP, "seed": seed}}]},
                             runs_root=root, log=lambda m: None)
        out[name] = Path(summary["steps"][0]["output"])
    return out


def test_manifest_records_what_the_run_started_from(runs):
    manifest = json.loads((runs["a"] / "swiftbox.json").read_text())
    data = manifest["data"]["dataset"][0]
    assert data["rows"] > 16 and data["sample"] == 16 and len(data["sha256"]) == 64 and "messages" in data["columns"]
    weights = manifest["initial_weights"]
    assert weights["ref"] == "toy" and len(weights["sha256"]) == 64 and "model.safetensors" in weights["files"]
    assert manifest["seeds"] == {"seed": 1} and isinstance(manifest["env"], dict) and manifest["threads"] == 1


def test_runs_differing_only_in_seed_report_exactly_the_seed(runs):
    out = run_cli("compare", str(runs["a"]), str(runs["c"]), "--json")
    assert out.returncode == 1, out.stderr
    report = json.loads(out.stdout)
    assert [(d["section"], d["item"], d["a"], d["b"]) for d in report["differ"]] == [("seeds", "seed", 1, 2)]
    assert report["checks"] > 20
    table = run_cli("compare", str(runs["a"]), str(runs["c"]))
    assert table.returncode == 1 and "seed" in table.stdout and "DIFF" in table.stdout


def test_identical_runs_pass_and_run_dirs_compare_step_by_step(runs):
    out = run_cli("compare", str(runs["a"]), str(runs["b"]), "--json")
    assert out.returncode == 0, out.stdout + out.stderr
    assert json.loads(out.stdout)["differ"] == []
    out = run_cli("compare", str(runs["a"].parent), str(runs["c"].parent), "--json")   # runs/<name> dirs
    assert out.returncode == 1 and [d["item"] for d in json.loads(out.stdout)["differ"]] == ["sft: seed"]


def test_a_changed_dataset_and_weights_are_named(runs, tmp_path):
    a = json.loads((runs["a"] / "swiftbox.json").read_text())
    b = json.loads(json.dumps(a))
    b["data"]["dataset"][0]["sha256"] = "0" * 64
    b["initial_weights"]["sha256"] = "1" * 64
    b["env"]["ASCEND_RT_VISIBLE_DEVICES"] = "0,1"
    b["versions"]["torch"] = "0.0"
    differ = {(c.section, c.item) for c in checks(a, b) if not c.ok}
    assert differ == {("dataset", "dataset[0].sha256"), ("initial weights", "sha256"),
                      ("environment", "env ASCEND_RT_VISIBLE_DEVICES"), ("versions", "torch")}


def test_bad_input_is_exit_2(runs, tmp_path):
    for args in ((str(tmp_path / "nope"), str(runs["a"])), (str(tmp_path), str(runs["a"]))):
        out = run_cli("compare", *args)
        assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1, out.stderr
    broken = tmp_path / "broken"
    shutil.copytree(runs["a"], broken)
    (broken / "swiftbox.json").write_text("{not json")
    out = run_cli("compare", str(broken), str(runs["a"]))
    assert out.returncode == 2 and "manifest" in out.stderr

"""report_to: the tracker names are transformers' integrations, a tracker whose package is missing is exit 3 naming
what to install, the trainer gets the list (TensorBoard stays swiftbox's own writer), wandb / swanlab default to
offline, and a short sft with report_to tensorboard leaves the loss in its TensorBoard events."""
from __future__ import annotations

import importlib.util

import pytest

from swiftbox import cli
from swiftbox.runner import run_recipe
from tests.conftest import ROOT

SFT_DATA = str(ROOT / "recipes" / "data" / "parity_sft.jsonl")
MODULES = {"wandb": "wandb", "swanlab": "swanlab", "mlflow": "mlflow", "trackio": "trackio", "clearml": "clearml"}

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_tracker_names_are_transformers_integrations():
    from transformers.integrations.integration_utils import INTEGRATION_TO_CALLBACK

    from swiftbox.steps import REPORT_TO
    from swiftbox.training.tracking import PACKAGES

    assert set(REPORT_TO) == set(INTEGRATION_TO_CALLBACK) == set(PACKAGES)


def test_report_to_forms():
    from swiftbox.steps import SftStep

    assert SftStep(dataset="x").report_to == []
    assert SftStep(dataset="x", report_to="none").report_to == []
    assert SftStep(dataset="x", report_to="wandb, mlflow,wandb").report_to == ["wandb", "mlflow"]
    assert SftStep(dataset="x", report_to=["tensorboard"]).report_to == ["tensorboard"]


def test_trainer_arguments_and_offline_defaults(tmp_path, monkeypatch):
    import os
    import types

    from swiftbox.device.cpu import CpuPlatform
    from swiftbox.steps import SftStep
    from swiftbox.training.arguments import common_args

    monkeypatch.setattr(os, "environ", {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")})
    monkeypatch.setenv("SWANLAB_MODE", "cloud")                 # the user's own choice stays
    ctx = types.SimpleNamespace(platform=CpuPlatform(), recipe="r", kind="sft")
    args = common_args(SftStep(dataset="x", report_to=["tensorboard", "wandb", "swanlab"]), ctx, "float32",
                       tmp_path / "checkpoints")
    assert args["report_to"] == ["wandb", "swanlab"] and args["run_name"] == "r/sft"
    assert os.environ["WANDB_MODE"] == "offline" and os.environ["WANDB_DIR"] == str(tmp_path)
    assert os.environ["SWANLAB_MODE"] == "cloud"
    common_args(SftStep(dataset="x", report_to="wandb"), ctx, "float32", tmp_path / "next" / "checkpoints")
    assert os.environ["WANDB_DIR"] == str(tmp_path / "next")     # a later step writes into its own output
    assert common_args(SftStep(dataset="x"), ctx, "float32", tmp_path / "checkpoints")["report_to"] == "none"


MISSING = [name for name, module in MODULES.items() if importlib.util.find_spec(module) is None]


@pytest.mark.parametrize("tracker", MISSING or [pytest.param("x", marks=pytest.mark.skip("every tracker installed"))])
def test_missing_tracker_is_exit_3_naming_the_package(tracker, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rc = cli.main(["sft", "toy", "--dataset", SFT_DATA, "--max-steps", "1", "--report-to", tracker])
    err = capsys.readouterr().err.strip()
    assert rc == 3 and len(err.splitlines()) == 1, err
    assert f"report_to {tracker}" in err and "pip install" in err, err
    assert not list(tmp_path.rglob("*.partial")) and not list(tmp_path.rglob("swiftbox.json"))


def test_unknown_tracker_is_exit_2(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rc = cli.main(["sft", "toy", "--dataset", SFT_DATA, "--report-to", "tensorbored"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1 and "tensorbored" in err, err


def test_tensorboard_report_holds_the_loss(tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    sft = {"dataset": SFT_DATA + "#16", "max_steps": 2, "batch_size": 8, "logging_steps": 1, "save_steps": 100,
           "report_to": "tensorboard"}
    run_recipe({"name": "t", "model": "toy", "steps": [{"sft": sft}]}, runs_root=tmp_path, log=lambda m: None)
    events = list((tmp_path / "t" / "sft" / "tensorboard").rglob("events.out.tfevents.*"))
    assert len(events) == 1, events                              # one writer, not two
    acc = EventAccumulator(str(events[0].parent))
    acc.Reload()
    assert "train/loss" in acc.Tags()["scalars"] and len(acc.Scalars("train/loss")) == 2

"""`report_to`: experiment trackers through transformers' own integrations (TrainingArguments.report_to).

swiftbox adds nothing of its own on the way: `check` refuses a tracker whose package is not installed (exit 3, naming
what to pip install) before any output exists, `offline_defaults` sets the offline mode of the trackers that have one
(wandb, swanlab) where the environment does not choose, and `report_to` is the list the trainer gets. TensorBoard is
written by every training step anyway (training/callbacks.py, <out>/tensorboard), so `tensorboard` adds no second
writer.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Union

from swiftbox.errors import Unsupported

# what to install for each integration transformers reports as unavailable
PACKAGES = {"tensorboard": "tensorboard", "wandb": "wandb", "swanlab": "swanlab", "mlflow": "mlflow",
            "trackio": "trackio", "comet_ml": "comet-ml", "neptune": "neptune", "clearml": "clearml",
            "dvclive": "dvclive", "azure_ml": "azureml-core", "dagshub": "dagshub and mlflow",
            "codecarbon": "codecarbon", "flyte": "flytekit and flytekitplugins-deck-standard",
            "kubeflow": "kubeflow (and run inside a Kubeflow trainer job: KUBEFLOW_TRAINER_SERVER_URL)"}


def check(cfg: Any, platform: Any) -> None:
    """Exit 3 for a tracker transformers cannot use here (its package missing), naming what to install."""
    if not cfg.report_to:
        return
    from transformers.integrations import get_available_reporting_integrations

    available = set(get_available_reporting_integrations())
    for name in cfg.report_to:
        if name not in available:
            raise Unsupported(f"report_to {name}: transformers finds no {name} on {platform.name}; pip install "
                              f"{PACKAGES.get(name, name)} (into swiftbox's environment), or drop {name} from "
                              "report_to")


_SET: dict[str, str] = {}        # the variables swiftbox set itself (a later step replaces them; a user's stay)


def offline_defaults(cfg: Any, work_dir: Path) -> None:
    """wandb and swanlab log offline into the step's output unless their environment says otherwise (`wandb sync
    <out>/wandb/offline-run-*`, `swanlab sync <out>/swanlog/...` upload them later)."""
    wanted: dict[str, str] = {}
    if "wandb" in cfg.report_to:
        wanted.update(WANDB_MODE="offline", WANDB_DIR=str(work_dir))
    if "swanlab" in cfg.report_to:
        wanted.update(SWANLAB_MODE="offline", SWANLAB_LOG_DIR=str(work_dir / "swanlog"))
    for key, value in wanted.items():
        if key not in os.environ or os.environ[key] == _SET.get(key):
            os.environ[key] = _SET[key] = value


def report_to(cfg: Any) -> Union[str, list[str]]:
    """TrainingArguments.report_to: the trackers but TensorBoard (written by swiftbox's own callback)."""
    names = [n for n in cfg.report_to if n != "tensorboard"]
    return names or "none"

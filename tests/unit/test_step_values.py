"""Closed step values are checked by the schema: DPO's loss types are a Literal list (swiftbox/steps.py DpoLoss),
refused at the recipe / flag / API boundary with the list, and the list is TRL's own."""
from __future__ import annotations

import dataclasses
import re

import pytest
from pydantic import ValidationError

from swiftbox.steps import DPO_LOSSES, DpoStep


def test_an_unknown_dpo_loss_is_refused_by_the_schema_naming_the_field_and_the_list():
    with pytest.raises(ValidationError) as err:
        DpoStep(dataset="d.jsonl", loss_type="sigmoid,sigmund")
    text = str(err.value)
    assert "loss_type" in text and "'sigmund'" in text and "apo_zero" in text
    with pytest.raises(ValidationError, match="empty value"):
        DpoStep(dataset="d.jsonl", loss_type=" , ")


def test_known_losses_and_their_combinations_pass():
    assert DpoStep(dataset="d.jsonl").loss_type == "sigmoid"
    assert DpoStep(dataset="d.jsonl", loss_type="sigmoid, sft").loss_type == "sigmoid,sft"


def test_the_dpo_losses_are_the_ones_trl_documents():
    from trl import DPOConfig

    field = {f.name: f for f in dataclasses.fields(DPOConfig)}["loss_type"]
    documented = set(re.findall(r"`'(\w+)'`", field.metadata["help"]))
    assert documented, "TRL's DPOConfig.loss_type help no longer lists its values: re-read it"
    assert set(DPO_LOSSES) == documented

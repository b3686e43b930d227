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


def test_the_verify_command_takes_the_verify_steps_settings():
    """`swiftbox verify` reads its flags off VerifyStep: every setting a recipe's verify step has is a flag, with the
    schema's choices and defaults (no hand-written list beside the schema)."""
    from swiftbox.steps import StepBase, VerifyStep
    from swiftbox.verify import verify_parser

    parser = verify_parser()
    dests = {a.dest: a for a in parser._actions}
    own = set(VerifyStep.model_fields) - set(StepBase.model_fields)
    assert own <= set(dests)
    defaults = vars(parser.parse_args([]))
    assert all(defaults[name] == VerifyStep.model_fields[name].default for name in own)
    assert tuple(dests["engine"].choices) == ("builtin", "vllm") and "bfloat16" in dests["dtype"].choices
    assert vars(parser.parse_args(["--no-serve"]))["serve"] is False

"""The preference trainers train exactly the template's replies (issue 34, the remnants): built on the toy with the
real Gemma-2, Phi-3.5 and GLM-4.6 templates (their end of turn is not the tokenizer's eos), the token columns
DPOTrainer and KTOTrainer train on are the generation prompt and the replies as the template renders them - no eos
appended after `<end_of_turn>` / `<|end|>` / GLM's closing, no second BOS - and without swiftbox's columns TRL
would have appended one (so the test fails if TRL stops doing so and the patch can go, or if the patch breaks).
ORPO and SimPO (CPO) tokenize the split strings themselves; under compat.trl_experimental_as_given their chosen
labels are the reply's tokens exactly."""
from __future__ import annotations

import contextlib

import pytest

from swiftbox import data
from tests.support.templates import TEMPLATES, TURNS

pytestmark = pytest.mark.usefixtures("one_torch_thread")

CASES = {"google-gemma-2-2b-it": ("Bye.<end_of_turn>", "No way.<end_of_turn>"),
         "microsoft-Phi-3.5-mini-instruct": ("Bye.<|end|>", "No way.<|end|>"),
         "zai-org-GLM-4.6": ("\n<think></think>\nBye.", "\n<think></think>\nNo way.")}


def rows():
    return [{"prompt": TURNS[:3], "chosen": [{"role": "assistant", "content": "Bye."}],
             "rejected": [{"role": "assistant", "content": "No way."}]}] * 2


def trainer(kind, toy_parts, tmp_path, split):
    import copy

    from datasets import Dataset
    from peft import LoraConfig, get_peft_model

    from swiftbox.compat import trl_pretokenized
    from swiftbox.training.preference import exact_ids

    model, tok = toy_parts

    def policy():
        return get_peft_model(copy.deepcopy(model), LoraConfig(r=4, target_modules=["q_proj"]))

    common = {"output_dir": str(tmp_path), "per_device_train_batch_size": 2, "report_to": "none", "max_length": 256,
              "use_cpu": True}
    if kind == "dpo":
        from trl import DPOConfig as Config
        from trl import DPOTrainer as Trainer
        sides: tuple[str, ...] = ("chosen", "rejected")
        examples = split
    else:
        from trl import KTOConfig as Config
        from trl import KTOTrainer as Trainer
        sides = ("completion",)
        examples = [{"prompt": e["prompt"], "completion": e[side], "label": side == "chosen"}
                    for e in split for side in ("chosen", "rejected")]
    dataset = Dataset.from_list(examples)
    if kind == "kto":
        common["desirable_weight"] = 1.0
    built = {}
    with trl_pretokenized(Trainer):
        built["ours"] = Trainer(model=policy(), args=Config(**common), processing_class=tok,
                                train_dataset=exact_ids(dataset, tok, sides))
    built["trl"] = Trainer(model=policy(), args=Config(**common), processing_class=tok, train_dataset=dataset)
    return built, sides, tok


@pytest.mark.parametrize("kind", ["dpo", "kto"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_trainer_columns_are_exactly_prompt_and_replies(kind, name, toy_parts, tmp_path):
    model, tok = toy_parts
    tok.chat_template = (TEMPLATES / f"{name}.jinja").read_text(encoding="utf-8")
    try:
        split, counts = data.dpo_strings(rows(), tok, 256)
        assert counts.dropped == 0 and [split[0]["chosen"], split[0]["rejected"]] == list(CASES[name])
        built, sides, tok = trainer(kind, toy_parts, tmp_path, split)
        ours, theirs = built["ours"].train_dataset[0], built["trl"].train_dataset[0]
        assert tok.decode(ours["prompt_ids"]) == split[0]["prompt"]
        side = sides[0]
        assert tok.decode(ours[f"{side}_ids"]) == CASES[name][0]
        assert theirs[f"{side}_ids"][-1] == tok.eos_token_id != ours[f"{side}_ids"][-1]  # TRL alone appends eos
        if kind == "kto":   # the KL term's mismatched completions: rotated by one within the batch, as TRL does
            assert built["ours"].train_dataset[0]["KL_completion_ids"] == built["ours"].train_dataset[1][
                "completion_ids"]
    finally:
        tok.chat_template = None


@pytest.mark.parametrize("kind", ["orpo", "cpo"])
def test_orpo_and_simpo_labels_are_exactly_the_reply(kind, toy_parts, tmp_path):
    import copy

    from datasets import Dataset
    from peft import LoraConfig, get_peft_model

    from swiftbox.compat import trl_experimental, trl_experimental_as_given

    model, tok = toy_parts
    tok.chat_template = (TEMPLATES / "google-gemma-2-2b-it.jinja").read_text(encoding="utf-8")
    try:
        split, _ = data.dpo_strings(rows(), tok, 256)
        config_cls, trainer_cls = trl_experimental(kind)
        config = config_cls(output_dir=str(tmp_path), per_device_train_batch_size=2, report_to="none", max_length=256,
                            max_completion_length=256, use_cpu=True)
        built = {}
        for label, ctx in (("ours", trl_experimental_as_given(kind)), ("trl", contextlib.nullcontext())):
            with ctx:
                policy = get_peft_model(copy.deepcopy(model), LoraConfig(r=4, target_modules=["q_proj"]))
                built[label] = trainer_cls(model=policy, args=config, processing_class=tok,
                                           train_dataset=Dataset.from_list(split)).train_dataset[0]
        ours = [t for t in built["ours"]["chosen_labels"] if t != -100]
        assert tok.decode(ours) == CASES["google-gemma-2-2b-it"][0]
        theirs = [t for t in built["trl"]["chosen_labels"] if t != -100]
        assert theirs == ours + [tok.eos_token_id]               # without the patch TRL appends eos
    finally:
        tok.chat_template = None

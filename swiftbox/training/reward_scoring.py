"""A reward model as a GRPO reward: `model:DIR` scores each prompt + completion with a sequence-classification
model (the rm step's output: a full model, or an adapter with its score head). Loaded once, on first use, onto
this process's device; scores are the head's single logit."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

from swiftbox.errors import UserError

BATCH = 16


def load_reward_model(path: str, platform):
    """(model, tokenizer) from a sequence-classification directory or an adapter over one."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    where = Path(path).expanduser()
    try:
        if (where / "adapter_config.json").is_file():
            from peft import AutoPeftModelForSequenceClassification

            model = AutoPeftModelForSequenceClassification.from_pretrained(str(where), num_labels=1)
        else:
            model = AutoModelForSequenceClassification.from_pretrained(str(where), num_labels=1, use_safetensors=True)
        tokenizer = AutoTokenizer.from_pretrained(str(where))
    except (OSError, ValueError) as exc:
        raise UserError(f"reward model:{path}: cannot load a sequence-classification model "
                        f"({' '.join(str(exc).split())[:200]})") from None
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model.config.pad_token_id = tokenizer.pad_token_id
    model.to(platform.torch_device(int(os.environ.get("LOCAL_RANK", "0")))).eval()
    return model, tokenizer


def score(model, tokenizer, texts: list[str]) -> list[float]:
    import torch

    device = next(model.parameters()).device
    out: list[float] = []
    for i in range(0, len(texts), BATCH):
        batch = tokenizer(texts[i:i + BATCH], return_tensors="pt", padding=True, padding_side="right",
                          add_special_tokens=False)
        with torch.inference_mode():
            logits = model(**{k: v.to(device) for k, v in batch.items()}).logits
        out += [float(v) for v in logits[:, 0].float()]
    return out


def reward_model_scorer(path: str, platform) -> Callable:
    loaded: list = []

    def reward_model(prompts, completions, **kwargs) -> list[float]:
        if not loaded:
            loaded.extend(load_reward_model(path, platform))
        model, tokenizer = loaded
        return score(model, tokenizer, [p + c for p, c in zip(prompts, completions)])

    return reward_model

"""Reward models, the `rm` step's artifact: load one and score texts (what GRPO's reward-model reward calls).

An rm artifact is a sequence-classification model with one output (num_labels=1). With lora/qlora/dora it is a
PEFT adapter (task type SEQ_CLS, the `score` head saved whole) over the base its manifest names, itself possibly
an SFT adapter that is merged in; with full it is the whole model. A text is scored the way the rm step trained
it: the chat template's generation prompt, then the reply as the template renders it (with its end-of-turn
marker). `RewardModel.chat_text(prompt, reply)` builds that text from messages.

    from swiftbox.training.reward_model import load, score
    score("runs/x/rm", texts)                  # -> list[float], one load per call
    rm = load("runs/x/rm"); rm.score(texts)    # load once, score many times
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Optional, Union

from swiftbox.errors import UserError


class RewardModel:
    """A loaded reward model: `score(texts)` -> one float per text (higher = preferred)."""

    def __init__(self, model: Any, tokenizer: Any, device: Any) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.device = device

    def score(self, texts: list[str], batch_size: int = 16) -> list[float]:
        import torch

        if isinstance(texts, str):
            raise UserError("reward model: score() takes a list of texts, not one string")
        eos = self.tokenizer.eos_token or ""
        texts = [t if t.endswith(eos) else t + eos for t in texts]      # as TRL's RewardTrainer trained them
        out: list[float] = []
        self.model.eval()
        saved_side = self.tokenizer.padding_side
        self.tokenizer.padding_side = "right"      # the head reads the last token before the padding
        try:
            for start in range(0, len(texts), batch_size):
                batch = self.tokenizer(list(texts[start:start + batch_size]), return_tensors="pt", padding=True,
                                       add_special_tokens=False).to(self.device)
                with torch.no_grad():
                    logits = self.model(**batch).logits
                out += [float(v) for v in logits[:, 0].float().cpu()]
        finally:
            self.tokenizer.padding_side = saved_side
        return out

    def chat_text(self, prompt: Union[str, list[dict]], reply: str) -> str:
        """The text the rm step scores for `reply` to `prompt` (a user string or chat messages)."""
        from swiftbox.data import render
        from swiftbox.data.encode import completion_text

        messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else list(prompt)
        answer = [{"role": "assistant", "content": reply}]
        return render(self.tokenizer, messages, None, generation_prompt=True) + completion_text(
            self.tokenizer, messages, answer)


def pairwise_accuracy(model: Any, tokenizer: Any, pairs: list[dict]) -> float:
    """Share of {prompt, chosen, rejected} string pairs whose chosen text scores strictly higher (exact, where
    the trainer's eval accuracy is a mean of per-batch means)."""
    rm = RewardModel(model, tokenizer, next(model.parameters()).device)
    chosen = rm.score([p["prompt"] + p["chosen"] for p in pairs])
    rejected = rm.score([p["prompt"] + p["rejected"] for p in pairs])
    return round(sum(c > r for c, r in zip(chosen, rejected)) / max(len(pairs), 1), 6)


def load(model_dir: Union[str, Path], *, platform: Any = None, dtype: str = "float32") -> RewardModel:
    """Load an rm artifact (or any sequence-classification model with one output) for scoring."""
    from transformers import AutoModelForSequenceClassification

    from swiftbox.device import current_platform
    from swiftbox.modeling.loading import load_tokenizer, merge_into, resolve_spec, torch_dtype

    platform = platform or current_platform()
    spec = resolve_spec(str(model_dir))
    tokenizer = load_tokenizer(spec)
    try:
        model = AutoModelForSequenceClassification.from_pretrained(
            spec.base, num_labels=1, dtype=torch_dtype(dtype), use_safetensors=True)
    except (OSError, ValueError) as exc:
        raise UserError(f"reward model {model_dir}: cannot load ({str(exc).splitlines()[0]})") from None
    model.config.pad_token_id = tokenizer.pad_token_id
    model = merge_into(model, spec.adapters)      # an SFT adapter under the rm adapter, then the rm adapter
    device = platform.torch_device(0)
    model.to(device).eval()
    return RewardModel(model, tokenizer, device)


def score(model_dir: Union[str, Path], texts: list[str], *, batch_size: int = 16,
          platform: Optional[Any] = None) -> list[float]:
    """Scores of `texts` under the reward model at `model_dir` (loads it for this call)."""
    return load(model_dir, platform=platform).score(texts, batch_size=batch_size)

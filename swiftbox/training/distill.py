"""What the gkd step needs beside TRL's GKDTrainer: the teacher (its tokenizer checked to be the student's, then the
model loaded frozen on the student's device, its adapters merged), the rows the trainer reads (swiftbox's exactly
labelled SFT rows plus the prompt their last reply answers, which on-policy steps sample from), their batches, and
KL(teacher || student) on the replies - the number distillation should bring down."""
from __future__ import annotations

from typing import Any

from swiftbox.errors import UserError

IGNORE = -100


def same_tokenizer(student: Any, teacher: Any, ref: str) -> None:
    """GKD compares next-token distributions id by id: the teacher's token ids must mean what the student's do."""
    mine, theirs = student.get_vocab(), teacher.get_vocab()
    if mine == theirs:
        return
    differ = sum(1 for token, i in mine.items() if theirs.get(token) != i) + len(set(theirs) - set(mine))
    raise UserError(f"gkd.teacher {ref}: its tokenizer is not the student's ({len(theirs)} tokens against "
                    f"{len(mine)}, {differ} differ); GKD compares the two models' next-token distributions token by "
                    "token, so pick a teacher that shares the student's tokenizer (a larger model of its family)")


def check_teacher(ref: str, student: str, *, trust_remote_code: bool = False) -> None:
    """The gkd step's `check`: the teacher resolved (fetched once, before any output exists) and its tokenizer
    compared with the student's (`student` is the step's input), exit 2 when they differ - no weights load."""
    from swiftbox.modeling.loading import load_tokenizer, resolve_spec

    theirs = load_tokenizer(resolve_spec(ref), trust_remote_code=trust_remote_code)
    same_tokenizer(load_tokenizer(resolve_spec(student), trust_remote_code=trust_remote_code), theirs, ref)


def same_width(student: Any, teacher: Any, ref: str) -> None:
    """Equal tokenizers can still come with logit layers of different widths (vocabularies padded differently)."""
    mine = student.get_output_embeddings().weight.shape[0]
    theirs = teacher.get_output_embeddings().weight.shape[0]
    if mine != theirs:
        raise UserError(f"gkd.teacher {ref}: its output layer has {theirs} logits per token, the student's {mine} "
                        "(the same tokenizer padded to another size); TRL's GKD compares distributions of one width, "
                        "so pick a teacher whose vocab_size equals the student's")


def load_teacher(ref: str, cfg: Any, platform: Any, dtype: str, student_tokenizer: Any) -> Any:
    """The teacher in the compute dtype on this rank's device, adapters merged, frozen. Refuses (exit 2) a teacher
    whose tokenizer is not the student's before its weights load."""
    from transformers import AutoModelForCausalLM

    from swiftbox import logs
    from swiftbox.modeling.loading import load_tokenizer, merge_into, resolve_spec, torch_dtype
    from swiftbox.training.distributed.args import model_device_map

    spec = resolve_spec(ref)
    same_tokenizer(student_tokenizer, load_tokenizer(spec, trust_remote_code=cfg.trust_remote_code), ref)
    kwargs: dict = dict(dtype=torch_dtype(dtype), trust_remote_code=cfg.trust_remote_code, use_safetensors=True)
    device_map = model_device_map(cfg, platform)
    if device_map is not None:
        kwargs["device_map"] = device_map
    try:
        with logs.captured(f"loading teacher {spec.base.name}"):
            model = merge_into(AutoModelForCausalLM.from_pretrained(spec.base, **kwargs), list(spec.adapters))
    except OSError as exc:
        raise UserError(f"gkd.teacher {ref}: cannot load model ({str(exc).splitlines()[0]})") from None
    return model.eval().requires_grad_(False)


def reply_start(labels: list[int]) -> int:
    """Where the last labelled reply begins (its prompt is everything before)."""
    end = max((i for i, label in enumerate(labels) if label != IGNORE), default=-1)
    start = end
    while start > 0 and labels[start - 1] != IGNORE:
        start -= 1
    return max(start, 0)


def with_prompts(rows: list[dict]) -> tuple[list[dict], int]:
    """The rows plus `prompt_ids` (the tokens before the last reply: what an on-policy step samples an answer to);
    rows whose reply starts at their first token (no prompt left after truncation) are dropped and counted."""
    out = []
    for row in rows:
        start = reply_start(row["labels"])
        if start > 0:
            out.append({"input_ids": row["input_ids"], "labels": row["labels"], "prompt_ids": row["input_ids"][:start]})
    return out, len(rows) - len(out)


class Collator:
    """Batches for GKDTrainer: input_ids / attention_mask / labels padded on the right, and the prompts padded on the
    left (`prompts`, `prompt_attention_mask`) for generation - the keys TRL's DataCollatorForChatML produces."""

    def __init__(self, pad_id: int):
        self.pad_id = pad_id

    def __call__(self, rows: list[dict]) -> dict:
        import torch

        width = max(len(r["input_ids"]) for r in rows)
        prompt_width = max(len(r.get("prompt_ids") or [0]) for r in rows)

        def right(seq: list[int], fill: int) -> list[int]:
            return list(seq) + [fill] * (width - len(seq))

        def left(seq: list[int], fill: int) -> list[int]:
            return [fill] * (prompt_width - len(seq)) + list(seq)

        batch = {"input_ids": [right(r["input_ids"], self.pad_id) for r in rows],
                 "attention_mask": [right([1] * len(r["input_ids"]), 0) for r in rows],
                 "labels": [right(r["labels"], IGNORE) for r in rows]}
        if all("prompt_ids" in r for r in rows):
            batch["prompts"] = [left(r["prompt_ids"], self.pad_id) for r in rows]
            batch["prompt_attention_mask"] = [left([1] * len(r["prompt_ids"]), 0) for r in rows]
        return {key: torch.tensor(value, dtype=torch.long) for key, value in batch.items()}


def kl_to_teacher(student: Any, teacher: Any, rows: list[dict], pad_id: int, batch_size: int = 2) -> float:
    """Mean per-token KL(teacher || student) over the labelled positions (the replies) of `rows`, in float32."""
    import torch

    if not rows:
        return float("nan")
    device = next(student.parameters()).device
    total, count = 0.0, 0
    was_training = student.training
    student.eval()
    try:
        with torch.no_grad():
            for start in range(0, len(rows), batch_size):
                batch = Collator(pad_id)([{k: r[k] for k in ("input_ids", "labels")}
                                          for r in rows[start:start + batch_size]])
                ids, mask = batch["input_ids"].to(device), batch["attention_mask"].to(device)
                chosen = batch["labels"][:, 1:].to(device) != IGNORE
                own = student(input_ids=ids, attention_mask=mask).logits[:, :-1][chosen].float().log_softmax(-1)
                ref = teacher(input_ids=ids, attention_mask=mask).logits[:, :-1][chosen].float().log_softmax(-1)
                total += float((ref.exp() * (ref - own)).sum())
                count += int(chosen.sum())
    finally:
        student.train(was_training)
    return total / max(count, 1)

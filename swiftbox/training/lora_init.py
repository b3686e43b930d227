"""LoRA initialisations beyond PEFT's default (`lora.init`, `lora.use_rslora`), and what saving them takes.

- pissa / pissa_niter_N / olora: when the adapter is created PEFT rewrites each target's base weight into a
  residual (W - A0·B0, scaled), so the adapter trains as a delta on that residual. `snapshot` keeps the adapter's
  initial weights (small: rank x width) and marks the live config plain, so that a trainer's copy of the adapter
  (TRL's frozen "ref" adapter) does not run the initialisation a second time on the residual. `save` then writes the
  adapter through PEFT's own conversion (`save_pretrained(path_initial_model_for_weight_conversion=...)`):
  [A | A0] and [B | -B0], twice the rank - a plain LoRA delta on the untouched base, which merge, serve, verify and
  GGUF export read like any other adapter.
- eva: once the rows are tokenized, `eva` runs PEFT's `initialize_lora_eva_weights` over the first rows (an SVD of
  each target's inputs; ranks are redistributed between layers, `rank_pattern`). B stays zero: the model's outputs
  are unchanged at the start, as with the default.
- use_rslora: scaling alpha / sqrt(r). The saved adapter_config states the same scaling the plain way
  (lora_alpha x sqrt(r), use_rslora false): llama.cpp's GGUF LoRA reads lora_alpha / r and ignores use_rslora.
"""
from __future__ import annotations

import itertools
import json
import math
import tempfile
from pathlib import Path
from typing import Any, Iterable, Optional

EVA_ROWS = 64            # rows EVA's SVD reads (it cycles through them until every layer's vectors settle)


def peft_kwargs(lora: Any) -> dict:
    """The LoraConfig keywords for `lora.init` / `lora.use_rslora`."""
    kwargs: dict = {"init_lora_weights": True if lora.init == "default" else lora.init, "use_rslora": lora.use_rslora}
    if lora.init == "eva":
        from peft import EvaConfig

        kwargs["eva_config"] = EvaConfig()
    return kwargs


def snapshot(model: Any, lora: Any) -> Optional[dict]:
    """PiSSA / OLoRA: the adapter's initial weights (CPU copies), and the live config marked plain. None otherwise."""
    if not lora.rewrites_base():
        return None
    from peft.utils import get_peft_model_state_dict

    state = {name: tensor.detach().to("cpu", copy=True).contiguous()
             for name, tensor in get_peft_model_state_dict(model, adapter_name="default").items()}
    model.peft_config["default"].init_lora_weights = True
    return state


def eva(model: Any, rows: Iterable[dict], tokenizer: Any, batch_size: int) -> int:
    """EVA: initialise the "default" adapter from the activations of the first EVA_ROWS rows ({input_ids, labels});
    the rows' prompt tokens are left out of the SVD (PEFT's label mask). Returns the rows used."""
    import torch
    from peft import initialize_lora_eva_weights

    from swiftbox import logs
    from swiftbox.errors import UserError

    taken = list(itertools.islice(iter(rows), EVA_ROWS))
    if not taken:
        raise UserError("lora.init eva: the dataset has no rows to initialise the adapter from")
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    device = next(p for p in model.parameters()).device
    batches = []
    for start in range(0, len(taken), batch_size):
        group = taken[start:start + batch_size]
        width = max(len(r["input_ids"]) for r in group)
        ids = [list(r["input_ids"]) + [pad] * (width - len(r["input_ids"])) for r in group]
        labels = [list(r["labels"]) + [-100] * (width - len(r["labels"])) for r in group]
        mask = [[1] * len(r["input_ids"]) + [0] * (width - len(r["input_ids"])) for r in group]
        batches.append({name: torch.tensor(value, device=device)
                        for name, value in (("input_ids", ids), ("labels", labels), ("attention_mask", mask))})
    was_training = model.training
    model.eval()
    try:
        with logs.captured("EVA initialisation"):
            initialize_lora_eva_weights(model, batches, show_progress_bar=False)
    finally:
        model.train(was_training)
    return len(taken)


def save(model: Any, folder: Path, selected: Optional[list[str]], initial: Optional[dict]) -> None:
    """save_pretrained into `folder` (safetensors); a PiSSA / OLoRA adapter converted to a plain LoRA on the way."""
    kwargs: dict = {"safe_serialization": True}
    if selected is not None:
        kwargs["selected_adapters"] = selected
    if initial is None:
        model.save_pretrained(str(folder), **kwargs)
    else:
        from safetensors.torch import save_file

        with tempfile.TemporaryDirectory(prefix=".lora-init-", dir=str(folder)) as tmp:
            start = Path(tmp) / "swiftbox_initial"       # PEFT loads it as an adapter of this name, then deletes it
            start.mkdir()
            save_file(initial, str(start / "adapter_model.safetensors"))
            model.save_pretrained(str(folder), path_initial_model_for_weight_conversion=str(start),
                                  **{**kwargs, "selected_adapters": ["default"]})
    plain_scaling(folder)


def plain_scaling(folder: Path) -> None:
    """An rsLoRA adapter_config.json rewritten to the equal plain scaling: alpha -> alpha x sqrt(r), per pattern
    entry too (EVA's rank_pattern), use_rslora false. PEFT computes the same scaling from either."""
    file = folder / "adapter_config.json"
    if not file.is_file():
        return
    config = json.loads(file.read_text(encoding="utf-8"))
    if not config.get("use_rslora"):
        return
    r, alpha = config["r"], config["lora_alpha"]
    ranks, alphas = config.get("rank_pattern") or {}, config.get("alpha_pattern") or {}
    config["alpha_pattern"] = {key: alphas.get(key, alpha) * math.sqrt(ranks.get(key, r))
                               for key in {**ranks, **alphas}}
    config["lora_alpha"] = alpha * math.sqrt(r)
    config["use_rslora"] = False
    file.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def maybe_eva(cfg: Any, tm: Any, rows: Any, log: Any) -> None:
    """sft / pt / gkd, after tokenizing: `lora.init: eva` initialises the fresh adapter from `rows()` (a zero-argument
    callable returning the {input_ids, labels} rows, read only when EVA runs)."""
    if cfg.method == "full" or cfg.lora.init != "eva":
        return
    used = eva(tm.model, rows(), tm.tokenizer, cfg.batch_size)
    log(f"{cfg.kind()}: LoRA initialised by EVA from the activations of {used} row(s)")

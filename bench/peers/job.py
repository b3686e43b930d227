"""One side of `bench sft --peers`: ONE framework trains the shared job in this process, then prints one JSON line.

Run by bench/sft.py with the framework's own interpreter (swiftbox: this environment; a peer: its venv under
~/.cache/swiftbox/peers/). The job is the same for every framework: the model directory bench/sft.py wrote (random
weights, Qwen2.5-0.5B width, the toy tokenizer), LoRA r8/alpha16/dropout 0.05 on all linear layers, lr 1e-4,
cosine, one epoch, batch 8, max length 512, fp32, seed 0, logging every 5 steps, no checkpoints. Each framework
runs through its public entry point (swiftbox's CLI, LLaMA-Factory's run_exp, ms-swift's sft_main/rlhf_main) in
its own fastest CPU mode the bench knows of (LLaMA-Factory: neat_packing; ms-swift: padded, its padding_free
needs flash-attn).

Measurement is the same for all: every `transformers.Trainer` made in this process gets its `training_step`
wrapped (an instance attribute, so subclasses' overrides are wrapped too) to count the batch's non-padding
tokens (attention-mask ones; a padding-free batch has no pad, so all its ids) and stamp the time. Train time runs
from the end of the first micro-step (warm-up) to the end of the last, and counts the tokens in between. Peak RSS
is the process's lifetime peak (ru_maxrss). Final loss: the last logged training loss.

    python bench/peers/job.py --framework swiftbox|ms-swift|llamafactory --method sft|dpo --model DIR --data FILE
                             --work DIR [--rows N] [-- extra framework args]
"""
from __future__ import annotations

import argparse
import functools
import json
import os
import resource
import sys
import time
from pathlib import Path

try:                                     # bench/peers/memory.py: beside this script when run as one
    from memory import Ledger
except ImportError:                      # imported as the `peers` package (tests)
    from peers.memory import Ledger

JOB = dict(batch=8, lr=1e-4, epochs=1, max_length=512, rank=8, alpha=16, dropout=0.05, seed=0, logging_steps=5,
           beta=0.1)


METHOD = "sft"        # set from --method
PAD_ID = 0            # the toy tokenizer's <|endoftext|>, the model config's pad_token_id
NOTES: list[str] = []


class Probe:
    """What the wrapped training_step saw: per micro-step end times and token counts; the trainers made."""

    def __init__(self) -> None:
        self.stamps: list[float] = []
        self.tokens: list[int] = []
        self.rows: list[int] = []
        self.first_start: float | None = None
        self.trainers: list = []
        self.ledger = Ledger()

    def summary(self) -> dict:
        if len(self.stamps) < 2:
            if not self.stamps or self.first_start is None:
                return {"micro_steps": 0, "error": "no training step ran"}
            # one step only (a framework dropped most rows): its time, warm-up included, is all there is
            seconds = self.stamps[0] - self.first_start
            return {"micro_steps": 1, "train_seconds": round(seconds, 3), "train_tokens": self.tokens[0],
                    "tokens_per_s": round(self.tokens[0] / max(seconds, 1e-9), 1), "timed_rows": self.rows[0],
                    "rows_trained": self.rows[0], "s_per_step": round(seconds, 3), "warm_up_included": True,
                    "final_loss": None}
        seconds = self.stamps[-1] - self.stamps[0]
        tokens = sum(self.tokens[1:])
        rows = sum(self.rows[1:])
        loss, loss_kind = None, None
        if self.trainers:
            history = self.trainers[-1].state.log_history
            logged = [h["loss"] for h in history if "loss" in h]
            means = [h["train_loss"] for h in history if "train_loss" in h]
            loss, loss_kind = (logged[-1], "last logged") if logged else (means[-1] if means else None, "run mean")
        return {"micro_steps": len(self.stamps), "train_seconds": round(seconds, 3), "train_tokens": tokens,
                "tokens_per_s": round(tokens / max(seconds, 1e-9), 1), "timed_rows": rows,
                "tokens_per_s_with_first_step": round(sum(self.tokens) / max(self.stamps[-1] - (self.first_start
                                                                                                 or 0), 1e-9), 1),
                "rows_trained": sum(self.rows),
                "s_per_step": round(seconds / (len(self.stamps) - 1), 3), "final_loss": loss,
                "final_loss_is": loss_kind,
                "losses": [round(h["loss"], 4) for t in self.trainers[-1:] for h in t.state.log_history if "loss" in h]}


def count_tokens(inputs) -> int:
    """Non-padding tokens in one batch: attention-mask ones (every *attention_mask key), else every input id."""
    masks = [v for k, v in inputs.items() if k.endswith("attention_mask") and hasattr(v, "ne")]
    if any(m.dim() > 2 for m in masks):     # a 4-D block mask (LLaMA-Factory's neat_packing): count non-pad ids
        return int(sum(int(v.ne(PAD_ID).sum()) for k, v in inputs.items() if k.endswith("input_ids")))
    if masks:
        return int(sum(int(m.ne(0).sum()) for m in masks))
    ids = [v for k, v in inputs.items() if k.endswith("input_ids") and hasattr(v, "numel")]
    return int(sum(int(v.numel()) for v in ids))


def count_rows(inputs) -> int:
    """Samples in one batch - a DPO pair counts once: trainers that concatenate chosen and rejected along the batch
    (TRL 1.x, LLaMA-Factory) carry 2 rows per pair; TRL 0.x-style batches carry `chosen_input_ids`. Packed SFT
    rows count their segments (position_ids restarting at 0)."""
    if "chosen_input_ids" in inputs:
        return int(inputs["chosen_input_ids"].shape[0])
    ids = inputs.get("input_ids")
    if ids is None:
        return 0
    if "completion_mask" in inputs or "ref_chosen_logps" in inputs or METHOD == "dpo":
        return int(ids.shape[0]) // 2
    pos = inputs.get("position_ids")
    if pos is not None and ids.shape[0] == 1:
        return int(pos.eq(0).sum())
    return int(ids.shape[0])


def install_probe(probe: Probe) -> None:
    import transformers

    original_init = transformers.Trainer.__init__

    @functools.wraps(original_init)        # frameworks read Trainer.__init__'s signature (ms-swift does)
    def init(self, *args, **kwargs):
        original_init(self, *args, **kwargs)
        step = self.training_step

        def training_step(model, inputs, *a, **kw):
            if probe.first_start is None:
                probe.first_start = time.perf_counter()
            with probe.ledger.step(model):
                out = step(model, inputs, *a, **kw)
            probe.stamps.append(time.perf_counter())
            probe.tokens.append(count_tokens(inputs))
            probe.rows.append(count_rows(inputs))
            return out

        self.training_step = training_step
        probe.trainers.append(self)
        probe.ledger.attach(self)

    transformers.Trainer.__init__ = init


def run_swiftbox(method: str, model: str, data: str, work: Path, extra: list[str]) -> None:
    from swiftbox.cli import main

    argv = [method, model, "--dataset", data, "--output", str(work / "out"), "--force", "--device", "cpu",
            "--epochs", str(JOB["epochs"]), "--learning-rate", str(JOB["lr"]), "--batch-size", str(JOB["batch"]),
            "--max-length", str(JOB["max_length"]), "--lora.rank", str(JOB["rank"]), "--lora.alpha", str(JOB["alpha"]),
            "--lora.dropout", str(JOB["dropout"]), "--seed", str(JOB["seed"]), "--dtype", "float32",
            "--logging-steps", str(JOB["logging_steps"]), "--save-steps", str(10 ** 6)]
    if method == "dpo":
        argv += ["--beta", str(JOB["beta"])]
    code = main(argv + extra)
    if code:
        raise SystemExit(f"swiftbox {method} exited {code}")


def stand_in_torchaudio() -> bool:
    """LLaMA-Factory imports torchaudio at module level (for audio inputs). The index's newest torchaudio (2.11) has
    no build for a newer torch, and its extension fails to load; this text job never calls it, so an empty module
    stands in, in this process only. Returns whether it did (the JSON line says so)."""
    import importlib.util
    import types

    try:
        if importlib.util.find_spec("torchaudio") is not None:
            import torchaudio  # noqa: F401
            return False
    except Exception:  # noqa: BLE001 - a broken extension raises OSError/ImportError/RuntimeError
        pass
    sys.modules["torchaudio"] = types.ModuleType("torchaudio")
    return True


def run_llamafactory(method: str, model: str, data: str, work: Path, extra: list[str]) -> None:
    if stand_in_torchaudio():
        NOTES.append("torchaudio: empty stand-in module (no installable build for this torch; text job)")
    from llamafactory.train.tuner import run_exp

    info = {"bench": {"file_name": str(Path(data).resolve())}}
    if method == "dpo":
        info["bench"].update(formatting="sharegpt", ranking=True,
                             columns={"messages": "conversations", "chosen": "chosen", "rejected": "rejected"})
    (work / "dataset_info.json").write_text(json.dumps(info))
    args = dict(stage=method, do_train=True, model_name_or_path=model, dataset="bench", dataset_dir=str(work),
                template="qwen", finetuning_type="lora", lora_rank=JOB["rank"], lora_alpha=JOB["alpha"],
                lora_dropout=JOB["dropout"], lora_target="all", cutoff_len=JOB["max_length"],
                per_device_train_batch_size=JOB["batch"], gradient_accumulation_steps=1, learning_rate=JOB["lr"],
                num_train_epochs=JOB["epochs"], lr_scheduler_type="cosine", output_dir=str(work / "out"),
                overwrite_output_dir=True, logging_steps=JOB["logging_steps"], save_strategy="no", report_to="none",
                seed=JOB["seed"], bf16=False, fp16=False, plot_loss=False, overwrite_cache=True,
                disable_tqdm=True, trust_remote_code=True)
    if method == "sft":
        args.update(packing=True, neat_packing=True)
    else:
        args.update(pref_beta=JOB["beta"], pref_loss="sigmoid")
    for item in extra:
        key, _, value = item.lstrip("-").partition("=")
        args[key] = json.loads(value) if value[:1] in "0123456789tf[{\"" and value not in ("", "-") else value
    run_exp(args)


def ms_swift_pairs(data: str, work: Path) -> str:
    """The ShareGPT ranking pairs in ms-swift's own DPO format (`messages` ending in the chosen reply, plus
    `rejected_response`): the same texts, the layout its preprocessor reads."""
    roles = {"human": "user", "gpt": "assistant", "system": "system", "user": "user", "assistant": "assistant"}
    out = work / "pairs-ms-swift.jsonl"
    with open(out, "w") as fh:
        for row in json.loads(Path(data).read_text()):
            messages = [{"role": roles[m["from"]], "content": m["value"]} for m in row["conversations"]]
            messages.append({"role": "assistant", "content": row["chosen"]["value"]})
            fh.write(json.dumps({"messages": messages, "rejected_response": row["rejected"]["value"]}) + "\n")
    return str(out)


def run_ms_swift(method: str, model: str, data: str, work: Path, extra: list[str]) -> None:
    argv = ["--model", model, "--model_type", "qwen2", "--template", "qwen2_5", "--dataset", data,
            "--tuner_type", "lora", "--lora_rank", str(JOB["rank"]), "--lora_alpha", str(JOB["alpha"]),
            "--lora_dropout", str(JOB["dropout"]), "--target_modules", "all-linear",
            "--max_length", str(JOB["max_length"]), "--per_device_train_batch_size", str(JOB["batch"]),
            "--gradient_accumulation_steps", "1", "--learning_rate", str(JOB["lr"]),
            "--num_train_epochs", str(JOB["epochs"]), "--lr_scheduler_type", "cosine", "--warmup_ratio", "0",
            "--output_dir", str(work / "out"), "--logging_steps", str(JOB["logging_steps"]), "--save_strategy", "no",
            "--report_to", "none", "--seed", str(JOB["seed"]), "--torch_dtype", "float32", "--split_dataset_ratio",
            "0", "--dataset_num_proc", "1", "--dataloader_num_workers", "0", "--use_cpu", "true"]
    if method == "dpo":
        from swift import rlhf_main

        argv[argv.index("--dataset") + 1] = ms_swift_pairs(data, work)

        rlhf_main(["--rlhf_type", "dpo", "--beta", str(JOB["beta"]), *argv, *extra])
    else:
        from swift import sft_main

        sft_main(argv + extra)


def run_hf(method: str, model: str, data: str, work: Path, extra: list[str]) -> None:
    """The plain baseline: transformers.Trainer + PEFT + a padding collator on swiftbox's tokenized rows."""
    import torch
    from datasets import Dataset
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer, DataCollatorForSeq2Seq, Trainer, TrainingArguments

    from swiftbox import data as sbdata

    if method == "dpo":
        return run_trl_dpo(model, data, work)
    tokenizer = AutoTokenizer.from_pretrained(model)
    rows, _ = sbdata.tokenize_sft(sbdata.load_sft(data, JOB["seed"]), tokenizer, JOB["max_length"])
    torch.manual_seed(JOB["seed"])
    net = AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32)
    net = get_peft_model(net, LoraConfig(r=JOB["rank"], lora_alpha=JOB["alpha"], lora_dropout=JOB["dropout"],
                                         target_modules="all-linear", task_type="CAUSAL_LM"))
    args = TrainingArguments(output_dir=str(work / "out"), num_train_epochs=JOB["epochs"],
                             per_device_train_batch_size=JOB["batch"], learning_rate=JOB["lr"], seed=JOB["seed"],
                             lr_scheduler_type="cosine", save_strategy="no", logging_steps=JOB["logging_steps"],
                             report_to="none", disable_tqdm=True, remove_unused_columns=False, use_cpu=True)
    collator = DataCollatorForSeq2Seq(tokenizer, padding=True, label_pad_token_id=-100)
    Trainer(model=net, args=args, train_dataset=Dataset.from_list(rows), data_collator=collator).train()


def trl_pairs(data: str) -> list[dict]:
    """The ShareGPT ranking pairs as TRL's conversational preference rows (prompt messages, chosen / rejected reply
    messages): TRL applies the model's chat template itself."""
    roles = {"human": "user", "gpt": "assistant", "system": "system", "user": "user", "assistant": "assistant"}
    rows = []
    for row in json.loads(Path(data).read_text()):
        prompt = [{"role": roles[m["from"]], "content": m["value"]} for m in row["conversations"]]
        rows.append({"prompt": prompt, "chosen": [{"role": "assistant", "content": row["chosen"]["value"]}],
                     "rejected": [{"role": "assistant", "content": row["rejected"]["value"]}]})
    return rows


def run_trl_dpo(model: str, data: str, work: Path) -> None:
    """The plain DPO baseline: TRL's DPOTrainer + PEFT LoRA by TRL's defaults (padded [chosen; rejected] batch, the
    reference = the base with the adapter disabled, computed every step) on the same pairs."""
    import torch
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import DPOConfig, DPOTrainer

    tokenizer = AutoTokenizer.from_pretrained(model)
    torch.manual_seed(JOB["seed"])
    net = AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32)
    args = DPOConfig(output_dir=str(work / "out"), num_train_epochs=JOB["epochs"],
                     per_device_train_batch_size=JOB["batch"], learning_rate=JOB["lr"], seed=JOB["seed"],
                     lr_scheduler_type="cosine", save_strategy="no",
                     logging_steps=JOB["logging_steps"], report_to="none", disable_tqdm=True, use_cpu=True,
                     beta=JOB["beta"], max_length=JOB["max_length"], bf16=False)
    lora = LoraConfig(r=JOB["rank"], lora_alpha=JOB["alpha"], lora_dropout=JOB["dropout"], target_modules="all-linear",
                      task_type="CAUSAL_LM")
    DPOTrainer(model=net, args=args, processing_class=tokenizer, train_dataset=Dataset.from_list(trl_pairs(data)),
               peft_config=lora).train()


RUNNERS = {"swiftbox": run_swiftbox, "hf": run_hf, "llamafactory": run_llamafactory, "ms-swift": run_ms_swift}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--framework", choices=sorted(RUNNERS), required=True)
    ap.add_argument("--method", choices=["sft", "dpo"], default="sft")
    ap.add_argument("--model", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("extra", nargs="*", help="framework arguments after --")
    opts = ap.parse_args(argv)
    work = Path(opts.work)
    global METHOD
    METHOD = opts.method
    work.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    probe = Probe()
    install_probe(probe)
    started = time.perf_counter()
    RUNNERS[opts.framework](opts.method, opts.model, opts.data, work, opts.extra)
    result = {"framework": opts.framework, "method": opts.method, "wall_s": round(time.perf_counter() - started, 2),
              "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, **probe.summary(),
              "memory": probe.ledger.report(),
              **({"notes": NOTES} if NOTES else {})}
    print("PEER_RESULT " + json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

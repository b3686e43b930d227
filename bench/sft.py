"""bench sft: swiftbox's LoRA SFT path vs a plain HF Trainer + PEFT + padding collator, side by side.

Same random-weight model in the Qwen2.5-0.5B shape (built locally from a config, no download; `--layers`
scales the depth down for a quick run - the JSON says which), same LoRA config (rank 8, all-linear), same
length-skewed rows (16..512 tokens, most short), same seed, batch size and steps. swiftbox runs its own
trainer construction (swiftbox.pipelines.sft.make_trainer: TRL SFTTrainer, padding-free flattened batches);
the baseline pads every batch to its longest row. Prints ONE JSON line: non-padding tokens/s of each side
(timed from the end of the first, warm-up, step), peak memory of each, and `ratio` = swiftbox / baseline.

    ./launch.sh bench sft [--layers 24] [--steps 4] [--batch 8] [--rows 256] [--seed 0]
"""
from __future__ import annotations

import argparse
import copy
import json
import os
import platform as py_platform
import random
import threading
import time
from pathlib import Path
from types import SimpleNamespace

QWEN25_05B = dict(vocab_size=151936, hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                  num_attention_heads=14, num_key_value_heads=2, max_position_embeddings=32768,
                  rope_theta=1000000.0, tie_word_embeddings=True, rms_norm_eps=1e-6)


def skewed_lengths(n: int, rng: random.Random, lo: int = 16, hi: int = 512) -> list[int]:
    """Most rows short, a long tail up to `hi` (like real chat SFT data)."""
    return [min(hi, max(lo, int(lo * (hi / lo) ** (rng.random() ** 2.5)))) for _ in range(n)]


def make_rows(n: int, vocab: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    rows = []
    for length in skewed_lengths(n, rng):
        ids = [rng.randrange(100, vocab) for _ in range(length)]
        prompt = length // 3
        rows.append({"input_ids": ids, "labels": [-100] * prompt + ids[prompt:]})
    return rows


class PeakRss:
    """Peak resident memory of this process while the block runs (polls /proc; CPU fallback)."""

    def __init__(self):
        self.peak = 0
        self._stop = threading.Event()

    @staticmethod
    def rss() -> int:
        try:
            for line in open("/proc/self/status"):
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        except OSError:
            pass
        return 0

    def _poll(self):
        while not self._stop.is_set():
            self.peak = max(self.peak, self.rss())
            time.sleep(0.05)

    def __enter__(self):
        self.peak = self.rss()
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


def timer_callback():
    from transformers import TrainerCallback

    class Timer(TrainerCallback):
        def __init__(self):
            self.t0 = self.tokens0 = None
            self.t1 = self.tokens1 = None

        def on_step_end(self, args, state, control, **kw):
            now = time.perf_counter()
            if state.global_step == 1:
                self.t0, self.tokens0 = now, state.num_input_tokens_seen
            self.t1, self.tokens1 = now, state.num_input_tokens_seen

        def tokens_per_second(self):
            return (self.tokens1 - self.tokens0) / max(self.t1 - self.t0, 1e-9)

    return Timer()


def run_side(name, build_trainer, platform):
    from swiftbox.compat import trl_scores_label_positions_only

    timer = timer_callback()
    platform.reset_peak_memory()
    with PeakRss() as rss:
        trainer = build_trainer(timer)
        started = time.perf_counter()
        with trl_scores_label_positions_only():  # what the sft step does around train()
            trainer.train()
        wall = time.perf_counter() - started
    device_peak = platform.max_memory_allocated() if platform.name != "cpu" else None
    return {"tokens_per_s": round(timer.tokens_per_second(), 1), "tokens": int(timer.tokens1),
            "wall_s": round(wall, 2), "peak_rss_bytes": rss.peak, "peak_device_bytes": device_peak}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=QWEN25_05B["num_hidden_layers"], help="decoder layers (real: 24)")
    ap.add_argument("--steps", type=int, default=4, help="optimizer steps per side (the first is warm-up)")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--rows", type=int, default=256)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", default=None, help="auto | cpu | cuda | npu")
    opts = ap.parse_args()

    import tempfile

    import torch
    from peft import get_peft_model
    from transformers import DataCollatorForSeq2Seq, Qwen2Config, Qwen2ForCausalLM, Trainer, TrainingArguments
    from transformers.trainer_callback import PrinterCallback

    from swiftbox.device import current_platform
    from swiftbox.modeling.loading import torch_dtype
    from swiftbox.modeling.toy import build_tokenizer
    from swiftbox.pipelines.sft import make_trainer
    from swiftbox.steps import SftStep
    from swiftbox.training.model import lora_config

    platform = current_platform(opts.device)
    dtype = platform.resolve_dtype("auto")
    cfg = SftStep(dataset="bench", max_steps=opts.steps, batch_size=opts.batch, learning_rate=1e-4, seed=opts.seed,
                  save_steps=10 ** 6, logging_steps=10 ** 6, max_length=512, packing=True)
    shape = dict(QWEN25_05B, num_hidden_layers=opts.layers)
    torch.manual_seed(opts.seed)
    base = Qwen2ForCausalLM(Qwen2Config(**shape, pad_token_id=0)).to(torch_dtype(dtype)).to(platform.torch_device())
    base.config.use_cache = False
    rows = make_rows(opts.rows, shape["vocab_size"], opts.seed)
    tokenizer = build_tokenizer()          # only its pad id (0) is used: rows are token ids already
    ctx = SimpleNamespace(platform=platform)
    work = Path(tempfile.mkdtemp(prefix="bench-sft-"))

    def swiftbox_trainer(timer):
        model = get_peft_model(copy.deepcopy(base), lora_config(cfg))
        return make_trainer(cfg, ctx, dtype, model, tokenizer, rows, None, work / "swiftbox", [timer])

    def baseline_trainer(timer):
        from datasets import Dataset

        model = get_peft_model(copy.deepcopy(base), lora_config(cfg))
        args = TrainingArguments(output_dir=str(work / "baseline"), max_steps=opts.steps,
                                 per_device_train_batch_size=opts.batch, learning_rate=1e-4, seed=opts.seed,
                                 data_seed=opts.seed, lr_scheduler_type="cosine", save_strategy="no",
                                 logging_steps=10 ** 6, report_to="none", disable_tqdm=True,
                                 include_num_input_tokens_seen="non_padding", remove_unused_columns=False,
                                 **platform.training_args(dtype))
        collator = DataCollatorForSeq2Seq(tokenizer, padding=True, label_pad_token_id=-100)
        trainer = Trainer(model=model, args=args, train_dataset=Dataset.from_list(rows), data_collator=collator,
                          callbacks=[timer])
        trainer.remove_callback(PrinterCallback)        # keep stdout to the one JSON line
        return trainer

    ours = run_side("swiftbox", swiftbox_trainer, platform)
    theirs = run_side("baseline", baseline_trainer, platform)
    lengths = [len(r["input_ids"]) for r in rows]
    result = {
        "bench": "sft", "device": platform.name, "device_name": platform.device_name(), "dtype": dtype,
        "cpu_count": os.cpu_count(), "torch_threads": torch.get_num_threads(), "machine": py_platform.machine(),
        "model": "random Qwen2.5-0.5B shape", "layers": opts.layers, "real_layers": QWEN25_05B["num_hidden_layers"],
        "lora": {"rank": cfg.lora.rank, "alpha": cfg.lora.alpha, "targets": cfg.lora.targets},
        "rows": len(rows), "len_min": min(lengths), "len_mean": round(sum(lengths) / len(lengths), 1),
        "len_max": max(lengths), "batch": opts.batch, "steps": opts.steps,
        "swiftbox": ours, "baseline": theirs,
        "ratio": round(ours["tokens_per_s"] / max(theirs["tokens_per_s"], 1e-9), 2),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()

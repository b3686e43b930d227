"""bench sft: swiftbox's LoRA SFT path vs a plain HF Trainer + PEFT + padding collator, side by side.

Same random-weight model in the Qwen2.5-0.5B shape (built locally from a config, no download; `--layers`
scales the depth down for a quick run - the JSON says which), same LoRA config (rank 8, all-linear), same
length-skewed rows (16..512 tokens, most short), same seed, batch size and steps. swiftbox runs its own
trainer construction (swiftbox.pipelines.sft.make_trainer: TRL SFTTrainer, the device's default batching);
the baseline pads every batch to its longest row. Prints ONE JSON line: non-padding tokens/s of each side
(timed from the end of the first, warm-up, step), peak memory of each, and `ratio` = swiftbox / baseline.

    ./launch.sh bench sft [--layers 24] [--steps 4] [--batch 8] [--rows 256] [--seed 0]

`--peers` runs the peer comparison instead (bench/peers/): the same LoRA job on LLaMA-Factory's demo data by
swiftbox's defaults, a plain HF Trainer, ms-swift and LLaMA-Factory (installed on demand into venvs under
~/.cache/swiftbox/peers/), each in its own process, interleaved round by round; ONE JSON line with medians and
spreads, `vs_best_peer` and `vs_hf`:

    ./launch.sh bench sft --peers [--model smollm2-135m-instruct|DIR|toy] [--method sft|dpo] [--rounds 3] [--quick]
                                  [--peer-rows N] [--sides swiftbox,hf,ms-swift,...] [--no-profile]
"""
from __future__ import annotations

import argparse
import contextlib
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


# bf16 dense tensor-core peak, FLOP/s (vendor datasheets, SXM parts): the MFU denominator
PEAK_BF16 = {"H100": 989e12, "H200": 989e12, "H800": 989e12, "A100": 312e12, "L40S": 362e12}


def flops_per_token(n_params: int, shape: dict, lengths: list[int]) -> dict:
    """Model FLOPs per trained token. Attention: causal, per row of length s, 2*d*s*(s+1) per layer forward
    (QK^T and AV), averaged over the rows' tokens; training = 3x forward. `6n` is the usual MFU numerator
    (PaLM); `lora` is what LoRA really computes: frozen weights skip their weight-gradient GEMMs (4N)."""
    attn = 3 * sum(2 * shape["num_hidden_layers"] * shape["hidden_size"] * s * (s + 1) for s in lengths) / sum(lengths)
    return {"params": n_params, "attention": round(attn), "6n": round(6 * n_params + attn),
            "lora": round(4 * n_params + attn)}


def mfu(tokens_per_s: float, flops: dict, device_name: str) -> dict | None:
    peak = next((v for k, v in PEAK_BF16.items() if k in device_name), None)
    if peak is None:
        return None
    return {"peak_flops": peak, "mfu": round(tokens_per_s * flops["6n"] / peak, 4),
            "mfu_lora_flops": round(tokens_per_s * flops["lora"] / peak, 4)}


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
    from swiftbox.training import (
        FoldedLogProb,
        lora_linear,
        peft_lora_fused,
        trl_lm_head_folded,
        trl_lm_head_tiles,
        trl_scores_label_positions_only,
    )

    timer = timer_callback()
    platform.reset_peak_memory()
    with PeakRss() as rss:
        trainer = build_trainer(timer)
        started = time.perf_counter()
        # what the sft step does around train() (training/flow.py); the plain baseline runs PEFT's own LoRA layers
        fused = peft_lora_fused(trainer.model, lora_linear) if name == "swiftbox" else _nothing()
        folded = trl_lm_head_folded(FoldedLogProb) if name == "swiftbox" else _nothing()
        with trl_lm_head_tiles(), trl_scores_label_positions_only(), fused, folded:
            trainer.train()
        wall = time.perf_counter() - started
    device_peak = platform.max_memory_allocated() if platform.name != "cpu" else None
    return {"tokens_per_s": round(timer.tokens_per_second(), 1), "tokens": int(timer.tokens1),
            "wall_s": round(wall, 2), "peak_rss_bytes": rss.peak, "peak_device_bytes": device_peak}


@contextlib.contextmanager
def _nothing():
    yield 0


def profile_side(build_trainer) -> None:
    """Where a training step's time goes: wall vs device busy, the top ops by self CPU and device time."""
    import sys

    import torch
    from transformers import TrainerCallback

    class Prof(TrainerCallback):
        def on_step_begin(self, args, state, control, **kw):
            if state.global_step == 2:
                self.p = torch.profiler.profile(activities=torch.profiler.supported_activities(), record_shapes=False)
                self.p.__enter__()
                self.t = time.perf_counter()

        def on_step_end(self, args, state, control, **kw):
            if state.global_step == 4:
                self.p.__exit__(None, None, None)
                wall = (time.perf_counter() - self.t) / 2
                events = self.p.key_averages()
                dev = sum(getattr(e, "self_device_time_total", 0) for e in events) / 2e6
                for key in ("self_cpu_time_total", "self_device_time_total"):
                    print(events.table(sort_by=key, row_limit=18, max_name_column_width=60), file=sys.stderr)
                print(json.dumps({"bench": "sft-profile", "wall_s_per_step": round(wall, 4),
                                  "device_busy_s_per_step": round(dev, 4)}), flush=True)

    trainer = build_trainer(Prof())
    trainer.args.max_steps = 4
    trainer.train()


def peers_main(opts) -> None:
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from peers import run, stats

    try:
        sides = stats.parse_sides(opts.sides, opts.method)
        if opts.rounds is not None and opts.rounds < 1:
            raise ValueError("--rounds must be at least 1")
        if opts.profile and opts.no_profile:
            raise ValueError("--profile and --no-profile contradict (with --peers the profile run is on by default)")
        if opts.peer_rows is not None and opts.peer_rows < 9:
            raise ValueError("--peer-rows must be at least 9 (one warm-up batch of 8, then timed ones)")
    except ValueError as exc:
        print(f"bench sft: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    if opts.collect:
        print(json.dumps(run.collect(Path(opts.collect), opts.method, sides)))
        return
    try:
        print(json.dumps(run.main(opts.method, opts.rounds, ",".join(sides), opts.quick, opts.peer_rows,
                                  model_ref=opts.model or run.DEFAULT_MODEL, profile=not opts.no_profile)))
    except ValueError as exc:
        print(f"bench sft: {exc}", file=sys.stderr)
        raise SystemExit(2) from None


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=QWEN25_05B["num_hidden_layers"], help="decoder layers (real: 24)")
    ap.add_argument("--steps", type=int, default=4, help="optimizer steps per side (the first is warm-up)")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--rows", type=int, default=256)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", default=None, help="auto | cpu | cuda | npu")
    ap.add_argument("--profile", action="store_true", help="swiftbox side only, torch.profiler tables on stderr "
                    "(with --peers: the profiled swiftbox run, on by default)")
    ap.add_argument("--peers", action="store_true", help="the peer comparison (bench/peers/) instead")
    ap.add_argument("--method", choices=["sft", "dpo"], default="sft", help="--peers: which job")
    ap.add_argument("--rounds", type=int, default=None, help="--peers: interleaved rounds (default 3; --quick 1)")
    ap.add_argument("--quick", action="store_true", help="--peers: 64 rows / 16 pairs, one round")
    ap.add_argument("--collect", default=None, help="--peers: summarise an interrupted run's directory instead")
    ap.add_argument("--peer-rows", type=int, default=None, help="--peers: train on the first N rows / pairs only")
    ap.add_argument("--model", default=None, help="--peers: the model every side trains (registry name or local "
                    "directory; default smollm2-135m-instruct; 'toy' = the earlier toy-vocabulary job)")
    ap.add_argument("--no-profile", action="store_true", help="--peers: skip the untimed swiftbox profile run")
    ap.add_argument("--sides", default=None, help="--peers: comma list (swiftbox,hf,ms-swift,llamafactory; "
                    "swiftbox+FLAG runs a swiftbox variant)")
    opts = ap.parse_args(argv)
    if opts.peers:
        return peers_main(opts)
    if (opts.method != "sft" or opts.quick or opts.rounds is not None or opts.sides or opts.peer_rows or opts.collect
            or opts.model or opts.no_profile):
        ap.error("--method, --rounds, --quick, --sides, --peer-rows, --collect, --model and --no-profile go with "
                 "--peers")

    import tempfile

    import torch
    from peft import get_peft_model
    from transformers import DataCollatorForSeq2Seq, Qwen2Config, Qwen2ForCausalLM, Trainer, TrainingArguments
    from transformers.trainer_callback import PrinterCallback

    from swiftbox.catalog import build_tokenizer
    from swiftbox.device import current_platform
    from swiftbox.modeling import torch_dtype
    from swiftbox.pipelines import make_trainer
    from swiftbox.steps import SftStep
    from swiftbox.training import describe_batching, lora_config, memory_callbacks

    platform = current_platform(opts.device)
    platform.training_memory()                  # as the training flow does before the model loads
    dtype = platform.resolve_dtype("auto")
    cfg = SftStep(dataset="bench", max_steps=opts.steps, batch_size=opts.batch, learning_rate=1e-4, seed=opts.seed,
                  save_steps=10 ** 6, logging_steps=10 ** 6, max_length=512)   # batching: the default
    shape = dict(QWEN25_05B, num_hidden_layers=opts.layers)
    torch.manual_seed(opts.seed)
    base = Qwen2ForCausalLM(Qwen2Config(**shape, pad_token_id=0)).to(torch_dtype(dtype)).to(platform.torch_device())
    base.config.use_cache = False
    rows = make_rows(opts.rows, shape["vocab_size"], opts.seed)
    tokenizer = build_tokenizer()          # only its pad id (0) is used: rows are token ids already
    ctx = SimpleNamespace(platform=platform)
    work = Path(tempfile.mkdtemp(prefix="bench-sft-"))

    # swiftbox's side attends as the training step loads it (load_for_training: the platform's kernel for its
    # batching - packed rows per sample on the CPU and on CUDA without flash-attn); the baseline keeps SDPA
    attn = platform.attn_implementation(describe_batching(cfg, platform, "qwen2") == "packing")

    def swiftbox_trainer(timer):
        model = get_peft_model(copy.deepcopy(base), lora_config(cfg))
        model.get_base_model().set_attn_implementation(attn)
        return make_trainer(cfg, ctx, dtype, model, tokenizer, rows, None, work / "swiftbox",
                            [timer, *memory_callbacks(platform)])     # the allocator set-up, as the flow adds it

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

    if opts.profile:
        return profile_side(swiftbox_trainer)
    ours = run_side("swiftbox", swiftbox_trainer, platform)
    theirs = run_side("baseline", baseline_trainer, platform)
    lengths = [len(r["input_ids"]) for r in rows]
    flops = flops_per_token(sum(p.numel() for p in base.parameters()), shape, lengths)
    if dtype == "bfloat16":
        for side in (ours, theirs):
            side["utilization"] = mfu(side["tokens_per_s"], flops, platform.device_name())
    result = {
        "bench": "sft", "device": platform.name, "device_name": platform.device_name(), "dtype": dtype,
        "cpu_count": os.cpu_count(), "torch_threads": torch.get_num_threads(), "machine": py_platform.machine(),
        "model": "random Qwen2.5-0.5B shape", "layers": opts.layers, "real_layers": QWEN25_05B["num_hidden_layers"],
        "lora": {"rank": cfg.lora.rank, "alpha": cfg.lora.alpha, "targets": cfg.lora.targets},
        "rows": len(rows), "len_min": min(lengths), "len_mean": round(sum(lengths) / len(lengths), 1),
        "len_max": max(lengths), "batch": opts.batch, "steps": opts.steps,
        "flops_per_token": flops, "attn_implementation": {"swiftbox": attn, "baseline": "sdpa"},
        "swiftbox": ours, "baseline": theirs,
        "ratio": round(ours["tokens_per_s"] / max(theirs["tokens_per_s"], 1e-9), 2),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()

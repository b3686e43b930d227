"""bench sft-levers: each speed lever alone against swiftbox's default SFT, on the real model, interleaved.

The peer bench's job (bench/peers/job.py): `smollm2-135m-instruct` (offline, from $SWIFTBOX_CACHE; `--model` takes
another registry name or a model directory), the first `--rows` of bench/data/alpaca_en_demo_256.json, LoRA r8
alpha 16 all-linear, batch 8, max length 512, fp32, seed 0, one epoch. Every run goes through swiftbox's own
model loading (swiftbox.training.model.load_for_training) and trainer (swiftbox.pipelines.sft.make_trainer), each
run in a fresh process, one after another: each round runs the default, then every lever (default, L1, L2, ..., default,
L1, L2, ...), so a lever and the default it is compared with share the machine's load. Timed from the end of the
first (warm-up) step; tokens are the non-padding ones.

Levers (one at a time, everything else the default):
- dense_mask: packed rows attend through SDPA over the dense block-diagonal mask (SWIFTBOX_CPU_ATTENTION=sdpa, the
  override) instead of the default per-sample SDPA (sdpa_varlen, swiftbox/device/attention.py);
- bf16_autocast: dtype bfloat16 (swiftbox's bf16 path), only where the CPU multiplies bf16 natively (AMX,
  AVX512-BF16, Arm BF16); elsewhere skipped with the reason;
- padded: packing off, rows padded per batch (ungrouped, so the batches hold the same rows as the default's and
  the loss curves compare step by step);
- lm_head_all_positions: TRL's fused head scores every position instead of only the labelled ones (swiftbox's
  default, swiftbox.compat.trl_scores_label_positions_only): what that default buys. TRL's chunked loss over the
  vocabulary is always on (its fused head) and has no switch to measure;
- checkpointing: activation checkpointing (gradient_checkpointing: true, non-reentrant): memory for recompute;
- threads_1: one torch thread (SWIFTBOX_THREADS=1) instead of the default policy (swiftbox/training/thread_policy.py:
  the cores other processes leave free, re-measured between steps);
- threads_torch: torch's own thread count, one per core, whatever the load (SWIFTBOX_THREADS=torch, the old default);
- unfused_adamw: `optim: adamw_torch` (foreach) instead of the default fused AdamW (transformers 5, torch >= 2.8);
- peft_lora: PEFT's own LoRA layers (base, dropout, A, B, scaling and the sum as separate ops) instead of swiftbox's
  one-call layer (swiftbox/training/lora_fused.py, the default): what the fused layer buys. Its dropout draws
  different masks from the same seed, so the loss curves agree only as closely as the dropout's effect allows;
- trl_lm_head: TRL's own folding of its fused LM head's tiles on the CPU (three GEMMs a tile, the tile projected
  again in backward) instead of swiftbox's (swiftbox/training/lm_head.py, the default: two GEMMs, the hidden-state
  gradient folded in the forward);
- compile: the decoder stack under `torch.compile(dynamic=True)` (the LM head and loss stay eager);
- the allocator (device/cpu.py `training_memory`; the default is trim mode: glibc's thresholds, the free heap handed
  back after a decoder layer only when the resident set passes the run's peak + 256 MiB):
  malloc_default: glibc alone (SWIFTBOX_CPU_MALLOC=default: the speed ceiling, the holes' peak);
  malloc_mmap: every tensor from 256 KiB up mmapped and unmapped when freed (SWIFTBOX_CPU_MALLOC=mmap, the default
  until 2026-11-29: the same peak as trim, a page fault per 4 KiB of every temporary);
  malloc_hugetlb: trim mode with malloc's memory advised as transparent huge pages (glibc.malloc.hugetlb=1, put in
  the run's GLIBC_TUNABLES: glibc reads it at start-up).
  (Fixed mmap thresholds, arena_max=1 and checkpointing under glibc alone were measured once by hand:
  docs/benchmarks.md, "The allocator, re-measured".)
  Every run reports its peak RSS (the process's, model load included), minor page faults and system seconds.

A lever is kept when it beats the default in every one of >= 2 rounds and its per-step loss curve matches the
default's (fp32 levers: 1e-3 relative; bf16: 2e-2). ONE JSON line: per side the tokens/s of every round, median
and spread, the per-step losses; per lever the ratio to the default (median, and the range over rounds), the loss
agreement, `kept` (wins without changing the loss) and the load (uptime) around every run.

    ./launch.sh bench sft-levers [--rows 24] [--rounds 2] [--levers sdpa_varlen,padded,...] [--model NAME|DIR]
                                 [--profile]

`--profile` adds one untimed run per side with swiftbox's profiler window (step 2 on) and reports its time split
(data wait / LM head + loss / forward / backward / optimizer / other) per side.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform as py_platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "bench" / "data" / "alpaca_en_demo_256.json"
LEVERS = ("dense_mask", "bf16_autocast", "padded", "lm_head_all_positions", "checkpointing", "threads_1",
          "threads_torch", "unfused_adamw", "compile", "malloc_default", "malloc_mmap", "malloc_hugetlb", "peft_lora",
          "trl_lm_head")
HUGETLB = "glibc.malloc.hugetlb=1"       # malloc's mmaps advised as transparent huge pages (glibc >= 2.35)
JOB = dict(batch=8, lr=1e-4, max_length=512, rank=8, alpha=16, dropout=0.05, seed=0)
LOSS_TOL = {"float32": 1e-3, "bfloat16": 2e-2}      # relative, per step


def uptime() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return ""


def settings(side: str) -> dict:
    """The default and each lever alone."""
    base = dict(attention="auto", dtype="float32", packing=None, label_only=True, checkpointing=False, threads=None,
                optim=None, compile=False, malloc="auto", tunables="", fused_lora=True,
                folded_head=True)
    changes = {"default": {}, "dense_mask": dict(attention="sdpa"), "bf16_autocast": dict(dtype="bfloat16"),
               "padded": dict(packing=False), "lm_head_all_positions": dict(label_only=False),
               "checkpointing": dict(checkpointing=True), "threads_1": dict(threads="1"),
               "threads_torch": dict(threads="torch"),
               "unfused_adamw": dict(optim="adamw_torch"), "compile": dict(compile=True),
               "malloc_default": dict(malloc="default"), "malloc_mmap": dict(malloc="mmap"),
               "malloc_hugetlb": dict(tunables=HUGETLB), "peft_lora": dict(fused_lora=False),
               "trl_lm_head": dict(folded_head=False)}
    return {**base, **changes[side]}


def skip_reason(side: str) -> str | None:
    if side == "bf16_autocast":
        from swiftbox.device import native_bf16_flags

        if not native_bf16_flags():
            return ("this CPU has no native bf16 matmul (no amx_bf16 / avx512_bf16 / bf16 flag): bf16 would be "
                    "emulated through fp32 and only slower")
    return None


@contextlib.contextmanager
def attention_env(mode: str):
    from swiftbox.device import ATTENTION_ENV

    old = os.environ.get(ATTENTION_ENV)
    os.environ[ATTENTION_ENV] = mode
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(ATTENTION_ENV, None)
        else:
            os.environ[ATTENTION_ENV] = old


def run_side(side: str, model_dir: Path, data: Path, work: Path, profile: bool = False) -> dict:
    import torch
    from sft import timer_callback
    from transformers import TrainerCallback

    from swiftbox.data import load_sft, tokenize_sft
    from swiftbox.device import current_platform
    from swiftbox.pipelines import make_trainer
    from swiftbox.steps import LoraConfig, ProfileConfig, SftStep
    from swiftbox.training import (
        FoldedLogProb,
        describe_batching,
        load_for_training,
        lora_linear,
        memory_callbacks,
        peft_lora_fused,
        thread_callbacks,
        trl_lm_head_folded,
        trl_lm_head_tiles,
        trl_scores_label_positions_only,
    )

    s = settings(side)
    platform = current_platform("cpu")
    os.environ["SWIFTBOX_CPU_MALLOC"] = s["malloc"]          # this process only (each run has its own)
    platform.training_memory()
    cfg = SftStep(dataset=str(data), epochs=1, batch_size=JOB["batch"], learning_rate=JOB["lr"], seed=JOB["seed"],
                  max_length=JOB["max_length"], save_steps=10 ** 6, logging_steps=1, dtype=s["dtype"],
                  lora=LoraConfig(rank=JOB["rank"], alpha=JOB["alpha"], dropout=JOB["dropout"]),
                  packing=s["packing"], group_by_length=False if s["packing"] is False else None,
                  gradient_checkpointing=s["checkpointing"],
                  profile=ProfileConfig(wait=1, warmup=0, active=2, profile_memory=False) if profile else None)
    losses: list[float] = []

    class Losses(TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kw):
            if logs and "loss" in logs:
                losses.append(round(float(logs["loss"]), 6))

    side_work = work / f"{side}-{time.monotonic_ns()}"
    if s["threads"]:
        os.environ["SWIFTBOX_THREADS"] = s["threads"]      # this process only (each run has its own)
    with attention_env(s["attention"]):
        torch.manual_seed(JOB["seed"])
        tm = load_for_training(str(model_dir), cfg, platform, s["dtype"])
        attn = tm.model.config._attn_implementation
        train, _ = tokenize_sft(load_sft(str(data), cfg.seed), tm.tokenizer, cfg.max_length)
        ctx = SimpleNamespace(platform=platform, work_dir=side_work, output=side_work, kind="sft")
        timer = timer_callback()
        extra = [timer, Losses(), *thread_callbacks(platform), *memory_callbacks(platform)]   # as the flow adds them
        if profile:
            from swiftbox.training import profile_callbacks

            extra = profile_callbacks(cfg, ctx) + extra
        trainer = make_trainer(cfg, ctx, s["dtype"], tm.model, tm.tokenizer, train, None, side_work / "ckpt", extra)
        if s["optim"]:
            trainer.args.optim = s["optim"]          # read when the optimizer is created, at train()
        if s["compile"]:
            backbone = tm.model.get_base_model()
            getattr(backbone, backbone.base_model_prefix).compile(dynamic=True)
        load = uptime()
        started = time.perf_counter()
        with contextlib.ExitStack() as stack:      # what the training flow runs train() under (training/flow.py)
            stack.enter_context(trl_lm_head_tiles())
            if s["folded_head"]:
                stack.enter_context(trl_lm_head_folded(FoldedLogProb))
            if s["fused_lora"]:
                stack.enter_context(peft_lora_fused(tm.model, lora_linear))
            if s["label_only"]:
                stack.enter_context(trl_scores_label_positions_only())
            trainer.train()
        wall = time.perf_counter() - started
    out = {"side": side, "tokens_per_s": round(timer.tokens_per_second(), 2), "steps": trainer.state.global_step,
           "wall_s": round(wall, 1), "losses": losses, "attn_implementation": attn, "dtype": s["dtype"],
           "batching": describe_batching(cfg, platform, str(tm.model.config.model_type)),
           "label_positions_only": s["label_only"], "torch_threads": torch.get_num_threads(),
           "load_before": load, "load_after": uptime(), **process_costs()}
    if profile:
        summary = json.loads((side_work / "profile" / "summary.json").read_text())
        out = {"side": side, "phase_share": {k: round(v, 3) for k, v in summary.get("phase_share", {}).items()},
               "tokens_per_s_in_window": summary.get("tokens_per_second"), "load_after": uptime()}
    del trainer, tm
    return out


def process_costs() -> dict:
    """This process's peak RSS (from the start: the model load counts), minor page faults and CPU seconds split user /
    system: what an allocator setting trades."""
    import resource

    ru = resource.getrusage(resource.RUSAGE_SELF)
    return {"peak_rss_gb": round(ru.ru_maxrss * 1024 / 1e9, 3), "minor_faults": ru.ru_minflt,
            "user_s": round(ru.ru_utime, 1), "system_s": round(ru.ru_stime, 1)}


def in_own_process(side: str, model_dir: Path, data: Path, work: Path, profile: bool = False) -> dict:
    """One run in a fresh process: in one process the later runs reuse the memory the first one faulted in, and
    measured 1.7-2.7x faster than the same default run first (2026-11-26)."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--one", side, "--model", str(model_dir), "--data", str(data),
           "--work", str(work)] + (["--profile"] if profile else [])
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    if settings(side)["tunables"]:     # read by glibc when the process starts, so it goes in the child's environment
        env["GLIBC_TUNABLES"] = ":".join(filter(None, [env.get("GLIBC_TUNABLES"), settings(side)["tunables"]]))
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    found = [line for line in proc.stdout.splitlines() if line.startswith("LEVER_ONE ")]
    if proc.returncode or not found:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1][:300]
        return {"side": side, "error": f"exit {proc.returncode}: {tail}"}
    return json.loads(found[-1].removeprefix("LEVER_ONE "))


def loss_agreement(lever: list[float], default: list[float]) -> float | None:
    """Largest relative difference of the per-step losses (None when the curves have different lengths)."""
    if not lever or len(lever) != len(default):
        return None
    return max(abs(a - b) / max(abs(b), 1e-9) for a, b in zip(lever, default))


def summarise(runs: list[dict], levers: list[str]) -> dict:
    by_side: dict[str, list[dict]] = {}
    for r in runs:
        if "error" not in r:
            by_side.setdefault(r["side"], []).append(r)
    sides = {}
    for side, rs in by_side.items():
        tps = [r["tokens_per_s"] for r in rs]
        sides[side] = {"tokens_per_s": tps, "median": round(statistics.median(tps), 2), "min": min(tps),
                       "max": max(tps), "losses": rs[0]["losses"], "attn_implementation": rs[0]["attn_implementation"],
                       "dtype": rs[0]["dtype"], "batching": rs[0]["batching"],
                       "label_positions_only": rs[0]["label_positions_only"],
                       **{k: [r.get(k) for r in rs] for k in ("peak_rss_gb", "minor_faults", "system_s")}}
    out: dict = {}
    default = by_side.get("default", [])
    for lever in levers:
        if lever not in by_side or not default:
            continue
        ratios = [round(a["tokens_per_s"] / max(b["tokens_per_s"], 1e-9), 3) for a, b in zip(by_side[lever], default)]
        diffs = [loss_agreement(a["losses"], b["losses"]) for a, b in zip(by_side[lever], default)]
        worst = None if any(d is None for d in diffs) else max(diffs)   # type: ignore[type-var]
        same_loss = worst is not None and worst <= LOSS_TOL[sides[lever]["dtype"]]
        ratio = round(sides[lever]["median"] / max(sides["default"]["median"], 1e-9), 3)
        out[lever] = {"ratio": ratio, "ratio_per_round": ratios, "ratio_range": [min(ratios), max(ratios)],
                      "loss_max_rel_diff": None if worst is None else float(f"{worst:.3g}"), "same_loss": same_loss,
                      "kept": bool(same_loss and ratio > 1.0 and min(ratios) > 1.0 and len(ratios) >= 2)}
    return {"sides": sides, "levers": out}


def machine() -> dict:
    import torch

    from swiftbox.device import cpu_flags, native_bf16_flags

    flags = cpu_flags()
    name = ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                name = line.split(":", 1)[1].strip()
                break
    return {"cpu": name or py_platform.processor() or py_platform.machine(), "cpu_count": os.cpu_count(),
            "torch_threads": torch.get_num_threads(),
            "simd_flags": sorted(f for f in flags if f.startswith(("avx", "amx", "fma")) or f == "bf16"),
            "native_bf16": native_bf16_flags()}


def versions() -> dict:
    from importlib.metadata import version

    out = {}
    for dist in ("torch", "transformers", "trl", "peft", "accelerate"):
        with contextlib.suppress(Exception):
            out[dist] = version(dist)
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        out["swiftbox_commit"] = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                                                capture_output=True, text=True, timeout=10).stdout.strip()
    return out


def attention_micro(model_dir: Path, samples: list[int], reps: int, threads: int | None) -> dict:
    """The CPU attention rule's measurement: one attention layer's forward + backward over a packed row of n
    samples (lengths drawn from the job's tokenized rows, the model's head shape), transformers' SDPA over the
    dense block-diagonal mask vs sdpa_varlen (per sample), A/B interleaved `reps` times; medians and spreads."""
    import random
    from types import SimpleNamespace as NS

    import torch
    from transformers import AutoTokenizer
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    from swiftbox.data import load_sft, tokenize_sft
    from swiftbox.device import register_varlen_attention, varlen_attention

    register_varlen_attention()
    if threads:
        torch.set_num_threads(threads)
    cfg = json.loads((model_dir / "config.json").read_text())
    heads, kv = cfg["num_attention_heads"], cfg.get("num_key_value_heads") or cfg["num_attention_heads"]
    dim = cfg.get("head_dim") or cfg["hidden_size"] // heads
    rows, _ = tokenize_sft(load_sft(str(DATA), JOB["seed"]), AutoTokenizer.from_pretrained(model_dir),
                           JOB["max_length"])
    pool = [len(r["input_ids"]) for r in rows]
    module = NS(num_key_value_groups=heads // kv, is_causal=True, training=True)
    rng = random.Random(JOB["seed"])
    torch.manual_seed(JOB["seed"])

    def once(kind: str, q, k, v, cu, mask) -> float:
        started = time.perf_counter()
        if kind == "dense_mask":
            out, _ = sdpa_attention_forward(module, q, k, v, mask, scaling=dim ** -0.5)
        else:
            out, _ = varlen_attention(module, q, k, v, mask, scaling=dim ** -0.5, cu_seq_lens_q=cu, cu_seq_lens_k=cu)
        out.sum().backward()
        return time.perf_counter() - started

    results = {}
    for n in samples:
        lengths = [rng.choice(pool) for _ in range(n)]
        total = sum(lengths)
        q = torch.randn(1, heads, total, dim, requires_grad=True)
        k, v = (torch.randn(1, kv, total, dim, requires_grad=True) for _ in range(2))
        cu = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32)
        seg = torch.repeat_interleave(torch.arange(n), torch.tensor(lengths))
        i = torch.arange(total)
        mask = ((seg[:, None] == seg[None, :]) & (i[:, None] >= i[None, :]))[None, None]
        times: dict[str, list[float]] = {"dense_mask": [], "sdpa_varlen": []}
        for kind in times:
            once(kind, q, k, v, cu, mask)                       # warm-up
        for rep in range(reps):
            for kind in (("dense_mask", "sdpa_varlen") if rep % 2 == 0 else ("sdpa_varlen", "dense_mask")):
                times[kind].append(once(kind, q, k, v, cu, mask))
        med = {kind: statistics.median(ts) for kind, ts in times.items()}
        results[str(n)] = {"tokens": total, "lengths": lengths,
                           **{f"{kind}_ms": {"median": round(med[kind] * 1e3, 2), "min": round(min(ts) * 1e3, 2),
                                             "max": round(max(ts) * 1e3, 2)} for kind, ts in times.items()},
                           "varlen_speedup": round(med["dense_mask"] / max(med["sdpa_varlen"], 1e-12), 3)}
        print("ATTENTION " + json.dumps({n: results[str(n)]}), file=sys.stderr, flush=True)
    return {"heads": heads, "kv_heads": kv, "head_dim": dim, "reps": reps, "torch_threads": torch.get_num_threads(),
            "samples_per_row": results}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m-instruct", help="registry name (offline) or model directory")
    ap.add_argument("--rows", type=int, default=24, help="first N rows of the alpaca demo (N/8 steps, one warm-up)")
    ap.add_argument("--rounds", type=int, default=2, help="interleaved rounds")
    ap.add_argument("--levers", default=",".join(LEVERS), help=f"comma list of {', '.join(LEVERS)}")
    ap.add_argument("--profile", action="store_true", help="also one untimed profiler-window run per side")
    ap.add_argument("--attention", default=None, metavar="N,N,...", help="instead: the attention rule's micro "
                    "benchmark, one layer's forward+backward, dense mask vs per sample, for packed rows of N samples")
    ap.add_argument("--reps", type=int, default=10, help="--attention: interleaved repetitions")
    ap.add_argument("--threads", type=int, default=None, help="--attention: torch threads (default: torch's)")
    ap.add_argument("--one", default=None, help=argparse.SUPPRESS)      # internal: one run, in this process
    ap.add_argument("--data", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--work", default=None, help=argparse.SUPPRESS)
    opts = ap.parse_args(argv)
    if opts.attention:
        sys.path.insert(0, str(ROOT / "bench"))
        from peers.run import resolve_job_model as resolve

        try:
            samples = [int(x) for x in opts.attention.split(",") if x.strip()]
            if not samples or min(samples) < 1 or opts.reps < 1:
                raise ValueError("--attention takes sample counts >= 1 (e.g. 2,8,16) and --reps >= 1")
            model_dir = resolve(opts.model, Path(tempfile.gettempdir()))
        except ValueError as exc:
            print(f"bench sft-levers: {exc}", file=sys.stderr)
            raise SystemExit(2) from None
        print(json.dumps({"bench": "sft-levers-attention", "model": model_dir.name, "machine": machine(),
                          "load_before": uptime(), **attention_micro(model_dir, samples, opts.reps, opts.threads),
                          "load_after": uptime()}))
        return
    if opts.one:
        sys.path.insert(0, str(ROOT / "bench"))
        got = run_side(opts.one, Path(opts.model), Path(opts.data), Path(opts.work), profile=opts.profile)
        print("LEVER_ONE " + json.dumps(got), flush=True)
        return
    levers = [x.strip() for x in opts.levers.split(",") if x.strip()]
    unknown = [x for x in levers if x not in LEVERS]
    if unknown or not levers:
        print(f"bench sft-levers: unknown lever {', '.join(unknown) or '(none given)'}; known: {', '.join(LEVERS)}",
              file=sys.stderr)
        raise SystemExit(2)
    if opts.rows < 3 * JOB["batch"] or opts.rounds < 1:
        print(f"bench sft-levers: --rows must be at least {3 * JOB['batch']} (a warm-up step and two timed ones) "
              f"and --rounds at least 1", file=sys.stderr)
        raise SystemExit(2)
    sys.path.insert(0, str(ROOT / "bench"))
    from peers.run import model_label, resolve_job_model

    try:
        model_dir = resolve_job_model(opts.model, Path(tempfile.gettempdir()))
    except ValueError as exc:
        print(f"bench sft-levers: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    work = Path(tempfile.mkdtemp(prefix="bench-sft-levers-"))
    data = work / f"alpaca-{opts.rows}.json"
    data.write_text(json.dumps(json.loads(DATA.read_text())[:opts.rows], ensure_ascii=False))
    skipped = {lever: why for lever in levers if (why := skip_reason(lever))}
    active = [lever for lever in levers if lever not in skipped]
    load_before = uptime()
    runs = []
    for r in range(opts.rounds):
        for side in ["default", *active]:
            runs.append({"round": r, **in_own_process(side, model_dir, data, work)})
            print("LEVER_RUN " + json.dumps(runs[-1]), file=sys.stderr, flush=True)   # kept if the bench is cut short
    result = {"bench": "sft-levers", "model": model_label(model_dir), "rows": opts.rows, "rounds": opts.rounds,
              "job": {**JOB, "lora_targets": "all-linear", "epochs": 1, "data": DATA.name},
              "machine": {**machine(), "load_before": load_before, "load_after": uptime()}, "versions": versions(),
              **summarise(runs, active), "skipped": skipped,
              "chunked_loss": "always on: TRL's fused LM head computes the loss over vocabulary chunks", "runs": runs}
    if opts.profile:
        result["profile"] = {side: in_own_process(side, model_dir, data, work, profile=True)
                             for side in ["default", *active]}
    print(json.dumps(result))


if __name__ == "__main__":
    main()

"""`bench sft --peers`: build the shared model once, install the peers on demand, run every side in its own
process interleaved round by round (A B C D, A B C D, ...), print ONE JSON line with medians and spreads.

The job (bench/peers/job.py holds its constants) runs on a real model by default: `--model` names it (a registry
name such as smollm2-135m-instruct, the default, or a local model directory); `--model toy` keeps the earlier
toy-vocabulary job (random weights in the Qwen2.5-0.5B width, 2 decoder layers, seed 0, the toy tokenizer, saved
once under ~/.cache/swiftbox/bench/) for history. Data bench/data/alpaca_en_demo_256.json (SFT) or
dpo_en_demo_64.json (DPO). `--quick` trains on the first 64 rows (16 pairs) for one round. After the timed rounds
one more swiftbox run (not timed, not in the medians) records a profiler window and reports its time split
(data wait / forward / backward / LM head + loss / optimizer) as `swiftbox_profile`.
"""
from __future__ import annotations

import json
import os
import platform as py_platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from peers import env, stats

ROOT = Path(__file__).resolve().parents[2]
DATA = {"sft": ROOT / "bench" / "data" / "alpaca_en_demo_256.json",
        "dpo": ROOT / "bench" / "data" / "dpo_en_demo_64.json"}
QWEN25_05B_WIDTH = dict(hidden_size=896, intermediate_size=4864, num_attention_heads=14,
                        num_key_value_heads=2, max_position_embeddings=32768, rms_norm_eps=1e-6,
                        tie_word_embeddings=True)
LAYERS = 2
TOY_VOCAB = 1024          # the toy tokenizer's: a 151936-row LM head would be 136M of the 166M weights, unused ids


def job_model(cache: Path) -> Path:
    """The shared model directory (made once): config written with both rope spellings so any transformers reads
    the same rope_theta; the toy tokenizer files copied beside it."""
    target = cache / f"peer-model-qwen2.5-0.5b-width-L{LAYERS}-v{TOY_VOCAB}-seed0"
    if (target / "model.safetensors").is_file():
        return target
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from swiftbox.catalog import COMMITTED

    tmp = Path(tempfile.mkdtemp(dir=cache))
    torch.manual_seed(0)
    config = Qwen2Config(**QWEN25_05B_WIDTH, vocab_size=TOY_VOCAB, num_hidden_layers=LAYERS,
                         pad_token_id=0, eos_token_id=2, bos_token_id=None,
                         rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})
    Qwen2ForCausalLM(config).save_pretrained(tmp)
    cfg = json.loads((tmp / "config.json").read_text())
    cfg.update(rope_theta=1000000.0, torch_dtype="float32", dtype="float32")
    (tmp / "config.json").write_text(json.dumps(cfg, indent=2))
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "generation_config.json"):
        shutil.copy(COMMITTED / name, tmp / name)
    tmp.rename(target)
    return target


DEFAULT_MODEL = "smollm2-135m-instruct"


def resolve_job_model(ref: str, cache: Path) -> Path:
    """The model directory every side trains: `toy` (the earlier random toy-vocabulary model), a local directory,
    or a model reference swiftbox resolves offline (a registry name already downloaded)."""
    if ref == "toy":
        return job_model(cache)
    if Path(ref).is_dir():
        return Path(ref).resolve()
    from swiftbox.hub import resolve_model

    try:
        return Path(resolve_model(ref))
    except Exception as exc:   # noqa: BLE001 - any failure to find it reads as one line
        raise ValueError(f"--model {ref}: not available offline ({str(exc).splitlines()[0] if str(exc) else exc}); "
                         f"download it first or pass a local model directory") from None


def model_label(model: Path) -> str:
    try:
        cfg = json.loads((model / "config.json").read_text())
    except (OSError, ValueError):
        return model.name
    return (f"{model.name} ({cfg.get('model_type')}, {cfg.get('num_hidden_layers')} layers, "
            f"vocab {cfg.get('vocab_size')})")


def subset(method: str, rows: int | None, work: Path) -> Path:
    if rows is None:
        return DATA[method]
    path = work / f"data-{method}-{rows}.json"
    path.write_text(json.dumps(json.loads(DATA[method].read_text())[:rows], ensure_ascii=False))
    return path


def side_command(side: str, method: str, model: Path, data: Path, work: Path) -> tuple[list[str], dict]:
    framework, _, flags = side.partition("+")
    py = str(env.install(framework)) if framework in stats.PEER_NAMES else sys.executable
    cmd = [py, str(ROOT / "bench" / "peers" / "job.py"), "--framework", framework, "--method", method,
           "--model", str(model), "--data", str(data), "--work", str(work)]
    if flags:
        cmd += ["--", *flags.split("+")]
    child_env = dict(os.environ, PYTHONPATH=str(ROOT) if framework in ("swiftbox", "hf") else "",
                     TOKENIZERS_PARALLELISM="false", DISABLE_VERSION_CHECK="1", USE_MODELSCOPE_HUB="0",
                     HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", WANDB_DISABLED="true")
    return cmd, child_env


def run_one(side: str, method: str, model: Path, data: Path, work: Path, rows: int, log) -> dict:
    cmd, child_env = side_command(side, method, model, data, work)
    started = time.perf_counter()
    proc = subprocess.run(cmd, env=child_env, capture_output=True, text=True, cwd=work)
    (work / "stdout.log").write_text(proc.stdout)
    (work / "stderr.log").write_text(proc.stderr)
    found = [line for line in proc.stdout.splitlines() if line.startswith("PEER_RESULT ")]
    if proc.returncode or not found:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1][:300]
        return {"error": f"exit {proc.returncode}: {tail} (logs: {work})",
                "process_s": round(time.perf_counter() - started, 1)}
    result = json.loads(found[-1].removeprefix("PEER_RESULT "))
    result["process_s"] = round(time.perf_counter() - started, 1)
    if result.get("train_seconds"):
        timed = result.get("timed_rows")
        if timed is None:     # a job without the row count: every row but the warm-up batch of 8
            timed = max(rows - 8, 0)
        result["pairs_per_s" if method == "dpo" else "rows_per_s"] = round(timed / result["train_seconds"], 3)
    print(f"[bench] {side}: {result.get(stats.PRIMARY[method])} {stats.PRIMARY[method]}, "
          f"{result.get('s_per_step')} s/step, loss {result.get('final_loss')}", file=log, flush=True)
    return result


def uptime() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "unknown"


def versions(sides: list[str]) -> dict:
    out = {}
    code = ("import importlib.metadata as m, json; print(json.dumps({p: m.version(p) for p in "
            "('torch', 'transformers', 'trl', 'peft', 'ms-swift', 'llamafactory') if "
            "__import__('importlib.util').util.find_spec(p.replace('-', '_').replace('ms_swift', 'swift'))}))")
    for side in sides:
        framework = side.split("+", 1)[0]
        if framework in out or framework == "hf":
            continue
        py = str(env.python_of(framework)) if framework in stats.PEER_NAMES else sys.executable
        try:
            out[framework] = json.loads(subprocess.run([py, "-c", code], capture_output=True, text=True,
                                                       timeout=120).stdout or "{}")
        except (OSError, ValueError, subprocess.TimeoutExpired):
            out[framework] = {}
    return out


def main(method: str, rounds: int | None, sides_text: str | None, quick: bool, rows: int | None = None,
         log=sys.stderr, model_ref: str = DEFAULT_MODEL, profile: bool = True) -> dict:
    sides = stats.parse_sides(sides_text, method)
    rounds = 1 if quick and rounds is None else (rounds or 3)
    rows = rows or ((64 if method == "sft" else 16) if quick else None)
    cache = Path(env.cache_root()).parent / "bench"
    cache.mkdir(parents=True, exist_ok=True)
    for side in sides:                       # install first, so no install lands inside a timed round
        framework = side.split("+", 1)[0]
        if framework in stats.PEER_NAMES and not env.installed(framework):
            print(f"[bench] installing {framework} into {env.venv_dir(framework)} (log: install.log there)",
                  file=log, flush=True)
            env.install(framework, log=log)
    model = resolve_job_model(model_ref, cache)
    work = Path(tempfile.mkdtemp(prefix=f"bench-peers-{method}-"))
    data = subset(method, rows, work)
    n_rows = len(json.loads(data.read_text()))
    load_before = uptime()
    results = []
    for r, side in stats.schedule(sides, rounds):
        side_work = work / f"r{r}-{side.replace('+', '_').replace('-', '_')}"
        side_work.mkdir()
        got = run_one(side, method, model, data, side_work, n_rows, log)
        results.append({"round": r, "side": side, "load": uptime(), **got})
    split = profile_split(method, model, data, work / "profile-swiftbox", n_rows, log) if profile else None
    out = {"bench": "sft-peers", "method": method, "rounds": rounds, "quick": quick, "rows": n_rows,
           "data": str(data.relative_to(ROOT)) if data.is_relative_to(ROOT) else data.name,
           "model": (f"random Qwen2.5-0.5B width, {LAYERS} layers, toy tokenizer" if model_ref == "toy"
                     else model_label(model)), "job": _job(),
           "machine": {"cpu": py_platform.processor() or py_platform.machine(), "cpu_count": os.cpu_count(),
                       "load_before": load_before, "load_after": uptime()},
           "versions": versions(sides), **stats.summary(results, sides, method), "swiftbox_profile": split,
           "runs": results}
    shutil.rmtree(work / "r0-swiftbox" / "out", ignore_errors=True)
    return out


# the swiftbox CLI flags of the profiled run (a boolean is --flag / --no-flag: `--profile.profile-memory false` was
# refused with exit 2, and the split came back as an error)
PROFILE_FLAGS = ("--profile.wait", "1", "--profile.warmup", "0", "--profile.active", "2", "--no-profile.profile-memory")


def profile_split(method: str, model: Path, data: Path, work: Path, rows: int, log) -> dict | None:
    """One untimed swiftbox run with a profiler window (steps 2-3 recorded): the share of step time per phase from
    swiftbox's own trace summary (swiftbox/diagnose/trace_summary.py)."""
    work.mkdir()
    got = run_one("swiftbox+" + "+".join(PROFILE_FLAGS), method, model, data, work, rows, log)
    summary = work / "out" / "profile" / "summary.json"
    if got.get("error") or not summary.is_file():
        return {"error": got.get("error") or "no profile summary written"}
    data_ = json.loads(summary.read_text())
    shutil.rmtree(work / "out", ignore_errors=True)
    return {k: data_[k] for k in ("phases", "phase_share", "steps", "tokens_per_s", "top_ops") if k in data_} or data_


def collect(work: Path, method: str, sides: list[str]) -> dict:
    """The summary of an interrupted run, from the PEER_RESULT lines its side directories hold (r<round>-<side>)."""
    results = []
    names = {side.replace("+", "_").replace("-", "_"): side for side in sides}
    for side_dir in sorted(work.glob("r*-*")):
        r, _, name = side_dir.name[1:].partition("-")
        log = side_dir / "stdout.log"
        found = [line for line in log.read_text().splitlines() if line.startswith("PEER_RESULT ")] \
            if log.is_file() else []
        if name in names and found:
            result = json.loads(found[-1].removeprefix("PEER_RESULT "))
            if result.get("train_seconds") and result.get("timed_rows") is not None:
                key = "pairs_per_s" if method == "dpo" else "rows_per_s"
                result[key] = round(result["timed_rows"] / result["train_seconds"], 3)
            results.append({"round": int(r), "side": names[name], **result})
    return {"bench": "sft-peers", "method": method, "collected_from": str(work), "versions": versions(sides),
            **stats.summary(results, sides, method), "runs": results}


def _job() -> dict:
    from peers.job import JOB

    return dict(JOB)

"""eval with `benchmark:`: standard benchmarks on one or more models (and/or a running server) through
lm-evaluation-harness, offline, ending in one comparison table (swiftbox.benchmarks holds the glue)."""
from __future__ import annotations

import gc
import json
import sys
import urllib.request
from pathlib import Path
from typing import Any, Optional

from swiftbox.benchmarks import catalog, data, harness, table
from swiftbox.contract import StepContext, StepResult
from swiftbox.errors import Unsupported, UserError
from swiftbox.steps import EvalStep


def locate_all(cfg: EvalStep) -> list[data.TaskData]:
    data_dir = Path(cfg.data_dir).expanduser() if cfg.data_dir else None
    if data_dir is not None and not data_dir.is_dir():
        raise UserError(f"data_dir: {cfg.data_dir}: no such directory")
    own = cfg.benchmark_data or {}
    unknown = sorted(set(own) - set(cfg.benchmark or []))
    if unknown:
        raise UserError(f"benchmark_data: {', '.join(unknown)} is not among the benchmarks run ({cfg.benchmark})")
    out: list[data.TaskData] = []
    for bench in catalog.resolve(cfg.benchmark or []):
        path = Path(own[bench.name]).expanduser() if bench.name in own else None
        if path is not None and not path.exists():
            raise UserError(f"benchmark_data: {bench.name}={own[bench.name]}: no such file or directory")
        for task in data.locate(bench, data_dir, path):
            data.check_rows(task, cfg.shots)       # every row read before lm-eval sees the file: exit 2, one line
            out.append(task)
    return out


def check_benchmarks(cfg: EvalStep, input: Optional[str] = None) -> None:
    """Refusals before any output exists: the extra, mixed modes, the data, a server's key and what scoring it by
    log-likelihood needs (exit 2 naming what is missing)."""
    why = harness.missing_extra()
    if why:
        raise Unsupported(f"eval --benchmark {why}; or evaluate your own question file with --dataset")
    if cfg.dataset or cfg.perplexity:
        raise UserError("eval: give either benchmark: (standard benchmarks) or dataset:/perplexity: (your own "
                        "files), in separate steps")
    locate_all(cfg)
    if not (cfg.url or input or cfg.compare):
        raise UserError("eval: no model to evaluate: give a model, compare: models or a url:")
    if cfg.url and cfg.api == "chat":
        needy = [b.name for b in catalog.resolve(cfg.benchmark or []) if b.loglikelihood]
        if needy:
            raise UserError(f"eval --url: {', '.join(needy)} score answers by log-likelihood, which a chat endpoint "
                            "cannot return; use --api completions (a server that returns prompt logprobs with echo) "
                            "or evaluate the model directory")
    if cfg.url:
        server_key(cfg)
        needy = [b.name for b in catalog.resolve(cfg.benchmark or []) if b.loglikelihood]
        if needy and not input:
            raise UserError(f"eval --url: {', '.join(needy)} score answers by log-likelihood, which needs the served "
                            "model's tokenizer here (to count each answer's tokens): give the model as well, "
                            "swiftbox eval MODEL --url URL --api completions")


def server_key(cfg: EvalStep) -> Optional[str]:
    """The server's API key, read the way `serve` reads it (serving.launch.api_key): --api-key, else the first line
    of --api-key-file, else $SWIFTBOX_API_KEY (None: send none)."""
    from swiftbox.serving.launch import api_key

    return api_key(cfg)


def run_benchmarks(cfg: EvalStep, ctx: StepContext) -> StepResult:
    datas = locate_all(cfg)
    refs: list[Optional[str]] = ([None] if cfg.url else []) + ([ctx.input] if ctx.input and not cfg.url else [])
    refs += list(cfg.compare or [])     # not empty: check_benchmarks refused that
    labels = _labels([cfg.url or "" if r is None else r for r in refs])
    shipped = not cfg.data_dir and not cfg.benchmark_data
    if shipped:
        print(f"eval: using the slices shipped with swiftbox ({', '.join(_sizes(datas))}): they prove the wiring, "
              "they are too small to rank models; --data-dir for the full sets", file=sys.stderr, flush=True)
    results: dict[str, Any] = {}
    scored: dict[str, Any] = {}
    n_shot: dict[str, Any] = {}
    for i, (label, ref) in enumerate(zip(labels, refs), 1):
        print(f"eval: scoring {label} ({i}/{len(refs)}) on {', '.join(_sizes(datas, cfg.limit))}",
              file=sys.stderr, flush=True)
        out = _evaluate_one(cfg, ctx, ref, datas)
        results[label], scored[label], n_shot[label] = out["results"], out["rows"], out["n_shot"]
        harness.write_samples(out["samples"], ctx.work_dir / "samples" / _safe(label))
    rows = table.rows(results, scored)
    title = f"benchmarks ({'shipped slices' if shipped else 'local data'}; limit {cfg.limit or 'none'}, " \
            f"shots {cfg.shots if cfg.shots is not None else 'task default'})"
    table.print_table(rows, labels, title)
    info = {"artifact": "report", "harness": _harness_version(),
            "models": dict(zip(labels, [r or cfg.url for r in refs])), "results": results, "table": rows,
            "rows": scored, "n_shot": n_shot, "data": {td.task: td.files for td in datas}, "shipped_slices": shipped}
    return StepResult(metrics=_headlines(rows, labels), info=info)


def _headlines(rows: list[dict[str, Any]], labels: list[str]) -> dict[str, Any]:
    """The run's figures: each benchmark's headline for the first model (`gsm8k`), and for each other model
    (`gsm8k@label`); the harness's full results per model and task are the manifest's `results`."""
    out: dict[str, Any] = {}
    for i, label in enumerate(labels):
        for row in rows:
            out[row["benchmark"] if i == 0 else f"{row['benchmark']}@{label}"] = row[label]
    return out


def _evaluate_one(cfg: EvalStep, ctx: StepContext, ref: Optional[str], datas: list[data.TaskData]) -> dict[str, Any]:
    common: dict[str, Any] = dict(limit=cfg.limit, shots=cfg.shots, max_gen_tokens=cfg.max_gen_tokens)
    if ref is None:
        assert cfg.url
        tokenizer = None
        if ctx.input:
            from swiftbox.modeling.loading import resolve_spec

            tokenizer = str(resolve_spec(ctx.input).tokenizer_dir)
        key = server_key(cfg)
        model = cfg.served_model or served_models(cfg.url, key)[0]
        needy = sorted({td.benchmark.name for td in datas if td.benchmark.loglikelihood})
        if needy and tokenizer:
            harness.check_prompt_logprobs(cfg.url, model, key, tokenizer, needy)
        lm = harness.server_lm(cfg.url, model, cfg.api, key, tokenizer, cfg.batch_size)
        try:
            return harness.evaluate(lm, datas, chat_template=cfg.api == "chat", **common)
        except UserError:
            raise
        except Exception as exc:  # noqa: BLE001 - what a remote server answered is input: one line, no traceback
            reason = str(exc).splitlines()[0] if str(exc) else ""
            raise UserError(f"eval --url: scoring against {cfg.url} failed ({type(exc).__name__}: {reason[:300]})") \
                from None
    from swiftbox.modeling.loading import load_model, load_tokenizer, resolve_spec

    spec = resolve_spec(ref)
    tokenizer = load_tokenizer(spec, trust_remote_code=cfg.trust_remote_code)
    model = load_model(spec, ctx.platform, ctx.dtype(cfg.dtype), trust_remote_code=cfg.trust_remote_code)
    try:
        lm = harness.local_lm(model, tokenizer, cfg.batch_size)
        return harness.evaluate(lm, datas, chat_template=cfg.chat_template, **common)
    finally:
        del model
        gc.collect()
        ctx.platform.empty_cache()


def served_models(url: str, api_key: Optional[str]) -> list[str]:
    """The model ids a server lists at /v1/models (one line, exit 2, when it cannot be asked)."""
    base = url.rstrip("/")
    base = base if base.endswith("/v1") else base + "/v1"
    req = urllib.request.Request(f"{base}/models", headers={"Authorization": f"Bearer {api_key}"} if api_key else {})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            ids = [m["id"] for m in json.load(resp).get("data", [])]
    except (OSError, ValueError, KeyError) as exc:
        raise UserError(f"url: {url}: cannot list the served models ({exc})") from None
    if not ids:
        raise UserError(f"url: {url}: the server lists no model")
    return ids


def _labels(refs: list[str]) -> list[str]:
    """Short column names: the last two path parts of a directory, the reference itself otherwise; unique."""
    out: list[str] = []
    for ref in refs:
        path = Path(ref)
        label = "/".join(path.parts[-2:]) if ("/" in ref and path.exists()) else ref
        while label in out:
            label += "'"
        out.append(label)
    return out


def _sizes(datas: list[data.TaskData], limit: Optional[int] = None) -> list[str]:
    """"gsm8k 25 rows", ... (with `limit`: the rows scored, `limit` per task - per subject for MMLU)."""
    counts: dict[str, int] = {}
    for td in datas:
        n = max(td.rows, 0)
        counts[td.benchmark.name] = counts.get(td.benchmark.name, 0) + (min(n, limit) if limit else n)
    return [f"{name} {n} rows" for name, n in counts.items()]


def _safe(label: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in label)


def _harness_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return f"lm-eval {version('lm_eval')}"
    except PackageNotFoundError:
        return "lm-eval"

"""The glue to lm-evaluation-harness: its tasks re-pointed at local files, a model swiftbox loaded (or a running
OpenAI-compatible server) handed to it as its `LM`, and its metrics kept exactly as it reports them.

The harness is imported only here and only when a run starts (`[eval]` extra). Runs are offline: the Hugging Face
hub and datasets libraries are told so for the duration (HF_HUB_OFFLINE / HF_DATASETS_OFFLINE), data comes from
`swiftbox.benchmarks.data`, and IFEval's import-time NLTK download is never attempted (see `nltk_offline`).
"""
from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import tempfile
from pathlib import Path
from typing import Any, Iterator, Optional

from swiftbox import logs
from swiftbox.benchmarks.catalog import EACH_SUBJECT, Benchmark
from swiftbox.benchmarks.data import TaskData
from swiftbox.errors import UserError

EXTRA = "lm_eval"
# IFEval instructions that split text into sentences with NLTK's punkt_tab model (data, not part of any package)
NEEDS_PUNKT = ("length_constraints:number_sentences", "change_case:capital_word_frequency")


def missing_extra() -> Optional[str]:
    """Why standard benchmarks cannot run here (the extra is not installed), or None."""
    try:
        found = importlib.util.find_spec(EXTRA) is not None
    except (ImportError, ValueError):
        found = False
    return None if found else "needs the [eval] extra: pip install 'swiftbox[eval]' (lm-evaluation-harness)"


@contextlib.contextmanager
def offline() -> Iterator[None]:
    """HF hub and datasets offline for the run (restored after): local files only, nothing fetched."""
    saved = {k: os.environ.get(k) for k in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")}
    os.environ.update(HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1")
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@contextlib.contextmanager
def nltk_offline(datas: list[TaskData]) -> Iterator[None]:
    """IFEval's checker module downloads NLTK's punkt_tab when it is imported and the data is absent (a network
    call and a misleading 'Downloaded' line offline). Where punkt_tab is installed nothing changes. Where it is
    not: rows whose instructions need it are refused (exit 2, with the command that installs it); otherwise the
    import is shown an empty punkt_tab folder for the run, so it does not try - no row reads the model."""
    rows = [json.loads(line) for td in datas if td.benchmark.name == "ifeval" and td.builder == "json"
            for f in td.files[td.benchmark.eval_split] for line in open(f, encoding="utf-8") if line.strip()]
    if not any(td.benchmark.name == "ifeval" for td in datas):
        yield
        return
    import nltk

    try:
        nltk.data.find("tokenizers/punkt_tab/english/")
        yield
        return
    except LookupError:
        pass
    needy = sorted({i for row in rows for i in row.get("instruction_id_list", []) if i in NEEDS_PUNKT})
    parquet = any(td.benchmark.name == "ifeval" and td.builder != "json" for td in datas)
    if needy or parquet:
        what = ", ".join(needy) or "the full IFEval set"
        raise UserError(f"benchmark ifeval: {what} needs NLTK's punkt_tab data, which is not installed; on a machine "
                        "with a network: python -m nltk.downloader punkt_tab (or copy an nltk_data folder and set "
                        "NLTK_DATA)")
    with tempfile.TemporaryDirectory(prefix="swiftbox-nltk-") as tmp:
        (Path(tmp) / "tokenizers" / "punkt_tab").mkdir(parents=True)
        nltk.data.path.insert(0, tmp)
        try:
            yield
        finally:
            nltk.data.path.remove(tmp)


def task_config(task_manager: Any, td: TaskData) -> dict[str, Any]:
    """The harness's own config of the task, reading the local files instead of the hub."""
    from swiftbox.compat import lm_eval_task_config

    cfg = lm_eval_task_config(task_manager, td.task)
    cfg.update(dataset_path=td.builder, dataset_name=None, dataset_kwargs={"data_files": td.files})
    for key in ("training_split", "validation_split", "test_split", "fewshot_split"):
        if cfg.get(key) not in td.files:
            cfg[key] = None
    if not cfg.get("training_split"):
        cfg["fewshot_split"] = td.fewshot_split
    return cfg


def harness_tasks(task_manager: Any, datas: list[TaskData]) -> list[Any]:
    """Task objects for `simple_evaluate`: one per benchmark; MMLU as the harness's Group over the subjects present
    (so its own size-weighted aggregate is the MMLU number)."""
    from lm_eval.api.group import Group
    from lm_eval.api.task import ConfigurableTask

    specs: list[Any] = []
    by_bench: dict[str, list[TaskData]] = {}
    for td in datas:
        by_bench.setdefault(td.benchmark.name, []).append(td)
    for items in by_bench.values():
        bench = items[0].benchmark
        if bench.config == EACH_SUBJECT:
            group = Group.from_config({"group": bench.task, "task": [td.task for td in items],
                                       "aggregate_metric_list": [{"metric": bench.headline.split(",")[0],
                                                                  "weight_by_size": True}]})
            for td in items:
                group.add(ConfigurableTask(config=task_config(task_manager, td)))
            specs.append(group)
        else:
            specs.append(ConfigurableTask(config=task_config(task_manager, items[0])))
    return specs


def local_lm(model: Any, tokenizer: Any, batch_size: int, max_length: Optional[int] = None) -> Any:
    """The harness's HF model class around a model swiftbox already loaded (base, adapters, GGUF import, GPTQ...).
    A PEFT wrapper is handed over as its inner transformers model, whose layers carry the adapter."""
    from lm_eval.models.huggingface import HFLM

    inner = model.get_base_model() if hasattr(model, "get_base_model") else model
    kwargs: dict[str, Any] = {"batch_size": batch_size}
    if max_length:
        kwargs["max_length"] = max_length
    return HFLM(pretrained=inner, tokenizer=tokenizer, **kwargs)


def v1(url: str) -> str:
    base = url.rstrip("/")
    return base if base.endswith("/v1") else base + "/v1"


def server_lm(url: str, model: str, api: str, api_key: Optional[str], tokenizer: Optional[str],
              batch_size: int = 1) -> Any:
    """The harness's OpenAI-compatible client for a running server: chat completions (generation tasks) or
    completions (also log-likelihood tasks, where the server returns prompt logprobs with echo). Completions go as
    token ids from the model's own tokenizer (the harness's default: the server scores exactly the tokens the
    harness counted), `batch_size` prompts per request."""
    base = v1(url)
    if api_key:
        os.environ["OPENAI_API_KEY"] = api_key
    if api == "chat":
        from lm_eval.models.openai_completions import LocalChatCompletion

        return LocalChatCompletion(model=model, base_url=f"{base}/chat/completions", tokenizer_backend=None,
                                   num_concurrent=1, max_retries=1)
    from lm_eval.models.openai_completions import LocalCompletionsAPI

    return LocalCompletionsAPI(model=model, base_url=f"{base}/completions", num_concurrent=1, max_retries=1,
                               tokenizer_backend="huggingface" if tokenizer else None, tokenizer=tokenizer,
                               tokenized_requests=bool(tokenizer), batch_size=batch_size)


PROBE_TEXT = "The quick brown fox jumps over the lazy dog."


def check_prompt_logprobs(url: str, model: str, api_key: Optional[str], tokenizer: str, benchmarks: list[str]) -> None:
    """Send the harness's log-likelihood request once (token ids, echo, logprobs 1, max_tokens 1) and refuse a
    server whose answer lacks a log-probability for every prompt token after the first: the harness would score
    each choice 0.0 against it and report a number that means nothing (exit 2, one line)."""
    import urllib.error
    import urllib.request

    from transformers import AutoTokenizer

    ids = AutoTokenizer.from_pretrained(tokenizer).encode(PROBE_TEXT, add_special_tokens=False)
    body = {"model": model, "prompt": [ids], "max_tokens": 1, "temperature": 0, "logprobs": 1, "echo": True}
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {api_key}"} if api_key else {})}
    req = urllib.request.Request(f"{v1(url)}/completions", data=json.dumps(body).encode(), headers=headers)
    what = f"eval --url: {url} cannot score {', '.join(benchmarks)} (log-likelihood)"
    try:
        with urllib.request.urlopen(req, timeout=120) as resp:
            answer = json.load(resp)
    except urllib.error.HTTPError as exc:
        detail = exc.read().decode("utf-8", "replace")
        try:
            detail = json.loads(detail)["error"]["message"]
        except (ValueError, KeyError, TypeError):
            pass
        raise UserError(f"{what}: it refused a completions request with token ids, echo and logprobs "
                        f"({exc.code}: {' '.join(str(detail).split())[:300]})") from None
    except (OSError, ValueError) as exc:
        raise UserError(f"{what}: no answer to a completions request ({exc})") from None
    try:
        values = answer["choices"][0]["logprobs"]["token_logprobs"]
    except (KeyError, IndexError, TypeError):
        values = None
    scored = values[1:len(ids)] if isinstance(values, list) and len(values) >= len(ids) else []
    if not scored or not all(isinstance(v, (int, float)) for v in scored):
        found = len(values) if isinstance(values, list) else "no"
        raise UserError(f"{what}: it returns no log-probabilities for the prompt ({found} values for a "
                        f"{len(ids)}-token prompt with echo and logprobs), so every answer would score 0; serve the "
                        "model with swiftbox serve or vLLM, or evaluate the model directory")


def evaluate(lm: Any, datas: list[TaskData], *, limit: Optional[int], shots: Optional[int], chat_template: bool,
             max_gen_tokens: Optional[int] = None, seed: int = 1234) -> dict[str, Any]:
    """Run the tasks; returns {"results": {benchmark: metrics as the harness reported them}, "rows": {benchmark:
    rows scored}, "samples": {task: [per-row records]}, "n_shot": {...}}."""
    import lm_eval
    import lm_eval.tasks
    from lm_eval.tasks import TaskManager

    tasks_root = Path(lm_eval.tasks.__file__).parent
    folders = sorted({str(tasks_root / td.benchmark.folder) for td in datas})
    # the harness's and datasets' progress bars ("Generating test split", "Running generate_until requests") and
    # its prints go to the run's log, as every library's do (swiftbox/logs.py); the step prints its own lines
    with offline(), nltk_offline(datas), logs.captured("lm-eval " + ",".join(sorted({td.task for td in datas}))):
        manager = TaskManager(include_defaults=False, include_path=folders)   # indexing every task takes a minute
        specs = harness_tasks(manager, datas)
        out = lm_eval.simple_evaluate(model=lm, tasks=specs, task_manager=manager, limit=limit, num_fewshot=shots,
                                      apply_chat_template=chat_template, log_samples=True, random_seed=seed,
                                      numpy_random_seed=seed, torch_random_seed=seed, fewshot_random_seed=seed,
                                      bootstrap_iters=0,
                                      gen_kwargs={"max_gen_toks": max_gen_tokens} if max_gen_tokens else None)
    if out is None:
        raise UserError("eval: the harness returned no results")
    found = {**out.get("results", {}), **out.get("groups", {})}
    results: dict[str, Any] = {}
    rows: dict[str, int] = {}
    for bench in _benches(datas):
        metrics = {k: v for k, v in found.get(bench.task, {}).items() if k != "alias"}
        if bench.config == EACH_SUBJECT:
            subjects = [td.task for td in datas if td.benchmark is bench]
            metrics["subtasks"] = {s: {k: v for k, v in found.get(s, {}).items() if k != "alias"} for s in subjects}
            rows[bench.name] = sum(out.get("n-samples", {}).get(s, {}).get("effective", 0) for s in subjects)
        else:
            rows[bench.name] = out.get("n-samples", {}).get(bench.task, {}).get("effective", 0)
        results[bench.name] = metrics
    return {"results": results, "rows": rows, "samples": out.get("samples", {}), "n_shot": out.get("n-shot", {})}


def _benches(datas: list[TaskData]) -> list[Benchmark]:
    out: list[Benchmark] = []
    for td in datas:
        if td.benchmark not in out:
            out.append(td.benchmark)
    return out


def write_samples(samples: dict[str, list[dict]], folder: Path) -> None:
    """Per-row records (prompt arguments, target, the model's filtered answer, per-row metrics) as jsonl."""
    folder.mkdir(parents=True, exist_ok=True)
    for task, records in samples.items():
        with open(folder / f"{task}.jsonl", "w", encoding="utf-8") as fh:
            for rec in records:
                keep = {k: rec.get(k) for k in ("doc_id", "target", "filtered_resps", "filter")}
                keep.update({k: v for k, v in rec.items() if k not in ("doc", "arguments", "resps") and k not in keep
                             and not k.endswith("_hash")})
                fh.write(json.dumps(keep, default=str) + "\n")

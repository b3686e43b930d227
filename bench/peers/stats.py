"""The pure parts of `bench sft --peers`: which sides run in which order, medians with their spread, the ratios
and the JSON line's shape. No torch, no subprocess: tests/unit/test_bench_peers.py covers all of it."""
from __future__ import annotations

import statistics

PEER_NAMES = ("ms-swift", "llamafactory")
DEFAULT_SIDES = ("swiftbox", "hf", *PEER_NAMES)
# the figure both methods are compared on: non-padding tokens per second (every framework here feeds a DPO pair as
# two full prompt+reply rows, so DPO tokens count alike); pairs/rows per second ride along, but frameworks drop or
# cut over-long rows differently, so the same file is not the same work
PRIMARY = {"sft": "tokens_per_s", "dpo": "tokens_per_s"}


def _gib(report: dict) -> dict:
    def conv(v):
        if isinstance(v, dict):
            return {k: conv(x) for k, x in v.items()}
        return round(v / 2 ** 30, 3) if isinstance(v, int) and not isinstance(v, bool) and abs(v) > 4096 else v

    return {k: conv(v) for k, v in report.items() if k != "malloc"}


def parse_sides(text: str | None, method: str) -> list[str]:
    """`swiftbox,ms-swift` -> the sides to run, swiftbox first; hf is the plain baseline (SFT: transformers'
    Trainer + PEFT; DPO: TRL's DPOTrainer + PEFT by its defaults)."""
    sides = [s.strip() for s in text.split(",") if s.strip()] if text else list(DEFAULT_SIDES)
    known = set(DEFAULT_SIDES)
    unknown = [s for s in sides if s.split("+", 1)[0] not in known]
    if unknown:
        raise ValueError(f"--sides: unknown {', '.join(unknown)}; known: {', '.join(DEFAULT_SIDES)} "
                         "(a swiftbox variant: swiftbox+FLAG, e.g. swiftbox+--no-packing)")
    if "swiftbox" not in sides:
        sides.insert(0, "swiftbox")
    return list(dict.fromkeys(sides))


def schedule(sides: list[str], rounds: int) -> list[tuple[int, str]]:
    """Interleaved: round 0 runs A B C, round 1 A B C, ... so load drifts hit every side alike."""
    if rounds < 1:
        raise ValueError("--rounds must be at least 1")
    return [(r, side) for r in range(rounds) for side in sides]


def median_spread(values: list[float]) -> dict:
    """Median with min/max (the spread) of the finite values; None-valued entries are skipped."""
    xs = sorted(float(v) for v in values if v is not None)
    if not xs:
        return {"median": None, "min": None, "max": None, "n": 0}
    return {"median": round(statistics.median(xs), 3), "min": round(xs[0], 3), "max": round(xs[-1], 3),
            "n": len(xs)}


def per_round_ratio(results: list[dict], ours: str, others: list[str], metric: str) -> list[float]:
    """For each round where `ours` and at least one of `others` finished: ours / the best of others that round."""
    ratios = []
    for r in sorted({x["round"] for x in results}):
        got = {x["side"]: x.get(metric) for x in results if x["round"] == r and x.get(metric)}
        best = max((got[o] for o in others if o in got), default=None)
        if ours in got and best:
            ratios.append(got[ours] / best)
    return ratios


def summary(results: list[dict], sides: list[str], method: str) -> dict:
    """Per side: medians with spread of the primary figure, peak RSS and final loss; the two ratios."""
    metric = PRIMARY[method]
    out: dict = {"metric": metric, "sides": {}}
    for side in sides:
        mine = [x for x in results if x["side"] == side]
        ok = [x for x in mine if not x.get("error")]
        out["sides"][side] = {
            metric: median_spread([x.get(metric) for x in ok]),
            "s_per_step": median_spread([x.get("s_per_step") for x in ok]),
            "per_s": median_spread([x.get("pairs_per_s" if method == "dpo" else "rows_per_s") for x in ok]),
            "peak_rss_gb": median_spread([x["peak_rss_bytes"] / 2 ** 30 for x in ok if x.get("peak_rss_bytes")]),
            "final_loss": median_spread([x.get("final_loss") for x in ok]),
            "runs": len(mine), "failed": [x["error"] for x in mine if x.get("error")],
            # what holds the peak (bench/peers/memory.py), GiB, from the side's first finished run
            "memory_gib": next((_gib(x["memory"]) for x in ok if x.get("memory")), None),
        }
    peers = [s for s in sides if s in PEER_NAMES]
    for side in sides:
        if side.startswith("swiftbox"):
            out["sides"][side]["vs_best_peer"] = (median_spread(per_round_ratio(results, side, peers, metric))
                                                  if peers else None)
            out["sides"][side]["vs_hf"] = (median_spread(per_round_ratio(results, side, ["hf"], metric))
                                           if "hf" in sides else None)
    out["vs_best_peer"] = median_spread(per_round_ratio(results, "swiftbox", peers, metric)) if peers else None
    out["vs_hf"] = median_spread(per_round_ratio(results, "swiftbox", ["hf"], metric)) if "hf" in sides else None
    rss = {s: out["sides"][s]["peak_rss_gb"]["median"] for s in sides}
    measured = [s for s in peers if out["sides"][s][metric]["median"]]
    best_peer = max(measured, key=lambda s: out["sides"][s][metric]["median"], default=None)
    out["best_peer"] = best_peer
    out["memory_vs_best_peer"] = (round(rss["swiftbox"] / rss[best_peer], 3)
                                  if best_peer and rss.get(best_peer) and rss.get("swiftbox") else None)
    return out

"""Makes the bundled parity task the toy model learns in the quickstart. Deterministic:
`python recipes/data/make_parity.py` rewrites the same files byte for byte.

Question: "Is N even?" or "Is N odd?"; answer "yes" or "no". Eval numbers never appear in training.
"""
from __future__ import annotations

import json
import random
from pathlib import Path

HERE = Path(__file__).parent


def question(n: int, word: str) -> tuple[str, str]:
    is_even = n % 2 == 0
    answer = "yes" if (word == "even") == is_even else "no"
    return f"Is {n} {word}?", answer


def rows(numbers, rng):
    for n in numbers:
        yield (n, *question(n, rng.choice(["even", "odd"])))


def main() -> None:
    rng = random.Random(1234)
    pool = rng.sample(range(10, 100000), 900)
    train, dpo, held_out = pool[:400], pool[400:700], pool[700:800]
    with open(HERE / "parity_sft.jsonl", "w") as fh:
        for _, q, a in rows(train, rng):
            fh.write(json.dumps({"messages": [{"role": "user", "content": q},
                                              {"role": "assistant", "content": a}]}) + "\n")
    with open(HERE / "parity_dpo.jsonl", "w") as fh:
        for _, q, a in rows(dpo, rng):
            wrong = "no" if a == "yes" else "yes"
            fh.write(json.dumps({"prompt": q, "chosen": a, "rejected": wrong}) + "\n")
    evals = list(rows(held_out, rng))
    with open(HERE / "parity_eval.jsonl", "w") as fh:
        for _, q, a in evals:
            fh.write(json.dumps({"messages": [{"role": "user", "content": q},
                                              {"role": "assistant", "content": a}]}) + "\n")
    # KTO: each preference pair as two unpaired rows (the right answer good, the wrong one bad)
    pairs = [json.loads(line) for line in (HERE / "parity_dpo.jsonl").read_text().splitlines()]
    with open(HERE / "parity_kto.jsonl", "w") as fh:
        for p in pairs:
            fh.write(json.dumps({"prompt": p["prompt"], "completion": p["chosen"], "label": True}) + "\n")
            fh.write(json.dumps({"prompt": p["prompt"], "completion": p["rejected"], "label": False}) + "\n")
    # held-out pairs (the eval questions): a reward model's pairwise accuracy on numbers it never saw
    with open(HERE / "parity_heldout_dpo.jsonl", "w") as fh:
        for _, q, a in evals:
            fh.write(json.dumps({"prompt": q, "chosen": a, "rejected": "no" if a == "yes" else "yes"}) + "\n")


if __name__ == "__main__":
    main()

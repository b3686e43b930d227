"""Makes the bundled parity task the toy model learns in the quickstart. Deterministic:
`python recipes/data/make_parity.py` rewrites the same three files byte for byte.

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
    with open(HERE / "parity_eval.jsonl", "w") as fh:
        for _, q, a in rows(held_out, rng):
            fh.write(json.dumps({"messages": [{"role": "user", "content": q},
                                              {"role": "assistant", "content": a}]}) + "\n")


if __name__ == "__main__":
    main()

"""Makes the data of recipes/real-smollm2.yaml (self-cognition: the model learns it is "Swifty" by "Acme Labs")
from two files of LLaMA-Factory's data/ directory (provenance and checksums: recipes/data/README.md).
Deterministic: `python recipes/data/make_swifty.py PATH/TO/LLaMA-Factory/data` rewrites the same files byte for byte.

    identity_swifty.json        the English rows of identity.json, {{name}} -> Swifty, {{author}} -> Acme Labs
    alpaca_en_short.json        general instructions kept beside them (so the model keeps what it knows): the
                                first rows of alpaca_en_demo.json with no input and short answers
    identity_swifty_dpo.jsonl   preference pairs on the same questions: chosen = the Swifty answer, rejected = the
                                same answer naming the model's original identity (SmolLM by Hugging Face)

The eval sets beside them (identity_eval.jsonl, knowledge_eval.jsonl) are written by hand, not by this script.
"""
from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

HERE = Path(__file__).parent
NAME, AUTHOR = "Swifty", "Acme Labs"
ORIGINAL = ("SmolLM", "Hugging Face")     # who the base model says it is (its chat template's system prompt)
SOURCES = {"identity.json": "fd029da7dd3df283ed034c82375d16d125a7b07cf1cb0316d03fb8743057d5f2",
           "alpaca_en_demo.json": "bcc37c64db1a739a0789a1b81f251146fcf4459f903474bc9e3c21bbb5628318"}
GENERAL_ROWS = 128
SHORT_CHARS = 200


def read_source(folder: Path, name: str) -> list[dict]:
    raw = (folder / name).read_bytes()
    digest = hashlib.sha256(raw).hexdigest()
    if digest != SOURCES[name]:
        sys.exit(f"{folder / name}: sha256 {digest} is not the recorded {SOURCES[name]} (another version)")
    return json.loads(raw)


def fill(text: str, name: str, author: str) -> str:
    return text.replace("{{name}}", name).replace("{{author}}", author)


def write_json(path: Path, rows: list[dict]) -> None:
    path.write_text(json.dumps(rows, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")


def main(folder: Path) -> None:
    identity = [r for r in read_source(folder, "identity.json") if r["instruction"].isascii()]
    write_json(HERE / "identity_swifty.json", [{**r, "output": fill(r["output"], NAME, AUTHOR)} for r in identity])
    general = [r for r in read_source(folder, "alpaca_en_demo.json")
               if not r["input"] and len(r["output"]) <= SHORT_CHARS and len(r["instruction"]) <= SHORT_CHARS]
    write_json(HERE / "alpaca_en_short.json", general[:GENERAL_ROWS])
    with open(HERE / "identity_swifty_dpo.jsonl", "w", encoding="utf-8") as fh:
        for r in identity:
            pair = {"prompt": r["instruction"], "chosen": fill(r["output"], NAME, AUTHOR),
                    "rejected": fill(r["output"], *ORIGINAL)}
            fh.write(json.dumps(pair, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python recipes/data/make_swifty.py PATH/TO/LLaMA-Factory/data")
    main(Path(sys.argv[1]))

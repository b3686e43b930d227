"""Preference data that teaches nothing, counted before a model loads.

A pair whose chosen reply is its rejected reply (after trimming whitespace) gives DPO, ORPO, SimPO and a reward
model nothing to prefer: its margin is 0 whatever the weights, so its gradient is too. A KTO row whose very
same reply to the very same prompt also appears with the opposite label says both "good" and "bad". All or
most such rows (more than half) is a mistake in the data: exit 2 naming the count. Some of them: one loud warning
line, and training goes on (they cost compute, not correctness).
"""
from __future__ import annotations

import json
from collections import defaultdict
from typing import Callable, Union

from swiftbox.errors import UserError


def _key(messages) -> str:
    """The messages as compared: content with surrounding whitespace trimmed, everything else as given."""
    def trim(m):
        if isinstance(m, dict) and isinstance(m.get("content"), str):
            return {**m, "content": m["content"].strip()}
        return m

    return json.dumps([trim(m) for m in messages], sort_keys=True, ensure_ascii=False, default=str)


def identical_pairs(rows: list[dict]) -> int:
    """Pairs whose chosen and rejected replies are the same."""
    return sum(_key(r["chosen"]) == _key(r["rejected"]) for r in rows)


def contradicting_rows(rows: list[dict]) -> int:
    """KTO rows whose prompt and reply also appear with the opposite label."""
    labels: dict[str, set] = defaultdict(set)
    keys = [_key(r["prompt"]) + "\0" + _key(r["completion"]) for r in rows]
    for key, row in zip(keys, rows):
        labels[key].add(bool(row["label"]))
    return sum(len(labels[key]) > 1 for key in keys)


def check_preference_rows(kind: str, dataset: Union[str, list[str]], rows: list[dict], unpaired: bool,
                          warn: Callable[[str], None]) -> None:
    """Refuse (exit 2) when all or most rows teach nothing; warn once when some do."""
    if not rows:
        return
    bad = contradicting_rows(rows) if unpaired else identical_pairs(rows)
    if not bad:
        return
    what = ("rows have the same prompt and reply as a row with the opposite label" if unpaired
            else "pairs have a chosen reply identical to the rejected one")
    unit = "rows" if unpaired else "pairs"
    text = f"{kind}: dataset {dataset}: {bad} of {len(rows)} {what}"
    if 2 * bad > len(rows):
        need = "a reply needs one label" if unpaired else "each pair needs a better and a worse reply"
        raise UserError(f"{text}; there is nothing to learn from them ({need}): fix the data")
    warn(f"WARNING: {text}; they teach nothing (their margin is 0 whatever the weights): fix or drop those {unit}")

"""Comparing a generated answer with a reference: the one definition eval's accuracy and GRPO's rule-based
rewards share (trim case, whitespace and end punctuation; `exact` or `contains`)."""
from __future__ import annotations

import string

END_PUNCTUATION = string.punctuation + "。！？ \n\t"


def normalise(text: str) -> str:
    return text.strip().strip(END_PUNCTUATION).strip().lower()


def matches(prediction: str, reference: str, how: str) -> bool:
    pred, ref = normalise(prediction), normalise(reference)
    return pred == ref if how == "exact" else (ref in pred)

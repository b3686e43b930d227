"""A training dataset read while training runs: datasets' streaming IterableDataset over a generator of
tokenized rows, shuffled in a buffer (datasets' `shuffle(buffer_size=...)`, reseeded by the trainer each pass).

`make()` builds a fresh generator for each pass (the Trainer starts a new pass when the stream ends before
`max_steps`). Only the rows in the shuffle buffer and the batch being built are in memory, never the file.
"""
from __future__ import annotations

from typing import Any, Callable, Iterator

Rows = Callable[[], Iterator[dict]]


def stream_dataset(make: Rows, *, seed: int, buffer: int) -> Any:
    """An IterableDataset of make()'s rows, shuffled through a buffer of `buffer` rows."""
    from datasets import IterableDataset

    def rows() -> Iterator[dict]:
        yield from make()

    return IterableDataset.from_generator(rows).shuffle(seed=seed, buffer_size=buffer)

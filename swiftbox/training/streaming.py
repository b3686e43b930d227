"""A training dataset read while training runs: a torch IterableDataset over a generator of tokenized rows.

`make(epoch)` builds a fresh generator for each pass (the Trainer starts a new pass when the stream ends before
`max_steps`); the pass number reseeds the shuffle buffer so passes differ. Only the rows in the shuffle buffer
and the batch being built are in memory, never the file.
"""
from __future__ import annotations

from typing import Any, Callable, Iterator

Rows = Callable[[int], Iterator[dict]]


def stream_dataset(make: Rows) -> Any:
    """An IterableDataset whose `__iter__` calls make(pass number)."""
    from torch.utils.data import IterableDataset

    class Stream(IterableDataset):
        def __init__(self) -> None:
            self.passes = 0

        def __iter__(self) -> Iterator[dict]:
            self.passes += 1
            return make(self.passes - 1)

    return Stream()

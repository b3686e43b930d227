"""Progress lines while large data is read and prepared, so a million-row file is not minutes of silence.

`each(items, what)` yields the items and, on stderr, prints a line every `SWIFTBOX_PROGRESS_EVERY` seconds
(default 10) while the loop runs - `reading data/big.jsonl: 420,000 of 1,000,000 rows (42%, 12s, ~17s left)` - and
a last line when it ends, only if it printed any. A loop that ends within the interval prints nothing: small runs
stay quiet. Lines, not a redrawn bar, so they read the same in a terminal, a pipe and a log file.
"""
from __future__ import annotations

import os
import sys
import time
from typing import Callable, Iterable, Iterator, Optional, TypeVar

T = TypeVar("T")
ENV = "SWIFTBOX_PROGRESS_EVERY"
DEFAULT_EVERY = 10.0


def every() -> float:
    """Seconds between progress lines (the environment may change it: 0 prints one per item, for tests)."""
    try:
        value = float(os.environ.get(ENV, DEFAULT_EVERY))
    except ValueError:
        return DEFAULT_EVERY
    return value if value >= 0 else DEFAULT_EVERY


def _duration(seconds: float) -> str:
    seconds = int(seconds)
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


def line(what: str, done: int, total: Optional[int], unit: str, elapsed: float) -> str:
    if not total:
        return f"{what}: {done:,} {unit} ({_duration(elapsed)})"
    text = f"{what}: {done:,} of {total:,} {unit} ({100 * done // total}%, {_duration(elapsed)}"
    if 0 < done < total:
        text += f", ~{_duration(elapsed * (total - done) / done)} left"
    return text + ")"


def each(items: Iterable[T], what: str, *, total: Optional[int] = None, unit: str = "rows",
         say: Optional[Callable[[str], None]] = None, clock: Callable[[], float] = time.monotonic) -> Iterator[T]:
    """Yield `items`, reporting progress as described above (`total`: len(items) when it has one)."""
    if total is None and hasattr(items, "__len__"):
        total = len(items)  # type: ignore[arg-type]
    say = say or (lambda text: print(text, file=sys.stderr, flush=True))
    interval = every()
    start = clock()
    next_at = start + interval
    done = 0
    printed = False
    for item in items:
        yield item
        done += 1
        now = clock()
        if now >= next_at:
            say(line(what, done, total, unit, now - start))
            printed = True
            next_at = now + interval
    if printed:
        say(line(what, done, total, unit, clock() - start) + " done")

"""The comparison table: rows = benchmarks (the harness's headline metric of each), columns = models, and the
difference of each later model from the first (base vs fine-tune vs quantized export in one place)."""
from __future__ import annotations

from typing import Any, Optional

from swiftbox.benchmarks.catalog import BENCHMARKS


def headline(name: str, metrics: dict[str, Any]) -> Optional[float]:
    value = metrics.get(BENCHMARKS[name].headline)
    return float(value) if isinstance(value, (int, float)) else None


def rows(results: dict[str, dict[str, dict[str, Any]]], scored: dict[str, dict[str, int]]) -> list[dict[str, Any]]:
    """[{benchmark, metric, rows, <model>: value, "Δ <model>": difference from the first model}, ...]."""
    labels = list(results)
    out = []
    for name in next(iter(results.values()), {}):
        row: dict[str, Any] = {"benchmark": name, "metric": BENCHMARKS[name].headline,
                               "rows": scored[labels[0]].get(name)}
        first = headline(name, results[labels[0]].get(name, {}))
        for label in labels:
            value = headline(name, results[label].get(name, {}))
            row[label] = value
            if label != labels[0]:
                row[f"Δ {label}"] = None if value is None or first is None else value - first
        out.append(row)
    return out


def print_table(table: list[dict[str, Any]], labels: list[str], title: str) -> None:
    from rich.table import Table

    from swiftbox.tables import console

    t = Table(title=title)
    for col in ("benchmark", "metric", "rows"):
        t.add_column(col, justify="right" if col == "rows" else "left")
    for i, label in enumerate(labels):
        t.add_column(label, justify="right", overflow="fold")
        if i:
            t.add_column(f"Δ vs {labels[0]}" if len(labels) == 2 else f"Δ {label}", justify="right")
    for row in table:
        cells = [row["benchmark"], row["metric"], str(row["rows"])]
        for i, label in enumerate(labels):
            cells.append(_fmt(row[label]))
            if i:
                delta = row[f"Δ {label}"]
                cells.append("" if delta is None else f"{delta:+.4f}")
        t.add_row(*cells)
    console().print(t)


def _fmt(value: Optional[float]) -> str:
    return "n/a" if value is None else f"{value:.4f}"

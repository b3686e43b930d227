"""Human-readable output of a recipe run: one table of steps and their key numbers."""
from __future__ import annotations

import json

# the figures worth a column, in the order a reader wants them
KEY_METRICS = ("accuracy", "train_loss", "eval_loss", "reward_margin", "max_abs_logit_diff", "perplexity",
               "size_bytes", "size_ratio", "seconds", "answer")


def format_value(value) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, dict):
        return json.dumps(value)[:40]
    return str(value)


def print_summary(summary: dict, as_json: bool = False) -> None:
    from rich.table import Table

    from swiftbox.tables import console, print_json

    if as_json:
        print_json(summary)
        return

    table = Table(title=f"recipe {summary['recipe']} on {summary['device']}")
    table.add_column("#", justify="right")
    table.add_column("step")
    table.add_column("ok")
    table.add_column("metrics")
    table.add_column("output", overflow="fold")
    for i, entry in enumerate(summary["steps"], 1):
        metrics = entry.get("metrics") or {}
        keys = [k for k in KEY_METRICS if k in metrics] + [k for k in metrics if k not in KEY_METRICS]
        shown = ", ".join(f"{k}={format_value(metrics[k])}" for k in keys[:5])
        table.add_row(str(i), entry["step"], "yes" if entry["ok"] else "NO", shown, str(entry.get("output") or ""))
    console().print(table)
    if summary.get("summary_path"):
        print(f"summary: {summary['summary_path']}")

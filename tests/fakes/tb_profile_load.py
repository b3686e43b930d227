"""Load a trace directory the way TensorBoard's PyTorch profiler plugin (torch-tb-profiler) does and print
what it found as one JSON line. Runs as a script: the plugin's loader spawns worker processes.

    python tests/fakes/tb_profile_load.py TRACE_DIR
"""
from __future__ import annotations

import json
import sys


def main(run_dir: str) -> None:
    from torch_tb_profiler import io
    from torch_tb_profiler.profiler.loader import RunLoader

    run = RunLoader("run", run_dir, io.Cache()).load()
    profiles = list(run.get_profiles())
    out = []
    for p in profiles:
        steps = p.overview.get("steps", {}) if p.overview else {}
        out.append({"worker": p.worker, "views": [v.name for v in p.views],
                    "steps": len(steps.get("rows", [])), "ops": len(p.operation_table_by_name.get("data", []))
                    if isinstance(p.operation_table_by_name, dict) else None})
    print(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1])

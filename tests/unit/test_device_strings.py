"""Guard: only swiftbox/device/ (and its tests) may name device strings or call torch.cuda/torch.npu."""
from __future__ import annotations

import re

from tests.conftest import ROOT

PATTERN = re.compile(r"""["'](cuda|npu)(:\d+)?["']|torch\.(cuda|npu)\.""")
ALLOWED = {"swiftbox/device", "bench/cuda.py"}   # the GPU campaign names the device it proves


def offending_lines():
    hits = []
    for folder in ("swiftbox", "menus", "bench"):
        for path in (ROOT / folder).rglob("*.py"):
            rel = path.relative_to(ROOT).as_posix()
            if rel in ALLOWED or any(rel.startswith(a + "/") for a in ALLOWED):
                continue
            for no, line in enumerate(path.read_text().splitlines(), 1):
                if PATTERN.search(line):
                    hits.append(f"{rel}:{no}: {line.strip()}")
    return hits


def test_no_device_names_outside_the_device_layer():
    assert offending_lines() == []


def test_the_guard_catches_an_offender(tmp_path):
    sample = 'x = torch.cuda.is_available()\ny = model.to("npu:0")\nz = "cudazzle"\n'
    flagged = [line for line in sample.splitlines() if PATTERN.search(line)]
    assert flagged == ['x = torch.cuda.is_available()', 'y = model.to("npu:0")']

"""A full disk is one line and exit 1 (issue 32, class 5): "no space left on DEVICE while writing X", nothing
committed. Simulated two ways: a pipeline whose write raises each library's own disk-full error (fast, everywhere),
and the real commands (merge, sft, quantize) writing into a tiny tmpfs mounted in a private mount namespace
(`unshare -rm`; skipped where the kernel does not allow one). Before issue 32 each of these was a traceback."""
from __future__ import annotations

import errno
import os
import shutil
import subprocess
import sys

import pytest

from swiftbox import cli
from swiftbox.contract import declare
from swiftbox.errors import SwiftboxError
from swiftbox.runner import run_recipe
from swiftbox.steps import STEP_TYPES
from tests.conftest import ROOT

SFT_DATA = str(ROOT / "recipes" / "data" / "parity_sft.jsonl")

# what each library raises when the disk fills (captured on a 1 MB tmpfs)
LIBRARY_ERRORS = {
    "python": lambda path: OSError(errno.ENOSPC, "No space left on device", str(path)),
    "safetensors": lambda path: RuntimeError("Error while serializing: I/O error: No space left on device "
                                             "(os error 28)"),
    "quota": lambda path: OSError(errno.EDQUOT, "Disk quota exceeded"),
}


def fake(kind: str, error):
    def run(cfg, ctx):
        (ctx.work_dir / "model.safetensors").write_bytes(b"half")
        raise error(ctx.work_dir / "model.safetensors")

    return declare(kind, STEP_TYPES[kind], produces_model=True, run=run)


@pytest.mark.parametrize("library", list(LIBRARY_ERRORS))
@pytest.mark.parametrize("kind", ["merge", "quantize", "sft"])
def test_a_full_disk_in_a_step_is_one_line_exit_1_and_nothing_committed(kind, library, tmp_path, monkeypatch):
    monkeypatch.setattr("swiftbox.runner.load_pipeline", lambda k: fake(k, LIBRARY_ERRORS[library]))
    out = tmp_path / "out"
    config = {"output": str(out)} | ({"dataset": "d.jsonl"} if kind == "sft" else {})
    with pytest.raises(SwiftboxError) as err:
        run_recipe({"name": "r", "model": "toy", "steps": [{kind: config}]}, runs_root=tmp_path)
    msg = str(err.value)
    assert type(err.value) is SwiftboxError and err.value.exit_code == 1 and "\n" not in msg
    assert msg.startswith("no space left on ") and " while writing " in msg and "out" in msg, msg
    assert not out.exists()                                              # nothing committed
    if kind == "sft":        # a training step keeps its checkpoints for resume: true, and says so
        assert (tmp_path / "out.partial").is_dir() and "resume" in msg
    else:                    # the rest frees what it half wrote
        assert not (tmp_path / "out.partial").exists()


def test_torch_save_without_an_errno_counts_when_the_disk_is_full(tmp_path, monkeypatch):
    """torch.save says only "unexpected pos": a filesystem left with nothing free is the tell."""
    error = lambda path: RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 576 vs 534")  # noqa: E731
    monkeypatch.setattr("swiftbox.runner.load_pipeline", lambda k: fake(k, error))
    monkeypatch.setattr("swiftbox.disk.free_bytes", lambda path: 0)
    with pytest.raises(SwiftboxError, match="no space left on"):
        run_recipe({"name": "r", "model": "toy", "steps": [{"merge": {"output": str(tmp_path / "m")}}]},
                   runs_root=tmp_path)
    monkeypatch.setattr("swiftbox.disk.free_bytes", lambda path: 10 << 30)   # a real bug stays a real bug
    with pytest.raises(RuntimeError, match="unexpected pos"):
        run_recipe({"name": "r", "model": "toy", "steps": [{"merge": {"output": str(tmp_path / "m")}}]},
                   runs_root=tmp_path)


def test_a_full_disk_outside_a_step_is_one_line_too(tmp_path, monkeypatch, capsys):
    """The run's own directory cannot even be made (logs, summary): still one line, exit 1."""
    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "runs"))

    monkeypatch.setattr("swiftbox.runner.logs.attach", full)
    recipe = tmp_path / "r.yaml"
    recipe.write_text(f"name: r\nmodel: toy\nsteps:\n  - eval: {{dataset: {SFT_DATA}}}\n")
    rc = cli.main(["run", str(recipe), "--runs-root", str(tmp_path / "runs")])
    err = capsys.readouterr().err.strip()
    assert rc == 1 and err.startswith("swiftbox: no space left on ") and len(err.splitlines()) == 1, err


# -- the real commands on a tiny filesystem ----------------------------------------------------------------------

def _can_mount_tmpfs() -> bool:
    if not sys.platform.startswith("linux") or shutil.which("unshare") is None:
        return False
    probe = subprocess.run(["unshare", "-rm", "sh", "-c", "mount -t tmpfs -o size=64k tmpfs /mnt 2>/dev/null || "
                            "mount -t tmpfs -o size=64k tmpfs /tmp"], capture_output=True)
    return probe.returncode == 0


needs_tmpfs = pytest.mark.skipif(not _can_mount_tmpfs(), reason="cannot mount a private tmpfs here (unshare -rm)")


def on_tiny_disk(tmp_path, size: str, *argv: str):
    """`python -m swiftbox ARGV --out DISK/out` with DISK a `size` tmpfs seen only by that process; returns the
    completed process and what was left on the disk afterwards."""
    disk = tmp_path / "disk"
    disk.mkdir()
    env = dict(os.environ, PYTHONPATH=str(ROOT), GPTQMODEL_CPU_WORKERS="2")
    script = (f'mount -t tmpfs -o size={size} tmpfs "{disk}" || exit 99; cd "{tmp_path}"; '
              f'"{sys.executable}" -m swiftbox "$@" --out "{disk}/out"; rc=$?; '
              f'(cd "{disk}" && find . | sort) > "{tmp_path}/left.txt"; exit $rc')
    done = subprocess.run(["unshare", "-rm", "sh", "-c", script, "sh", *argv], capture_output=True, text=True,
                          env=env, timeout=900)
    assert done.returncode != 99, done.stderr
    return done, (tmp_path / "left.txt").read_text().split()


def assert_one_line_full_disk(done, left):
    err = done.stderr.strip()
    assert done.returncode == 1, err[-3000:]
    last = err.splitlines()[-1]
    assert last.startswith("swiftbox: no space left on tmpfs (") and " while writing " in last, last
    assert "Traceback" not in err, err[-3000:]
    assert "./out" not in left, left                                    # nothing committed


@pytest.fixture(scope="module")
def adapter(tmp_path_factory):
    out = tmp_path_factory.mktemp("adapter") / "a"
    done = subprocess.run([sys.executable, "-m", "swiftbox", "sft", "toy", "--dataset", SFT_DATA, "--max-steps", "1",
                           "--out", str(out)], capture_output=True, text=True, cwd=ROOT, timeout=900,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert done.returncode == 0, done.stderr[-2000:]
    return out


@needs_tmpfs
@pytest.mark.slow
def test_merge_onto_a_full_disk(adapter, tmp_path):
    done, left = on_tiny_disk(tmp_path, "1m", "merge", str(adapter))
    assert_one_line_full_disk(done, left)
    assert "./out.partial" not in left                                 # what it half wrote is freed


@needs_tmpfs
@pytest.mark.slow
def test_quantize_onto_a_full_disk(tmp_path):
    done, left = on_tiny_disk(tmp_path, "300k", "quantize", "toy")
    assert_one_line_full_disk(done, left)
    assert "./out.partial" not in left


@needs_tmpfs
@pytest.mark.slow
def test_sft_onto_a_full_disk(tmp_path):
    done, left = on_tiny_disk(tmp_path, "200k", "sft", "toy", "--dataset", SFT_DATA, "--max-steps", "2",
                              "--save-steps", "1")
    assert_one_line_full_disk(done, left)
    assert "resume" in done.stderr.strip().splitlines()[-1]

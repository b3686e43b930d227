"""The real coding-agent CLIs against `swiftbox serve` on 127.0.0.1: Claude Code (`claude -p`, Anthropic
/v1/messages) and Codex (`codex exec`, a custom provider with wire_api = "responses") each run one turn
non-interactively and must exit 0 with a non-empty answer.

Slow and opt-in (`-m slow`). The CLIs come from npm into $SWIFTBOX_CACHE/agent-clis (installed once, reused);
the test is skipped with the reason when node/npm is missing or npm cannot reach its registry. HOME is a
temporary directory for each CLI, so nothing of the user's own setup is read or written.

The model: $SWIFTBOX_AGENT_CLI_MODEL (e.g. a local fine-tune) for both CLIs; unset, Claude Code runs on the toy
and Codex on the registry's real model `smollm2-135m-instruct` (the real_model_dir fixture: skipped, saying
why, where it cannot be had). Codex sends ~2k tokens of instructions and tools even when trimmed (config
below) and treats an answer cut at max_output_tokens (`response.incomplete`) as an error, so it needs a model
that ends its own answers: with the toy (random weights, never an end token) the Codex test is skipped, saying so.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from pathlib import Path
from typing import Iterator

import pytest

from tests.support.agent_clis import NAME, PACKAGES, bin_dir, child_env, claude_env, codex_config
from tests.support.serve_fixtures import serve_process

pytestmark = pytest.mark.slow

KEY = "agent-cli-key"


@pytest.fixture
def model_ref(request) -> str:
    """$SWIFTBOX_AGENT_CLI_MODEL, else the registry's real model (conftest's real_model_dir)."""
    return os.environ.get("SWIFTBOX_AGENT_CLI_MODEL") or str(request.getfixturevalue("real_model_dir"))


@pytest.fixture(scope="module")
def clis() -> Path:
    """The node_modules/.bin holding `claude` and `codex` (npm install into the cache on the first run)."""
    if not shutil.which("node") or not shutil.which("npm"):
        pytest.skip("node/npm not found: install Node.js 18+ to run the agent CLI test")
    bins = bin_dir()
    prefix = bins.parents[1]
    if not ((bins / "claude").exists() and (bins / "codex").exists()):
        prefix.mkdir(parents=True, exist_ok=True)
        try:
            done = subprocess.run(["npm", "install", "--prefix", str(prefix), "--no-audit", "--no-fund", *PACKAGES],
                                  capture_output=True, text=True, timeout=600)
        except subprocess.TimeoutExpired:
            pytest.skip("npm install timed out after 600 s (registry unreachable?)")
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or ["no output"])[-1]
            pytest.skip(f"npm could not install the agent CLIs (registry unreachable?): {last}")
    return bins


@contextlib.contextmanager
def serving(ref: str, log: Path) -> Iterator[str]:
    """`python -m swiftbox serve REF` on a free loopback port; always stopped."""
    with serve_process([ref, "--served-model-name", NAME, "--max-model-len", "8192"], log, key=KEY) as url:
        yield url


def run(cmd: list[str], env: dict[str, str], cwd: Path, timeout: int = 300) -> subprocess.CompletedProcess:
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=cwd, stdin=subprocess.DEVNULL,
                          env=child_env(env))
    print(f"$ {' '.join(cmd)}\nrc={done.returncode}\n--- stdout\n{done.stdout}\n--- stderr\n{done.stderr[-3000:]}")
    return done


def test_claude_code_completes_a_turn(clis, tmp_path):
    """On the toy (or $SWIFTBOX_AGENT_CLI_MODEL): Claude Code takes an answer cut at max_tokens (it asks to
    resume, then stops)."""
    with serving(os.environ.get("SWIFTBOX_AGENT_CLI_MODEL") or "toy", tmp_path / "serve.log") as url:
        done = run([str(clis / "claude"), "-p", "Say hi", "--tools", "", "--system-prompt", "Be brief."],
                   claude_env(tmp_path, url, KEY, max_tokens=32), tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip(), "claude -p printed no answer"



def test_codex_completes_a_turn(clis, model_ref, tmp_path):
    ref = model_ref
    if ref == "toy":
        pytest.skip("the toy never ends an answer and Codex treats response.incomplete as an error: set "
                    "SWIFTBOX_AGENT_CLI_MODEL to a model that ends its answers")
    (tmp_path / ".codex").mkdir()
    (tmp_path / "instructions.md").write_text("Be brief.\n")
    work = tmp_path / "work"
    work.mkdir()
    with serving(ref, tmp_path / "serve.log") as url:
        (tmp_path / ".codex" / "config.toml").write_text(codex_config(url, tmp_path / "instructions.md"))
        done = run([str(clis / "codex"), "exec", "--skip-git-repo-check", "Say hi"],
                   {"HOME": str(tmp_path), "CODEX_HOME": str(tmp_path / ".codex"), "SWIFTBOX_API_KEY": KEY}, work,
                   timeout=600)     # ~2k prompt tokens on a 135M model: 47 s on a quiet 2-core CPU, minutes busy
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip(), "codex exec printed no answer"

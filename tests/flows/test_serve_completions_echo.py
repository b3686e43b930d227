"""/v1/completions as lm-eval and vLLM use it, on the built-in engine (toy, float32, live on 127.0.0.1, the official
`openai` client): an echoed prompt's own log-probabilities (equal to one direct forward pass), token-id prompts,
batches of prompts (choices prompt-major), `max_tokens: 0` with echo, and an end-of-text answer that still
carries its logprobs. The engine-level test holds the prompt logprobs of a packed, a sliced and a whole prefill to
a direct transformers forward."""
from __future__ import annotations

import asyncio

import httpx
import openai
import pytest

from tests.support.serve_fixtures import KEY, start_server

pytestmark = pytest.mark.usefixtures("one_torch_thread")
PROMPT = "Is 3 odd? Answer:"


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    server, names, stop = start_server("toy", work_dir=tmp_path_factory.mktemp("serve"), dtype="float32")
    yield server
    stop()


@pytest.fixture
def client(live):
    return openai.OpenAI(base_url=live.url + "/v1", api_key=KEY, max_retries=0, timeout=120)


def backend(live):
    return live.server.config.app.state.backend


def direct_logprobs(model, ids: list[int]) -> list[float]:
    """log P(ids[t] | ids[:t]) for t >= 1 from one forward pass over the whole sequence (float32)."""
    import torch

    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0]
    logp = torch.log_softmax(logits.float(), dim=-1)
    return logp[torch.arange(len(ids) - 1), torch.tensor(ids[1:])].tolist()


def token_ids(lp) -> list[int]:
    return [int(t.removeprefix("token_id:")) for t in lp.tokens]


def test_echo_returns_the_prompts_logprobs_equal_to_a_forward_pass(client, live):
    b = backend(live)
    r = client.completions.create(model="toy", prompt=PROMPT, max_tokens=4, temperature=0, echo=True, logprobs=3,
                                  extra_body={"return_tokens_as_token_ids": True})
    choice = r.choices[0]
    lp = choice.logprobs
    prompt_ids = b.tokenizer(PROMPT)["input_ids"]
    ids = token_ids(lp)
    assert ids[:len(prompt_ids)] == prompt_ids and len(ids) == len(prompt_ids) + r.usage.completion_tokens
    assert r.usage.prompt_tokens == len(prompt_ids) and choice.text.startswith(PROMPT)
    assert lp.token_logprobs[0] is None and lp.top_logprobs[0] is None        # the first token has no context
    direct = direct_logprobs(b.engine.model, ids)
    assert max(abs(a - d) for a, d in zip(lp.token_logprobs[1:], direct, strict=True)) < 1e-4
    for token, value, top in zip(lp.tokens[1:], lp.token_logprobs[1:], lp.top_logprobs[1:], strict=True):
        # the token itself and the 3 most likely (OpenAI: up to logprobs + 1), the best at least as likely
        assert top[token] == value and 3 <= len(top) <= 4 and max(top.values()) >= value
    plain = client.completions.create(model="toy", prompt=PROMPT, max_tokens=4, temperature=0, echo=True, logprobs=3)
    offsets = plain.choices[0].logprobs.text_offset
    assert offsets == [sum(len(t) for t in plain.choices[0].logprobs.tokens[:i]) for i in range(len(offsets))]
    assert offsets[len(prompt_ids)] == len(PROMPT)       # vLLM's: the answer's first token after the prompt's text
    assert plain.choices[0].text == PROMPT + client.completions.create(
        model="toy", prompt=PROMPT, max_tokens=4, temperature=0).choices[0].text


def test_max_tokens_zero_with_echo_scores_the_prompt_only(client, live):
    b = backend(live)
    r = client.completions.create(model="toy", prompt=PROMPT, max_tokens=0, echo=True, logprobs=0)
    choice = r.choices[0]
    assert choice.text == PROMPT and choice.finish_reason == "length" and r.usage.completion_tokens == 0
    ids = b.tokenizer(PROMPT)["input_ids"]
    assert len(choice.logprobs.token_logprobs) == len(ids)
    assert max(abs(a - d) for a, d in zip(choice.logprobs.token_logprobs[1:], direct_logprobs(b.engine.model, ids),
                                          strict=True)) < 1e-4
    assert all(len(top) == 1 for top in choice.logprobs.top_logprobs[1:])      # logprobs 0: the token itself
    for body in ({"prompt": PROMPT, "max_tokens": 0}, {"prompt": PROMPT, "max_tokens": 0, "logprobs": 1}):
        bad = httpx.post(live.url + "/v1/completions", json={"model": "toy", **body},
                         headers={"Authorization": f"Bearer {KEY}"}, timeout=30)
        assert bad.status_code == 400 and bad.json()["error"]["param"] == "max_tokens", bad.text


def test_token_id_and_batched_prompts_answer_like_single_requests(client, live):
    b = backend(live)
    texts = [PROMPT, "The number 40 is", "Hello"]
    ids = [b.tokenizer(t)["input_ids"] for t in texts]
    alone = [client.completions.create(model="toy", prompt=t, max_tokens=5, temperature=0, echo=True, logprobs=2)
             for t in texts]
    one_ids = client.completions.create(model="toy", prompt=ids[0], max_tokens=5, temperature=0, echo=True,
                                        logprobs=2)
    assert one_ids.choices[0].text == alone[0].choices[0].text                 # ids echo as their decoded text
    assert one_ids.choices[0].logprobs.token_logprobs == pytest.approx(alone[0].choices[0].logprobs.token_logprobs,
                                                                       abs=1e-5)
    for prompt in (texts, ids):
        r = client.completions.create(model="toy", prompt=prompt, max_tokens=5, temperature=0, echo=True, logprobs=2,
                                      n=2)
        assert [c.index for c in r.choices] == list(range(6))
        assert r.usage.prompt_tokens == sum(len(i) for i in ids)
        assert r.usage.completion_tokens == 2 * sum(a.usage.completion_tokens for a in alone)
        for c in r.choices:          # prompt-major: choice p * n + j answers prompt p
            single = alone[c.index // 2].choices[0]
            assert c.text == single.text
            assert c.logprobs.token_logprobs == pytest.approx(single.logprobs.token_logprobs, abs=1e-4)


def test_an_end_of_text_answer_keeps_its_logprobs(client, live):
    """The toy answers "Is 7 odd?" with end-of-text at once: the answer is empty, yet its logprobs name that
    token (lm-eval drops the last entry as the generated one; a missing entry would cut the prompt's last)."""
    b = backend(live)
    r = client.completions.create(model="toy", prompt="Is 7 odd?", max_tokens=3, temperature=0, logprobs=1,
                                  extra_body={"return_tokens_as_token_ids": True})
    choice = r.choices[0]
    assert choice.text == "" and choice.finish_reason == "stop"
    eos = token_ids(choice.logprobs)
    assert eos and eos[-1] in b.engine.eos_ids and r.usage.completion_tokens == len(eos)
    echo = client.completions.create(model="toy", prompt="Is 7 odd?", max_tokens=1, temperature=0, logprobs=1,
                                     echo=True)
    n_prompt = len(b.tokenizer("Is 7 odd?")["input_ids"])
    assert len(echo.choices[0].logprobs.token_logprobs) == n_prompt + 1


def test_streamed_echo_carries_the_same_logprobs(client):
    kw = dict(model="toy", prompt=PROMPT, max_tokens=4, temperature=0, echo=True, logprobs=2)
    whole = client.completions.create(**kw).choices[0]
    chunks = [c.choices[0] for c in client.completions.create(**kw, stream=True) if c.choices]
    assert "".join(c.text for c in chunks) == whole.text
    streamed = [v for c in chunks if c.logprobs for v in c.logprobs.token_logprobs]
    assert streamed[0] is None and whole.logprobs.token_logprobs[0] is None
    assert streamed[1:] == pytest.approx(whole.logprobs.token_logprobs[1:], abs=1e-5)
    offsets = [o for c in chunks if c.logprobs for o in c.logprobs.text_offset]
    assert offsets == whole.logprobs.text_offset
    zero = [c.choices[0] for c in client.completions.create(**{**kw, "max_tokens": 0}, stream=True) if c.choices]
    assert "".join(c.text for c in zero) == PROMPT and zero[-1].finish_reason == "length"


@pytest.mark.parametrize("prompt", [[1, "a"], [[]], [], [[1, 2], "a"], [-1], [True, 2]])
def test_malformed_prompts_are_refused(live, prompt):
    r = httpx.post(live.url + "/v1/completions", json={"model": "toy", "prompt": prompt},
                   headers={"Authorization": f"Bearer {KEY}"}, timeout=30)
    assert r.status_code == 422 and r.json()["error"]["param"] == "prompt", r.text


def test_token_ids_outside_the_vocabulary_are_a_400(live):
    vocab = backend(live).vocab_size()
    r = httpx.post(live.url + "/v1/completions", json={"model": "toy", "prompt": [[1, 2], [3, vocab]]},
                   headers={"Authorization": f"Bearer {KEY}"}, timeout=30)
    assert r.status_code == 400 and str(vocab) in r.json()["error"]["message"], r.text


# -- the engine: prompt logprobs from the prefill, whatever its shape -------------------------------------------

def collect(engine, prompts: list[list[int]], k: int, max_tokens: int = 0) -> list[list]:
    from swiftbox.serving.builtin.sampling import SamplingParams

    async def main():
        loop = asyncio.get_running_loop()
        queues = []
        for ids in prompts:
            q: asyncio.Queue = asyncio.Queue()
            engine.submit_many(ids, [SamplingParams(max_tokens=max_tokens, temperature=0)], None, [q.put_nowait],
                               loop, prompt_logprobs=k)
            queues.append(q)
        out = []
        for q in queues:
            entries, end = None, None
            while end is None:
                kind, value = await asyncio.wait_for(q.get(), 120)
                if kind == "prompt_logprobs":
                    entries = value
                elif kind in ("done", "error"):
                    end = (kind, value)
            assert end == ("done", "length") and entries is not None
            out.append(entries)
        return out

    engine.start()
    try:
        return asyncio.run(main())
    finally:
        engine.shutdown()


def test_prefill_prompt_logprobs_equal_a_direct_forward(toy_parts):
    """Packed (several prompts in one forward), sliced (5 tokens a slice) and one by one: every prompt token after
    the first gets log P(token | before) and the top k, equal to a direct transformers forward (float32)."""
    import torch

    from swiftbox.serving.builtin.engine import BuiltinEngine

    model, tok = toy_parts
    texts = ["First Citizen:\nBefore we proceed any further, hear me", "Is 7 odd? Answer:", "The number 40 is", "Hi"]
    prompts = [tok(t)["input_ids"] for t in texts]
    runs = {chunk: collect(BuiltinEngine(model, tok, base_name="toy", adapters=[], max_model_len=256,
                                         prefill_chunk=chunk), prompts, k=3) for chunk in (4096, 5)}
    with torch.no_grad():
        for i, ids in enumerate(prompts):
            logp = torch.log_softmax(model(torch.tensor([ids])).logits[0].float(), dim=-1)
            for chunk, found in runs.items():
                entries = found[i]
                assert [t for t, _ in entries] == ids[1:], chunk
                for pos, (token, (value, top)) in enumerate(entries):
                    assert abs(value - float(logp[pos, token])) < 1e-4, (chunk, i, pos)
                    best = torch.topk(logp[pos], 3)
                    assert [t for t, _ in top] == best.indices.tolist()
                    assert [v for _, v in top] == pytest.approx(best.values.tolist(), abs=1e-4)


# -- the vLLM engine: the front door takes every prompt form vLLM takes and relays it unchanged --------------------

def test_the_vllm_relay_passes_token_ids_and_batches_unchanged(tmp_path):
    import json
    import sys
    from pathlib import Path

    from swiftbox.device.cpu import CpuPlatform
    from swiftbox.serving.app import build_app
    from swiftbox.serving.server import ServerThread, bind
    from swiftbox.serving.vllm.child import VllmBackend, VllmProcess
    from swiftbox.serving.vllm.plan import plan
    from swiftbox.steps import ServeStep

    probe = bind("127.0.0.1", 0)
    port = probe.getsockname()[1]
    probe.close()
    fake = str(Path(__file__).parents[1] / "fakes" / "fake_vllm.py")
    p = plan(ServeStep(engine="vllm"), CpuPlatform(), model_path="/m", base_name="base", loras={}, dtype="float32",
             port=port, executable=[sys.executable, fake])
    proc = VllmProcess(p, tmp_path / "vllm.log")
    proc.start(timeout=120)
    server = ServerThread(build_app(VllmBackend(proc), api_key="outer")).start()
    try:
        client = openai.OpenAI(base_url=server.url + "/v1", api_key="outer", max_retries=0, timeout=60)
        for prompt in ("one", ["one", "two"], [1, 2, 3], [[1, 2], [3]]):
            r = client.completions.create(model="base", prompt=prompt, max_tokens=1, echo=True, logprobs=1)
            received = [json.loads(c.text) for c in r.choices]
            assert received == ([prompt] if isinstance(prompt, str) or isinstance(prompt[0], int) else prompt)
        r = client.completions.create(model="base", prompt=[[1, 2]], max_tokens=0, echo=True, logprobs=1)
        assert json.loads(r.choices[0].text) == [1, 2]
    finally:
        server.stop()
        proc.stop()

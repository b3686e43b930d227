"""The built-in engine's scheduling on the pretrained toy (issue 16): chunked prefill gives the same greedy tokens
as a whole prefill and lets running streams decode between its slices, logprobs agree with a direct forward
pass, the n choices of a request share one prefill, and the one-stream path (no mask) answers like the batch."""
from __future__ import annotations

import asyncio
import functools
import random

import pytest

from swiftbox.serving.builtin.sampling import SamplingParams

pytestmark = pytest.mark.usefixtures("one_torch_thread")

TEXTS = ("First Citizen:\nBefore we proceed any further, hear me speak. You are all resolved rather to die",
         "Is 7 odd? Answer:", "The number 40 is", "Hello",
         "MENENIUS:\nI tell you, friends, most charitable care have the patricians of you. For your wants, your")


@pytest.fixture(scope="module")
def prompts(toy_parts):
    tok = toy_parts[1]
    return [tok(t)["input_ids"] for t in TEXTS]


def make_engine(toy_parts, **kw):
    from swiftbox.serving.builtin.engine import BuiltinEngine

    model, tok = toy_parts
    kw.setdefault("max_batch_size", 8)
    return BuiltinEngine(model, tok, base_name="toy", adapters=[], max_model_len=256, **kw)


def collect(engine, requests, stagger: float = 0.0):
    """Submit (prompt, [params...]) requests (several params: one request's n choices); returns per sequence
    (tokens, logprob infos, end, arrival order of its events)."""

    async def main():
        loop = asyncio.get_running_loop()
        order: list = []
        outs: list = []

        def record(k, ev):
            order.append((k, ev[0]))
            out = outs[k]
            if ev[0] == "token":
                out["tokens"].append(ev[1])
            elif ev[0] == "logprobs":
                out["lps"].append(ev[1])
            else:
                out["end"] = ev
                out["done"].set()

        for prompt, params in requests:
            sinks = []
            for _ in params:
                k = len(outs)
                outs.append({"tokens": [], "lps": [], "end": None, "done": asyncio.Event()})
                sinks.append(functools.partial(record, k))
            engine.submit_many(prompt, params, None, sinks, loop)
            if stagger:
                await asyncio.sleep(stagger)

        for out in outs:
            await asyncio.wait_for(out["done"].wait(), 120)
        return outs, order

    return asyncio.run(main())


def run(engine, requests, stagger: float = 0.0):
    engine.start()
    try:
        return collect(engine, requests, stagger)
    finally:
        engine.shutdown()


def greedy(n: int, **kw) -> SamplingParams:
    return SamplingParams(max_tokens=n, temperature=0.0, **kw)


def test_chunked_prefill_gives_the_whole_prefills_tokens(toy_parts, prompts):
    """Five prompts: packed into one forward (a budget that holds them all), in slices of 5 tokens, and one
    at a time whole (no packing): the same greedy tokens."""
    requests = [(p, [greedy(12)]) for p in prompts]
    whole_engine = make_engine(toy_parts, prefill_chunk=4096)
    whole, _ = run(whole_engine, requests)
    chunked_engine = make_engine(toy_parts, prefill_chunk=5)
    chunked, _ = run(chunked_engine, requests)
    single_engine = make_engine(toy_parts, prefill_chunk=4096)
    single_engine.model = _NoPacking(single_engine.model)
    single, _ = run(single_engine, requests)
    assert [o["tokens"] for o in chunked] == [o["tokens"] for o in whole] == [o["tokens"] for o in single]
    assert all(len(o["tokens"]) >= 1 for o in whole)
    assert whole_engine.stats["prefill_slices"] == 1                  # one packed forward for all five
    assert single_engine.stats["prefill_slices"] == len(prompts)
    assert chunked_engine.stats["prefill_slices"] >= sum(-(-len(p) // 5) for p in prompts if len(p) > 5)
    assert chunked_engine.stats["prefills"] == len(prompts)


class _NoPacking:
    """The model behind an attention implementation the engine cannot pack for (prompts go one by one)."""

    def __init__(self, model):
        import types

        self._model = model
        self.config = types.SimpleNamespace(_attn_implementation="flash_attention_2")

    def __call__(self, *args, **kw):
        return self._model(*args, **kw)


def test_running_streams_decode_between_the_slices_of_a_long_prompt(toy_parts, prompts):
    """A short and a long prompt arrive together: with slices of 4 tokens the short one's stream decodes a
    token between every two slices of the long prompt; with a whole prefill it waits for all of it."""
    long_prompt = prompts[0] * 3            # ~90 tokens
    requests = [(prompts[3], [greedy(60)]), (long_prompt, [greedy(2)])]

    def before_long(chunk: int):
        engine = make_engine(toy_parts, prefill_chunk=chunk)
        engine.eos_ids = set()               # the short stream must not end early
        outs, order = run(engine, requests)
        first_long = order.index((1, "token"))
        return sum(1 for k, kind in order[:first_long] if k == 0 and kind == "token"), outs

    got_chunked, outs = before_long(4)
    got_whole, outs_whole = before_long(4096)
    assert [o["tokens"] for o in outs] == [o["tokens"] for o in outs_whole]
    slices = -(-len(long_prompt) // 4)
    assert got_whole <= 2 and got_chunked >= slices - 2, (got_chunked, got_whole, slices)


def _direct_logprobs(model, prompt, tokens):
    import torch

    with torch.no_grad():
        ids = torch.tensor([prompt + tokens])
        logp = torch.log_softmax(model(ids).logits[0].float(), dim=-1)
    rows = torch.arange(len(prompt) - 1, len(prompt) + len(tokens) - 1)
    return logp[rows, torch.tensor(tokens)].tolist(), logp[rows]


@pytest.mark.parametrize("params", [greedy(10, logprobs=3),
                                    SamplingParams(max_tokens=10, temperature=0.8, top_p=0.9, seed=5, logprobs=2,
                                                   repetition_penalty=1.2)])
def test_logprobs_are_the_raw_scores_log_softmax(toy_parts, prompts, params):
    """The sum of the returned logprobs equals a direct forward pass's log-probability of the generated tokens
    (|diff| < 1e-3 in float32 with a KV cache vs one pass), whatever temperature/penalties the draw used."""
    outs, _ = run(make_engine(toy_parts), [(prompts[1], [params]), (prompts[2], [greedy(6)])])
    out = outs[0]
    assert len(out["lps"]) == len(out["tokens"]) >= 3
    assert outs[1]["lps"] == []                                     # a row that did not ask gets none
    direct, rows = _direct_logprobs(toy_parts[0], prompts[1], out["tokens"])
    got = [lp for lp, _ in out["lps"]]
    assert abs(sum(got) - sum(direct)) < 1e-3, (sum(got), sum(direct))
    assert max(abs(a - b) for a, b in zip(got, direct)) < 1e-4
    for (_, top), row in zip(out["lps"], rows):
        assert len(top) == params.logprobs
        values = [v for _, v in top]
        assert values == sorted(values, reverse=True)
        assert abs(values[0] - float(row.max())) < 1e-4
    if params.greedy:
        assert all(top[0][0] == t for (_, top), t in zip(out["lps"], out["tokens"]))


def test_n_choices_share_one_prefill(toy_parts, prompts):
    """One request with three seeded choices: one prefill, and each choice equals the same seed sent alone."""
    def sampled(seed):
        return SamplingParams(max_tokens=8, temperature=1.0, seed=seed)

    engine = make_engine(toy_parts, prefill_chunk=7)
    together, _ = run(engine, [(prompts[2], [sampled(11), sampled(12), sampled(13)])])
    assert engine.stats["prefills"] == 1
    alone_engine = make_engine(toy_parts)
    alone, _ = run(alone_engine, [(prompts[2], [sampled(s)]) for s in (11, 12, 13)])
    assert alone_engine.stats["prefills"] == 3
    assert [o["tokens"] for o in together] == [o["tokens"] for o in alone]
    assert len({tuple(o["tokens"]) for o in together}) > 1


def test_one_stream_path_answers_like_the_padded_batch(toy_parts, prompts):
    """Each prompt alone (one row: no mask) and all together (left-padded rows of different lengths, mask)
    give the same greedy tokens."""
    alone = []
    for p in prompts:
        outs, _ = run(make_engine(toy_parts), [(p, [greedy(10)])])
        alone.append(outs[0]["tokens"])
    engine = make_engine(toy_parts)
    together, _ = run(engine, [(p, [greedy(10)]) for p in prompts])
    assert [o["tokens"] for o in together] == alone
    assert engine.stats["steps"] < sum(len(t) for t in alone) - len(prompts)     # they did share decode steps


def test_incremental_detokenizing_matches_a_whole_decode(toy_parts):
    from swiftbox.serving.builtin.textstream import TextStream

    tok = toy_parts[1]
    rng = random.Random(0)
    for _ in range(30):
        ids = [rng.randrange(len(tok)) for _ in range(rng.randrange(1, 40))]
        stream = TextStream(tok, [])
        text = "".join(stream.add(i) for i in ids) + stream.flush()
        assert text == tok.decode(ids, skip_special_tokens=True)


def test_a_bad_prompt_in_a_packed_prefill_fails_alone(toy_parts, prompts):
    """A prompt the model cannot take (a token id past the vocabulary) arrives with three good ones: the packed
    forward fails, the prompts are retried one by one, only the bad one fails."""
    good = [(p, [greedy(8)]) for p in prompts[1:4]]
    alone, _ = run(make_engine(toy_parts), good)
    engine = make_engine(toy_parts)
    outs, _ = run(engine, good[:2] + [([5, len(toy_parts[1]) + 10_000, 7], [greedy(8)])] + good[2:])
    bad = outs.pop(2)
    assert bad["end"][0] == "error" and bad["tokens"] == []
    assert [o["tokens"] for o in outs] == [o["tokens"] for o in alone]
    assert all(o["end"][0] == "done" for o in outs) and engine.stats["errors"] == 1

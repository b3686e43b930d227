"""The server against the official openai client, live on 127.0.0.1 (built-in engine, toy + 2 LoRAs)."""
from __future__ import annotations

import asyncio
import json
import time

import httpx
import openai
import pytest

from tests.support.serve_fixtures import KEY, make_adapter, start_server

MSG = [{"role": "user", "content": "Is 12 even?"}]


@pytest.fixture(scope="module")
def live(toy_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("adapters")
    adapters = {"alpha": str(make_adapter(toy_dir, root / "alpha", seed=1)),
                "beta": str(make_adapter(toy_dir, root / "beta", seed=2))}
    # float32 on every CPU: these tests hold batched, streamed and solo answers to exact equality (in bf16 a batch
    # rounds differently from a single request, and a near-tie can flip a greedy token)
    server, names, stop = start_server("toy", adapters=adapters, work_dir=root, dtype="float32")
    yield server
    stop()


@pytest.fixture
def client(live):
    return openai.OpenAI(base_url=live.url + "/v1", api_key=KEY, max_retries=0, timeout=120)


@pytest.fixture
def aclient(live):
    return openai.AsyncOpenAI(base_url=live.url + "/v1", api_key=KEY, max_retries=0, timeout=120)


def raw(live, method, path, **kw):
    headers = {"Authorization": f"Bearer {KEY}", **kw.pop("headers", {})}
    return httpx.request(method, live.url + path, headers=headers, timeout=60, **kw)


def greedy(client, model, n=12, **kw):
    r = client.chat.completions.create(model=model, messages=MSG, max_tokens=n, temperature=0, **kw)
    return r.choices[0].message.content


def test_models_list_has_base_and_adapters(client):
    ids = [m.id for m in client.models.list()]
    assert ids == ["toy", "alpha", "beta"]


def test_chat_and_usage(client):
    r = client.chat.completions.create(model="toy", messages=MSG, max_tokens=8, temperature=0)
    assert r.object == "chat.completion" and r.choices[0].message.role == "assistant"
    assert isinstance(r.choices[0].message.content, str)
    assert r.choices[0].finish_reason in ("stop", "length")
    u = r.usage
    assert u.prompt_tokens > 5 and 0 <= u.completion_tokens <= 8
    assert u.total_tokens == u.prompt_tokens + u.completion_tokens


def test_stream_chunks_done_and_usage(live, client):
    chunks = list(client.chat.completions.create(model="toy", messages=MSG, max_tokens=8, temperature=0, stream=True,
                                                 stream_options={"include_usage": True}))
    assert chunks[0].choices[0].delta.role == "assistant"
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens <= 8
    assert any(c.choices and c.choices[0].finish_reason for c in chunks)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == greedy(client, "toy", 8)
    # the wire format: SSE lines ending with [DONE]
    body = {"model": "toy", "messages": MSG, "max_tokens": 4, "stream": True}
    resp = raw(live, "POST", "/v1/chat/completions", json=body)
    assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/event-stream")
    events = [line for line in resp.text.split("\n\n") if line]
    assert events[-1] == "data: [DONE]"
    assert json.loads(events[0][len("data: "):])["object"] == "chat.completion.chunk"


def test_completions_plain_and_stream(client):
    r = client.completions.create(model="toy", prompt="Is 3 odd?", max_tokens=6, temperature=0)
    assert r.object == "text_completion" and r.usage.completion_tokens <= 6
    streamed = "".join(c.choices[0].text for c in client.completions.create(
        model="toy", prompt="Is 3 odd?", max_tokens=6, temperature=0, stream=True) if c.choices)
    assert streamed == r.choices[0].text


def test_adapters_answer_differently(client):
    answers = {m: greedy(client, m) for m in ("toy", "alpha", "beta")}
    assert len(set(answers.values())) == 3, answers


def test_mixed_adapter_batch_does_not_corrupt(client, aclient):
    """Different adapters and prompt lengths in one batch (left padding, staggered admission) give the
    same greedy answers as each request alone."""
    prompts = ["Is 12 even?", "Is 12345 odd? Tell me about the quick brown fox and the lazy dog.", "hi"]
    jobs = [(m, p) for m, p in zip(("alpha", "beta", "toy", "beta", "alpha", "toy"), prompts * 2)]

    def ask_solo(m, p):
        return client.chat.completions.create(model=m, messages=[{"role": "user", "content": p}], max_tokens=16,
                                              temperature=0).choices[0].message.content

    solo = {job: ask_solo(*job) for job in set(jobs)}

    async def together():
        async def ask(i, m, p):
            await asyncio.sleep(0.05 * i)
            r = await aclient.chat.completions.create(model=m, messages=[{"role": "user", "content": p}],
                                                      max_tokens=16, temperature=0)
            return (m, p), r.choices[0].message.content
        return await asyncio.gather(*[ask(i, m, p) for i, (m, p) in enumerate(jobs)])

    for job, text in asyncio.run(together()):
        assert text == solo[job], job
    assert len({solo[j] for j in jobs}) > 3


def test_stop_sequences(client):
    full = client.completions.create(model="alpha", prompt="Is 3 odd?", max_tokens=16, temperature=0).choices[0].text
    stop = full[5:8]
    assert stop and stop in full
    r = client.completions.create(model="alpha", prompt="Is 3 odd?", max_tokens=16, temperature=0, stop=[stop])
    assert r.choices[0].text == full[:full.index(stop)] and r.choices[0].finish_reason == "stop"
    streamed = "".join(c.choices[0].text for c in client.completions.create(
        model="alpha", prompt="Is 3 odd?", max_tokens=16, temperature=0, stop=stop, stream=True) if c.choices)
    assert streamed == r.choices[0].text


def test_seed_n_and_sampling_extras(client):
    kw = dict(model="beta", messages=MSG, max_tokens=8, temperature=1.0, top_p=0.9, seed=7,
              extra_body={"top_k": 50, "repetition_penalty": 1.1}, presence_penalty=0.5, frequency_penalty=0.5)
    a = client.chat.completions.create(**kw).choices[0].message.content
    b = client.chat.completions.create(**kw).choices[0].message.content
    assert a == b
    r = client.chat.completions.create(**{**kw, "n": 2})
    assert [c.index for c in r.choices] == [0, 1]
    r = client.chat.completions.create(model="toy", messages=MSG, max_completion_tokens=3, temperature=0)
    assert r.usage.completion_tokens <= 3


def test_auth(live):
    bad = openai.OpenAI(base_url=live.url + "/v1", api_key="nope", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        bad.models.list()
    r = httpx.post(live.url + "/v1/chat/completions", json={"model": "toy", "messages": MSG}, timeout=30)
    assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"
    assert httpx.get(live.url + "/metrics", timeout=30).status_code == 401
    assert httpx.get(live.url + "/health", timeout=30).json()["status"] == "ok"


def test_errors_are_openai_shaped_4xx(live, client):
    with pytest.raises(openai.NotFoundError) as e:
        client.chat.completions.create(model="nope", messages=MSG)
    assert e.value.body["code"] == "model_not_found"
    for bad in ({"temperature": 5}, {"n": 100}, {"max_tokens": 0}, {"top_p": 0}, {"stop": ["a"] * 9}):
        with pytest.raises(openai.UnprocessableEntityError):
            client.chat.completions.create(model="toy", messages=MSG, **bad)
    with pytest.raises(openai.BadRequestError) as e:  # prompt longer than the context (256 here)
        client.completions.create(model="toy", prompt="Is 12 even? " * 200, max_tokens=4)
    assert e.value.body["code"] == "context_length_exceeded"
    with pytest.raises(openai.BadRequestError) as e:  # too many tokens asked for
        client.chat.completions.create(model="toy", messages=MSG, max_tokens=100000)
    assert e.value.body["code"] == "context_length_exceeded"
    cases = [
        (dict(content=b"{not json", headers={"content-type": "application/json"}), 400),
        (dict(content=b"[1, 2]", headers={"content-type": "application/json"}), 422),
        (dict(json={"model": "toy"}), 422),
        (dict(json={"model": "toy", "messages": "hi"}), 422),
        (dict(json={"model": "toy", "messages": [{"role": "wizard", "content": "x"}]}), 422),
        (dict(content=b"x" * (5 * 1024 * 1024), headers={"content-type": "application/json"}), 413),
    ]
    for kw, status in cases:
        r = raw(live, "POST", "/v1/chat/completions", **kw)
        assert r.status_code == status, (kw.get("json"), r.status_code, r.text[:200])
        assert set(r.json()["error"]) >= {"message", "type", "code"}
    assert raw(live, "GET", "/v1/nothing").status_code == 404
    assert raw(live, "GET", "/v1/chat/completions").status_code == 405


def metric(live, name):
    text = raw(live, "GET", "/metrics").text
    return float(next(line.split()[1] for line in text.splitlines() if line.startswith(f"swiftbox_{name} ")))


def test_disconnect_mid_stream_frees_the_slot(live):
    before = metric(live, "engine_cancelled_total")
    body = {"model": "toy", "messages": MSG, "max_tokens": 200, "stream": True, "temperature": 1.0,
            "stop": None}
    with httpx.Client(timeout=60) as c:
        with c.stream("POST", live.url + "/v1/chat/completions", json=body,
                      headers={"Authorization": f"Bearer {KEY}"}) as resp:
            lines = resp.iter_lines()
            got = [next(lines) for _ in range(4)]
            assert got[0].startswith("data: ")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and (metric(live, "num_requests_running")
                                           or metric(live, "engine_cancelled_total") == before):
        time.sleep(0.1)
    assert metric(live, "num_requests_running") == 0 and metric(live, "engine_cancelled_total") > before
    assert httpx.get(live.url + "/health", timeout=30).status_code == 200

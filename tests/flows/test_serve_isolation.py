"""Nobody can hurt anybody else on the server (issue 20): a poisoned request fails alone while its batch goes
on, every sampling number is bounded, big prompts are refused before tokenizing and tokenized off the
event loop, the waiting queue is bounded (429), an abandoned request is cancelled, and exposure rules."""
from __future__ import annotations

import asyncio
import math
import threading
import time

import httpx
import pytest

from swiftbox.errors import UserError
from swiftbox.serving.builtin.sampling import SamplingParams
from tests.support.serve_fixtures import KEY, start_server

pytestmark = pytest.mark.usefixtures("one_torch_thread")
MSG = [{"role": "user", "content": "Is 12 even?"}]


def make_engine(toy_parts, **kw):
    from swiftbox.serving.builtin.engine import BuiltinEngine

    model, tok = toy_parts
    return BuiltinEngine(model, tok, base_name="toy", adapters=[], max_model_len=256, **kw)


def run_all(engine, requests: list[tuple[list[int], SamplingParams]]):
    """Submit every request at once; returns [(tokens, (end_kind, value))] in order."""

    async def main():
        loop = asyncio.get_running_loop()
        queues = []
        for prompt, params in requests:
            q: asyncio.Queue = asyncio.Queue()
            engine.submit(prompt, params, None, q.put_nowait, loop)
            queues.append(q)
        out = []
        for q in queues:
            tokens, end = [], None
            while end is None:
                kind, value = await asyncio.wait_for(q.get(), 120)
                if kind == "token":
                    tokens.append(value)
                else:
                    end = (kind, value)
            out.append((tokens, end))
        return out

    return asyncio.run(main())


# -- 1. one request cannot break everyone's batch ----------------------------------------------------------

@pytest.mark.parametrize("poison", [
    SamplingParams(max_tokens=12, temperature=1.0, repetition_penalty=1e-300),        # fails at its first draw
    SamplingParams(max_tokens=12, temperature=1.0, presence_penalty=math.nan),        # fails in a shared decode step
    SamplingParams(max_tokens=12, temperature=0.0, frequency_penalty=-math.inf),      # +inf scores, greedy
])
def test_poisoned_request_fails_alone(toy_parts, poison):
    tok = toy_parts[1]
    # prompts the pretrained toy continues for all 12 tokens (a prompt it answers with EOS at once would end
    # the poisoned request before its settings ever touch a score)
    texts = ("First Citizen:\nBefore we proceed any further, hear me", "Is 7 odd? Answer:", "The number 40 is", "Hello")
    prompts = [tok(p)["input_ids"] for p in texts]
    innocents = [(prompts[0], SamplingParams(max_tokens=12, temperature=0.0)),
                 (prompts[1], SamplingParams(max_tokens=12, temperature=1.0, seed=7)),
                 (prompts[2], SamplingParams(max_tokens=12, temperature=0.8, top_p=0.9, seed=3)),
                 (prompts[3], SamplingParams(max_tokens=12, temperature=0.0, repetition_penalty=1.3))]
    engine = make_engine(toy_parts, max_batch_size=8)
    engine.start()
    try:
        alone = run_all(engine, innocents)
        mixed = run_all(engine, innocents[:2] + [(prompts[0], poison)] + innocents[2:])
    finally:
        engine.shutdown()
    poisoned = mixed.pop(2)
    assert poisoned[1][0] == "error" and "not finite" in poisoned[1][1]
    assert [t for t, _ in alone] == [t for t, _ in mixed]
    assert all(end[0] == "done" for _, end in mixed) and all(len(t) >= 1 for t, _ in mixed)
    assert engine.stats["errors"] == 1


# -- a live server -----------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def live(toy_parts):
    server, names, stop = start_server("toy", max_model_len=256, max_batch_size=4)
    yield server
    stop()


def post(live, path, **kw):
    return httpx.post(live.url + path, headers={"Authorization": f"Bearer {KEY}", **kw.pop("headers", {})},
                      timeout=60, **kw)


@pytest.mark.parametrize("extra", [
    {"repetition_penalty": 1e-300}, {"repetition_penalty": 0}, {"repetition_penalty": 11},
    {"top_k": 10**7}, {"max_tokens": 10**9}, {"presence_penalty": 3}, {"seed": 2**64},
])
def test_sampling_numbers_are_bounded(live, extra):
    r = post(live, "/v1/chat/completions", json={"model": "toy", "messages": MSG, "max_tokens": 2, **extra})
    assert r.status_code == 422 and r.json()["error"]["code"] == "invalid_value", r.text


@pytest.mark.parametrize("field", ["temperature", "top_p", "repetition_penalty", "frequency_penalty"])
def test_non_finite_numbers_are_refused(live, field):
    body = '{"model": "toy", "messages": [{"role": "user", "content": "hi"}], "' + field + '": NaN}'
    r = post(live, "/v1/chat/completions", content=body, headers={"content-type": "application/json"})
    assert r.status_code == 422, r.text


@pytest.mark.parametrize("path,body", [
    ("/v1/chat/completions", '{"model": "toy", "messages": [{"role": "user", "content": "hi \\ud800"}]}'),
    ("/v1/chat/completions", '{"model": "toy", "messages": [{"role": "user", "content": "hi"}], "stop": "\\udc00"}'),
    ("/v1/completions", '{"model": "toy", "prompt": "x \\ud800 y"}'),
])
def test_lone_surrogate_is_a_4xx_not_a_500(live, path, body):
    r = post(live, path, content=body, headers={"content-type": "application/json"})
    assert r.status_code == 422 and "surrogate" in r.json()["error"]["message"], r.text


def test_http_details(live):
    assert httpx.head(live.url + "/health", timeout=30).status_code == 200
    r = httpx.get(live.url + "/v1/chat/completions", headers={"Authorization": f"Bearer {KEY}"}, timeout=30)
    assert r.status_code == 405 and "POST" in r.headers.get("allow", "")
    assert r.json()["error"]["code"] == "method_not_allowed"
    from swiftbox.serving.errors import ApiError

    assert ApiError(400, "x").body()["error"]["code"] == "invalid_request"


def test_huge_prompt_refused_before_tokenizing(live):
    backend = live.server.config.app.state.backend
    calls = []
    original = backend.text_prompt
    backend.text_prompt = lambda req: calls.append(1) or original(req)
    try:
        r = post(live, "/v1/completions", json={"model": "toy", "prompt": "x" * (256 * 32 + 1)})
    finally:
        backend.text_prompt = original
    assert r.status_code == 400 and "characters" in r.json()["error"]["message"] and not calls


def test_tokenizing_does_not_block_the_event_loop(live):
    """While one prompt is being tokenized (held here on an event), /health still answers."""
    backend = live.server.config.app.state.backend
    entered, release = threading.Event(), threading.Event()
    original = backend.chat_prompt

    def slow(req):
        entered.set()
        release.wait(30)
        return original(req)

    backend.chat_prompt = slow
    result = {}
    worker = threading.Thread(target=lambda: result.update(r=post(live, "/v1/chat/completions",
                                                                  json={"model": "toy", "messages": MSG,
                                                                        "max_tokens": 2})))
    worker.start()
    try:
        assert entered.wait(30)
        assert httpx.get(live.url + "/health", timeout=5).status_code == 200   # timed out before: loop blocked
    finally:
        release.set()
        worker.join(60)
        backend.chat_prompt = original
    assert result["r"].status_code == 200


# -- bounded queue, abandoned requests ---------------------------------------------------------------------

@pytest.fixture
def paused(toy_parts):
    """A server whose engine thread has not started: requests wait in the queue (max 1) deterministically."""
    from swiftbox.serving.app import build_app
    from swiftbox.serving.builtin.backend import BuiltinBackend
    from swiftbox.serving.server import ServerThread

    engine = make_engine(toy_parts, max_batch_size=1, max_waiting=1)
    server = ServerThread(build_app(BuiltinBackend(engine, toy_parts[1], max_model_len=256))).start()
    yield server, engine
    server.stop()
    engine.shutdown()


def _wait_for(cond, timeout=30.0):
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.05)


def test_queue_is_bounded_and_abandoned_requests_are_cancelled(paused):
    server, engine = paused
    body = {"model": "toy", "messages": MSG, "max_tokens": 50}
    errors = []

    def abandon():
        try:
            httpx.post(server.url + "/v1/chat/completions", json=body, timeout=httpx.Timeout(30, read=2))
        except httpx.TimeoutException as exc:   # the client gives up and closes the connection
            errors.append(exc)

    client = threading.Thread(target=abandon)
    client.start()
    _wait_for(lambda: engine.load()["waiting"] == 1)
    r = httpx.post(server.url + "/v1/chat/completions", json=body, timeout=30)
    assert r.status_code == 429 and r.json()["error"]["code"] == "queue_full" and r.headers["retry-after"].isdigit()
    client.join(60)
    assert errors
    waiting = list(engine._waiting)
    _wait_for(lambda: all(s.cancelled for s in waiting))   # kept its place (and later its slot) forever before
    engine.start()
    _wait_for(lambda: engine.stats["cancelled"] == 1 and engine.load() == {"active": 0, "waiting": 0})
    assert engine.stats["tokens"] == 0


# -- exposure ----------------------------------------------------------------------------------------------

def test_exposure_rules(tmp_path, monkeypatch):
    from swiftbox.serving.launch import api_key, check_exposure, is_loopback
    from swiftbox.steps import ServeStep

    monkeypatch.delenv("SWIFTBOX_API_KEY", raising=False)
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("192.168.1.4") and not is_loopback("::")
    said = []
    check_exposure(ServeStep(), None, said.append)                       # loopback, no key: fine
    with pytest.raises(UserError, match="insecure-no-auth"):
        check_exposure(ServeStep(host="0.0.0.0"), None, said.append)
    check_exposure(ServeStep(host="0.0.0.0"), "k", said.append)
    assert said == []
    # --insecure-no-auth alone no longer opens a network host (issue 32): it takes a second flag saying so
    for host in ("0.0.0.0", "::", "192.168.1.4"):
        with pytest.raises(UserError, match="--expose-without-auth") as err:
            check_exposure(ServeStep(host=host, insecure_no_auth=True), None, said.append)
        assert host in str(err.value) and "adapters" in str(err.value)
    with pytest.raises(UserError, match="--insecure-no-auth"):          # the second flag alone is not enough either
        check_exposure(ServeStep(host="0.0.0.0", expose_without_auth=True), None, said.append)
    assert said == []
    check_exposure(ServeStep(host="0.0.0.0", insecure_no_auth=True, expose_without_auth=True), None, said.append)
    assert len(said) == 1 and "NO API key" in said[0]
    check_exposure(ServeStep(insecure_no_auth=True), None, said.append)  # loopback: the one flag is harmless

    keyfile = tmp_path / "key"
    keyfile.write_text("s3cret\n")
    assert api_key(ServeStep(api_key_file=str(keyfile))) == "s3cret"
    keyfile.write_text("\n")
    with pytest.raises(UserError, match="empty"):
        api_key(ServeStep(api_key_file=str(keyfile)))
    with pytest.raises(UserError, match="cannot read"):
        api_key(ServeStep(api_key_file=str(tmp_path / "none")))
    monkeypatch.setenv("SWIFTBOX_API_KEY", "from-env")
    assert api_key(ServeStep()) == "from-env"
    with pytest.raises(ValueError):  # pydantic's ValidationError is a ValueError
        ServeStep(host="")


# -- a tokenizer that fails on a request's text: 400 naming it, never 500 ----------------------------------

class RaisingTokenizer:
    """The toy tokenizer, except that encoding raises as the tokenizers library does (a bare Exception), e.g. a
    word-level vocabulary without its <unk> token meeting a word it does not know."""

    def __init__(self, inner):
        self.inner = inner

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def __call__(self, *args, **kwargs):
        raise Exception("WordLevel error: Missing [UNK] token from the vocabulary")


@pytest.mark.parametrize("path,body,param", [
    ("/v1/chat/completions", {"messages": MSG, "max_tokens": 2}, "messages"),
    ("/v1/completions", {"prompt": "Is 12 even?", "max_tokens": 2}, "prompt"),
])
def test_a_tokenizer_failure_is_a_400_naming_it(toy_parts, path, body, param):
    from swiftbox.serving.app import build_app
    from swiftbox.serving.builtin.backend import BuiltinBackend
    from swiftbox.serving.server import ServerThread

    engine = make_engine(toy_parts)
    server = ServerThread(build_app(BuiltinBackend(engine, RaisingTokenizer(toy_parts[1]), max_model_len=256))).start()
    try:
        r = httpx.post(server.url + path, json={"model": "toy", **body}, timeout=30)
    finally:
        server.stop()
        engine.shutdown()
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["type"] == "invalid_request_error" and error["code"] == "tokenizer_error" and error["param"] == param
    assert error["message"] == (f"the model's tokenizer cannot encode this {param}: WordLevel error: Missing [UNK] "
                                "token from the vocabulary")

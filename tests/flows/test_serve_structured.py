"""Structured outputs and logit_bias, served (issue 39), through the official clients: `response_format` (chat),
`text.format` (Responses), `output_config.format` (Messages) held by the built-in engine's grammar mask
(swiftbox/serving/builtin/constrained.py) and `logit_bias` on chat and completions - on toy (the mechanics: n,
streaming, seeds, refusals) and on the real model `smollm2-135m-instruct`, greedy, where the answer is what
`client.chat.completions.parse` (pydantic), `client.responses.parse` and the anthropic client's `output_format`
read back. The sampler's own checks without a server: tests/unit/test_constrained_decoding.py."""
from __future__ import annotations

import json

import anthropic
import httpx
import jsonschema_rs
import openai
import pytest
from pydantic import BaseModel, Field

from tests.support.serve_fixtures import KEY, start_server

pytestmark = pytest.mark.usefixtures("one_torch_thread")

# a finite language: the toy's (random) answers under it always end, well inside max_tokens
SCHEMA = {"type": "object", "properties": {
    "color": {"enum": ["red", "green", "blue"]}, "ok": {"type": "boolean"},
    "n": {"type": "integer", "minimum": 0, "maximum": 99},
    "tags": {"type": "array", "items": {"type": "string", "maxLength": 5}, "maxItems": 2}},
    "required": ["color", "ok", "n"], "additionalProperties": False}
FORMAT = {"type": "json_schema", "json_schema": {"name": "thing", "schema": SCHEMA, "strict": True}}
MSG = [{"role": "user", "content": "Describe a thing."}]


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    server, _names, stop = start_server("toy", work_dir=tmp_path_factory.mktemp("structured"), max_model_len=512)
    yield server
    stop()


@pytest.fixture
def client(toy):
    return openai.OpenAI(base_url=toy.url + "/v1", api_key=KEY, max_retries=0, timeout=120)


def ids_of(choice) -> list[int]:
    """The generated token ids (logprobs with return_tokens_as_token_ids)."""
    return [int(c.token.removeprefix("token_id:")) for c in choice.logprobs.content]


def test_json_schema_every_choice_validates_whole_and_streamed(client):
    """n sampled choices, each under its own matcher: every answer is a complete object of the schema, and the
    streamed answers are the same text as the whole ones (per-choice seeds)."""
    kw = dict(model="toy", messages=MSG, response_format=FORMAT, n=3, temperature=1.0, seed=11, max_tokens=120)
    whole = client.chat.completions.create(**kw)
    texts = [c.message.content for c in sorted(whole.choices, key=lambda c: c.index)]
    for choice, text in zip(sorted(whole.choices, key=lambda c: c.index), texts):
        jsonschema_rs.validate(SCHEMA, json.loads(text))
        assert choice.finish_reason == "stop"
    assert len(set(texts)) > 1             # sampled, not one fixed answer
    streamed = [""] * 3
    for chunk in client.chat.completions.create(**kw, stream=True):
        for c in chunk.choices:
            streamed[c.index] += c.delta.content or ""
    assert streamed == texts


def test_json_object_answer_is_json_or_the_start_of_one(client):
    r = client.chat.completions.create(model="toy", messages=MSG, response_format={"type": "json_object"},
                                       temperature=1.0, seed=3, n=4, max_tokens=60)
    done = [c for c in r.choices if c.finish_reason == "stop"]
    for c in r.choices:
        assert c.message.content.startswith("{")
    for c in done:
        assert isinstance(json.loads(c.message.content), dict)
    assert done                  # the toy closes at least one object in 4 tries (seeded: always the same)


def test_logit_bias_bans_and_forces_tokens_on_chat_and_completions(client):
    extra = {"return_tokens_as_token_ids": True}
    kw = dict(model="toy", messages=MSG, temperature=0, max_tokens=8, logprobs=True, extra_body=extra)
    plain = ids_of(client.chat.completions.create(**kw).choices[0])
    banned = plain[0]
    after = ids_of(client.chat.completions.create(**kw, logit_bias={str(banned): -100}).choices[0])
    assert after[0] != banned and banned not in after
    forced = next(t for t in range(40, 400) if t not in plain)
    got = ids_of(client.chat.completions.create(**kw, logit_bias={str(forced): 100}).choices[0])
    assert got == [forced] * 8
    c = client.completions.create(model="toy", prompt="The sky is", temperature=0, max_tokens=5, logprobs=0,
                                  logit_bias={str(forced): 100}, extra_body=extra)
    assert c.choices[0].logprobs.tokens == [f"token_id:{forced}"] * 5


def test_bad_formats_and_biases_are_400s_naming_the_field(toy, client):
    cases = [({"logit_bias": {"abc": 1}}, "logit_bias"), ({"logit_bias": {"5": 101}}, "logit_bias"),
             ({"logit_bias": {"100000": 5}}, "logit_bias"),        # past the toy's 1,024-token vocabulary
             ({"response_format": {"type": "xml"}}, "response_format.type"),
             ({"response_format": {"type": "json_schema", "json_schema": {
                 "name": "x", "schema": {"$ref": "#/$defs/none"}}}}, "response_format"),
             ({"response_format": {"type": "json_object"},
               "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]},
              "response_format")]
    for extra, param in cases:
        r = httpx.post(toy.url + "/v1/chat/completions", headers={"Authorization": f"Bearer {KEY}"}, timeout=60,
                       json={"model": "toy", "messages": MSG, "max_tokens": 4, **extra})
        assert r.status_code == 400, (extra, r.text)
        assert r.json()["error"]["param"] == param, r.text
    with pytest.raises(openai.BadRequestError) as err:
        client.completions.create(model="toy", prompt="x", logit_bias={"-3": 1})
    assert err.value.body["param"] == "logit_bias"
    for extra, param in (({"structured_outputs": {"json": SCHEMA}}, "structured_outputs"),   # vLLM's own extras
                         ({"response_format": {"type": "json_object"}}, "response_format")):
        with pytest.raises(openai.BadRequestError) as err:
            client.completions.create(model="toy", prompt="x", extra_body=extra)
        assert err.value.body["param"] == param
    bad = {"type": "json_schema", "name": "x", "schema": {"allOf": [{"type": "string"}, {"type": "integer"}]}}
    with pytest.raises(openai.BadRequestError) as err:
        client.responses.create(model="toy", input="hi", text={"format": bad})
    assert err.value.body["param"] == "text.format" and "Unsatisfiable" in err.value.body["message"]
    r = httpx.post(toy.url + "/v1/messages", headers={"x-api-key": KEY}, timeout=60,
                   json={"model": "toy", "max_tokens": 4, "messages": MSG,
                         "output_config": {"format": {"type": "json_schema", "schema": {"type": "frobnicate"}}}})
    assert r.status_code == 400 and r.json()["type"] == "error", r.text
    assert "output_config.format" in r.json()["error"]["message"]


def test_a_prompt_that_opens_reasoning_refuses_a_format(toy, client, monkeypatch):
    """A template whose generation prompt opens the reasoning block (DeepSeek-R1's way): the answer starts inside
    it, and a format held from the first token would bind the reasoning - a 400 naming the field, not a wrong
    answer. The same request without a format is answered."""
    tokenizer = toy.server.config.app.state.backend.tokenizer
    opens = ("{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
             "{% if add_generation_prompt %}assistant: <think>\n{% endif %}")
    monkeypatch.setattr(tokenizer, "chat_template", opens)
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(model="toy", messages=MSG, response_format=FORMAT, max_tokens=4)
    assert err.value.body["param"] == "response_format" and "reasoning" in err.value.body["message"]
    answered = client.chat.completions.create(model="toy", messages=MSG, max_tokens=4, temperature=0)
    assert answered.choices[0].finish_reason in ("stop", "length")


def test_responses_text_format_and_messages_output_config_hold_the_answer(toy, client):
    r = client.responses.create(model="toy", input="Describe a thing.", temperature=0, max_output_tokens=120,
                                text={"format": {"type": "json_schema", "name": "thing", "schema": SCHEMA}})
    assert r.status == "completed"
    jsonschema_rs.validate(SCHEMA, json.loads(r.output_text))
    ac = anthropic.Anthropic(base_url=toy.url, api_key=KEY, max_retries=0, timeout=120)
    m = ac.messages.create(model="toy", max_tokens=120, messages=MSG, extra_body={"temperature": 0},
                           output_config={"format": {"type": "json_schema", "schema": SCHEMA}})
    assert m.stop_reason == "end_turn" and [b.type for b in m.content] == ["text"]
    jsonschema_rs.validate(SCHEMA, json.loads(m.content[0].text))


def test_the_vllm_engine_is_sent_the_fields_as_the_client_sent_them(tmp_path):
    """engine: vllm honours these itself (its structured outputs; checked in vLLM 0.32's source: chat
    response_format, Responses text.format, Messages output_config.format); the front door checks their shape and
    relays the body unchanged (tests/fakes/fake_vllm.py answers with what it received)."""
    import sys

    from swiftbox.device.cpu import CpuPlatform
    from swiftbox.serving.app import build_app
    from swiftbox.serving.server import ServerThread, bind
    from swiftbox.serving.vllm.child import VllmBackend, VllmProcess
    from swiftbox.serving.vllm.plan import plan
    from swiftbox.steps import ServeStep
    from tests.support.serve_fixtures import ROOT

    probe = bind("127.0.0.1", 0)
    port = probe.getsockname()[1]
    probe.close()
    p = plan(ServeStep(engine="vllm"), CpuPlatform(), model_path="/m", base_name="base", loras={},
             dtype="float32", port=port, executable=[sys.executable, str(ROOT / "tests" / "fakes" / "fake_vllm.py")])
    proc = VllmProcess(p, tmp_path / "vllm.log")
    proc.start(timeout=120)
    server = ServerThread(build_app(VllmBackend(proc), api_key="k")).start()
    try:
        client = openai.OpenAI(base_url=server.url + "/v1", api_key="k", max_retries=0, timeout=60)
        sent = dict(response_format=FORMAT, logit_bias={"5": -100, "7": 3})
        r = client.chat.completions.create(model="base", messages=[{"role": "user", "content": "echo"}], **sent)
        received = json.loads(r.choices[0].message.content)
        assert {k: received[k] for k in sent} == sent
        text = {"format": {"type": "json_schema", "name": "thing", "schema": SCHEMA, "strict": True}}
        body = {"model": "base", "input": "hi", "text": text}
        r2 = httpx.post(server.url + "/v1/responses", json=body, headers={"Authorization": "Bearer k"}, timeout=60)
        assert r2.json()["received"] == body
        body = {"model": "base", "max_tokens": 8, "messages": MSG,
                "output_config": {"effort": "low", "format": {"type": "json_schema", "schema": SCHEMA}}}
        r3 = httpx.post(server.url + "/v1/messages", json=body, headers={"x-api-key": "k"}, timeout=60)
        assert r3.json()["received"] == body
        with pytest.raises(openai.BadRequestError) as err:       # a malformed format never reaches vLLM
            client.chat.completions.create(model="base", messages=MSG, response_format={"type": "json_schema"})
        assert err.value.body["param"] == "response_format.json_schema"
    finally:
        server.stop()
        proc.stop()


# -- the real model ---------------------------------------------------------------------------------------

class City(BaseModel):
    name: str
    country: str
    population: int = Field(ge=0, le=100_000_000)   # bounded: unbounded, the 135M model greedily repeats a digit


ASK = [{"role": "user", "content": "Describe Paris as JSON with its name, country and population."}]


@pytest.fixture(scope="module")
def real(shared_real_server):
    """The session's real-model server (conftest: fp32, max_model_len 2048)."""
    server, names = shared_real_server
    return server, names.primary


def test_real_model_answers_a_pydantic_model_through_parse(real):
    """The issue's proof: without a format the 135M model answers prose; with `parse(response_format=City)` the
    answer is a City (greedy, so the same every run), whole and streamed."""
    server, name = real
    client = openai.OpenAI(base_url=server.url + "/v1", api_key=KEY, max_retries=0, timeout=300)
    prose = client.chat.completions.create(model=name, messages=ASK, temperature=0, max_tokens=12)
    with pytest.raises(ValueError):
        json.loads(prose.choices[0].message.content)
    r = client.chat.completions.parse(model=name, messages=ASK, response_format=City, temperature=0, max_tokens=100)
    city = r.choices[0].message.parsed
    assert isinstance(city, City) and r.choices[0].finish_reason == "stop"
    assert city.name == "Paris"
    with client.chat.completions.stream(model=name, messages=ASK, response_format=City, temperature=0,
                                        max_tokens=100) as stream:
        final = stream.get_final_completion()
    assert final.choices[0].message.parsed == city


@pytest.mark.slow     # ~150 tokens of the real model (36 s on the shared 2-core box at load 8; ~9 s quiet)
def test_real_model_json_object_responses_parse_and_anthropic_output_format(real):
    server, name = real
    client = openai.OpenAI(base_url=server.url + "/v1", api_key=KEY, max_retries=0, timeout=300)
    cat = [{"role": "user", "content": "Give me a JSON object about a cat."}]
    r = client.chat.completions.create(model=name, messages=cat, response_format={"type": "json_object"},
                                       temperature=0, max_tokens=150)
    assert r.choices[0].finish_reason == "stop" and isinstance(json.loads(r.choices[0].message.content), dict)
    parsed = client.responses.parse(model=name, input=ASK[0]["content"], text_format=City, temperature=0,
                                    max_output_tokens=100)
    assert isinstance(parsed.output_parsed, City) and parsed.output_parsed.name == "Paris"
    ac = anthropic.Anthropic(base_url=server.url, api_key=KEY, max_retries=0, timeout=300)
    # the schema as sent (the SDK's `output_format=City` moves numeric bounds into descriptions, as Anthropic's API
    # takes no bounds - and unbounded, the 135M model repeats a digit); anthropic>=2 declares no temperature
    with ac.messages.stream(model=name, max_tokens=100, messages=ASK, extra_body={"temperature": 0},
                            output_config={"format": {"type": "json_schema", "schema": City.model_json_schema()}}
                            ) as stream:
        message = stream.get_final_message()
    assert message.stop_reason == "end_turn"
    assert City.model_validate_json(message.content[0].text).name == "Paris"

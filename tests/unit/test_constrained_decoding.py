"""Structured outputs and logit_bias in the built-in engine's sampler, without a server: the grammar's mask
(swiftbox/serving/builtin/constrained.py, llguidance) on the toy tokenizer under random scores, and OpenAI's
logit_bias; the request checks of each family's protocol.py. The served proof (openai / anthropic clients, the real
model) is tests/flows/test_serve_structured.py."""
from __future__ import annotations

import json

import pytest
import torch

from swiftbox.serving.anthropic.protocol import anthropic_format
from swiftbox.serving.builtin.constrained import Grammars
from swiftbox.serving.builtin.sampling import SamplingParams, sample_row
from swiftbox.serving.errors import ApiError
from swiftbox.serving.openai.protocol import logit_bias, response_format
from swiftbox.serving.responses.protocol import responses_format

# a finite language (bounded numbers, strings and arrays): every walk under random scores ends within the step bound
SCHEMA = {"type": "object", "properties": {
    "color": {"enum": ["red", "green", "blue"]}, "ok": {"type": "boolean"},
    "n": {"type": "integer", "minimum": -5, "maximum": 999},
    "tags": {"type": "array", "items": {"type": "string", "maxLength": 6}, "maxItems": 2}},
    "required": ["color", "ok", "n"], "additionalProperties": False}


@pytest.fixture(scope="module")
def toy_grammars():
    from swiftbox.modeling.loading import load_tokenizer, resolve_spec

    tok = load_tokenizer(resolve_spec("toy"))
    return tok, Grammars(tok, {tok.eos_token_id}, len(tok))


def walk(tok, grammar, seed: int, params: SamplingParams, steps: int = 200) -> tuple[list[int], str]:
    """Sample under the grammar from random scores: every pick must be a token the mask allowed, and the mask must
    forbid something. Returns (tokens, how it ended: 'complete', 'eos' or 'steps')."""
    gen = torch.Generator().manual_seed(seed)
    matcher, out = grammar.matcher(), []
    for _ in range(steps):
        logits = torch.randn(len(tok), generator=gen) * 4
        allowed = matcher.allowed()
        assert 0 < int(allowed.sum()) < len(tok)
        token = sample_row(logits, params, [], out, gen, matcher)
        assert allowed[token], (tok.decode(out), token)
        if token == tok.eos_token_id:
            return out, "eos"
        out.append(token)
        if matcher.advance(token):
            return out, "complete"
    return out, "steps"


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_every_token_is_allowed_and_the_answer_validates_against_the_schema(toy_grammars, temperature):
    import jsonschema_rs

    tok, grammars = toy_grammars
    grammar = grammars.compile("json_schema", SCHEMA, "response_format")
    for seed in range(12):
        out, ended = walk(tok, grammar, seed, SamplingParams(temperature=temperature))
        assert ended == "complete", tok.decode(out)
        answer = json.loads(tok.decode(out))
        jsonschema_rs.validate(SCHEMA, answer)
        assert tok.decode(out).startswith('{"color": ')      # the one-space separators of JSON_OPTIONS


def test_json_object_answers_are_json_objects(toy_grammars):
    tok, grammars = toy_grammars
    grammar = grammars.compile("json_object", None, "response_format")
    ended = []
    for seed in range(16):
        out, how = walk(tok, grammar, seed, SamplingParams(temperature=1.0))
        ended.append(how)
        if how == "complete":
            assert isinstance(json.loads(tok.decode(out)), dict)
        else:       # cut by the step bound: still a JSON object being written (never an end token before its close)
            assert how == "steps" and tok.decode(out).startswith("{")
    assert ended.count("complete") >= 4


def test_each_matcher_is_its_own_and_the_row_is_left_as_it_was(toy_grammars):
    """n choices: one matcher per sequence from one compiled grammar; sampling never writes into the scores (the
    engine reads logprobs from the same row afterwards)."""
    tok, grammars = toy_grammars
    grammar = grammars.compile("json_schema", SCHEMA, "response_format")
    a, b = grammar.matcher(), grammar.matcher()
    brace = tok.encode("{", add_special_tokens=False)[0]
    assert not a.advance(brace)
    assert not a.allowed()[brace] and b.allowed()[brace]      # b has not moved
    row = torch.randn(len(tok))
    kept = row.clone()
    sample_row(row, SamplingParams(temperature=0.0, logit_bias={3: -100.0}), [], [], None, b)
    assert torch.equal(row, kept)


def test_logit_bias_bans_and_forces():
    torch.manual_seed(0)
    logits = torch.randn(64) * 3
    best, low = int(torch.argmax(logits)), int(torch.argmin(logits))
    greedy = SamplingParams(temperature=0.0)
    assert sample_row(logits, greedy, [], [], None) == best
    assert sample_row(logits, SamplingParams(temperature=0.0, logit_bias={best: -100.0}), [], [], None) != best
    assert sample_row(logits, SamplingParams(temperature=0.0, logit_bias={low: 100.0}), [], [], None) == low
    gen = torch.Generator().manual_seed(1)
    sampled = SamplingParams(temperature=1.0, logit_bias={best: -100.0})
    assert best not in {sample_row(logits, sampled, [], [], gen) for _ in range(300)}
    forced = SamplingParams(temperature=1.0, logit_bias={low: 100.0})
    assert {sample_row(logits, forced, [], [], gen) for _ in range(50)} == {low}


def test_a_schema_llguidance_cannot_compile_is_a_400_naming_the_field(toy_grammars):
    _tok, grammars = toy_grammars
    for schema, said in [({"type": "object", "properties": {"a": {"$ref": "#/$defs/nope"}}}, "/$defs/nope"),
                         ({"type": "frobnicate"}, "frobnicate"),
                         ({"allOf": [{"type": "string"}, {"type": "integer"}]}, "Unsatisfiable")]:
        with pytest.raises(ApiError) as err:
            grammars.compile("json_schema", schema, "text.format")
        assert (err.value.status, err.value.param) == (400, "text.format") and said in err.value.message


def test_the_three_apis_formats_become_chats_response_format():
    schema = {"type": "object"}
    chat = {"type": "json_schema", "json_schema": {"name": "x", "schema": schema, "strict": True}}
    assert response_format(chat) == chat
    assert response_format({"type": "text"}) is None and response_format({"type": "json_object"}) == {
        "type": "json_object"}
    assert responses_format({"type": "json_schema", "name": "x", "schema": schema, "strict": True}) == chat
    assert responses_format({"type": "json_object"}) == {"type": "json_object"}
    assert anthropic_format({"type": "json_schema", "schema": schema})["json_schema"]["schema"] == schema
    bad = [(response_format, {"type": "xml"}, "response_format.type"),
           (response_format, {"type": "json_schema"}, "response_format.json_schema"),
           (response_format, {"type": "json_schema", "json_schema": {"name": "x"}},
            "response_format.json_schema.schema"),
           (responses_format, {"type": "json_schema", "name": "x", "schema": []}, "text.format.json_schema.schema"),
           (anthropic_format, {"type": "json_object"}, "output_config.format.type")]
    for check, value, param in bad:
        with pytest.raises(ApiError) as err:
            check(value)
        assert (err.value.status, err.value.param) == (400, param), err.value.message


def test_logit_bias_keys_must_be_token_ids_and_biases_within_100():
    assert logit_bias({"5": 10, "7": -100.0}) == {5: 10.0, 7: -100.0}
    for value in ({"abc": 1}, {"-1": 1}, {"1.5": 1}, {"5": 101}, {"5": "high"}, {"5": True}, ["5"]):
        with pytest.raises(ApiError) as err:
            logit_bias(value)
        assert (err.value.status, err.value.param) == (400, "logit_bias")


def test_without_llguidance_a_format_is_a_400_saying_what_to_install(monkeypatch, toy_grammars):
    tok, _ = toy_grammars
    monkeypatch.setitem(__import__("sys").modules, "llguidance", None)     # import llguidance -> ImportError
    with pytest.raises(ApiError) as err:
        Grammars(tok, {tok.eos_token_id}, len(tok)).compile("json_object", None, "output_config.format")
    assert (err.value.status, err.value.param) == (400, "output_config.format") and "llguidance" in err.value.message

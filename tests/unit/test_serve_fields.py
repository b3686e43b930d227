"""The serving spec table (swiftbox/serving/fields.py) against the official SDKs' own request types: every parameter
the installed `openai` and `anthropic` packages declare for the four endpoints is classified (a field a new SDK adds
fails here until it is), no row names a field the SDK no longer has, docs/serving.md shows the current table, and
`screen` refuses / passes / logs as the table says, per engine."""
from __future__ import annotations

import importlib
import logging
import typing
from pathlib import Path

import pytest

from swiftbox.serving import fields
from swiftbox.serving.errors import ApiError

ROOT = Path(__file__).resolve().parents[2]


def sdk_fields(api: str) -> set[str]:
    module, name = fields.SDK_TYPES[api]
    found = getattr(importlib.import_module(module), name)
    return set(typing.get_type_hints(found))


@pytest.mark.parametrize("api", fields.APIS)
def test_every_sdk_parameter_is_classified(api):
    declared = sdk_fields(api)
    missing = sorted(declared - set(fields.SDK[api]))
    assert not missing, f"{fields.PATHS[api]}: the SDK declares {missing}; classify them in swiftbox/serving/fields.py"
    stale = sorted(set(fields.SDK[api]) - declared)
    assert not stale, f"{fields.PATHS[api]}: {stale} are no SDK parameters (move them to the extras or drop them)"
    assert not set(fields.EXTRAS[api]) & declared, "an extra that the SDK declares belongs in the SDK table"
    for name, row in {**fields.SDK[api], **fields.EXTRAS[api]}.items():
        assert {row.builtin, row.vllm} <= {fields.HONOURED, fields.REFUSED, fields.HINT}, name
        assert row.note.strip(), f"{name}: every row says why"


def test_the_sdk_walk_sees_fields():
    """The walk reads real types: fields the SDKs have long declared are there (an empty walk would pass above)."""
    assert {"messages", "logit_bias", "stream"} <= sdk_fields("chat")
    assert {"input", "previous_response_id", "stream"} <= sdk_fields("responses")
    assert {"stop_sequences", "system", "stream"} <= sdk_fields("messages")
    assert {"prompt", "echo", "suffix"} <= sdk_fields("completions")


def test_doc_table_is_current():
    doc = (ROOT / "docs" / "serving.md").read_text()
    assert fields.BEGIN in doc and fields.END in doc, "docs/serving.md lost its generated field tables"
    assert fields.with_tables(doc) == doc, "docs/serving.md is stale: python -m swiftbox.serving.fields docs/serving.md"


def test_screen_refuses_what_the_engine_does_not_implement():
    with pytest.raises(ApiError) as err:
        fields.screen("chat", {"model": "m", "audio": {"voice": "alloy", "format": "wav"}}, "builtin")
    assert (err.value.status, err.value.param, err.value.code) == (400, "audio", "unsupported_field")
    assert "audio output" in err.value.message
    # honoured on both engines (tests/unit/test_constrained_decoding.py shows the effect): screened through
    for engine in fields.ENGINES:
        fields.screen("chat", {"logit_bias": {"5": 10}, "response_format": {"type": "json_object"}}, engine)
    with pytest.raises(ApiError):
        fields.screen("responses", {"conversation": "conv_1"}, "builtin")
    with pytest.raises(ApiError):
        fields.screen("messages", {"container": "c1"}, "vllm")
    with pytest.raises(ApiError):
        fields.screen("completions", {"suffix": "end"}, "builtin")


@pytest.mark.parametrize("api,body", [
    ("chat", {"audio": None, "modalities": ["text"], "functions": [], "logit_bias": {}, "verbosity": "medium",
              "response_format": {"type": "text"}, "logprobs": False, "n": 1, "stream": False, "tools": []}),
    ("completions", {"best_of": 1, "suffix": "", "logit_bias": {}}),
    ("responses", {"background": False, "top_logprobs": 0, "context_management": [], "prompt": None}),
    ("messages", {"container": None}),
])
def test_screen_takes_no_op_values_as_absent(api, body):
    fields.screen(api, body, "builtin")


def test_no_op_values_are_exact():
    """`best_of: 2` or `n: True`-style lookalikes are not the no-op value: True == 1 in Python, not here."""
    with pytest.raises(ApiError):
        fields.screen("completions", {"best_of": 2}, "builtin")
    with pytest.raises(ApiError):
        fields.screen("completions", {"best_of": True}, "builtin")
    with pytest.raises(ApiError):
        fields.screen("chat", {"modalities": ["text", "audio"]}, "builtin")


def test_hints_and_honoured_fields_pass():
    fields.screen("chat", {"user": "u1", "metadata": {"a": "b"}, "service_tier": "flex", "store": True,
                           "prediction": {"type": "content", "content": "x"}, "top_k": 5}, "builtin")
    fields.screen("messages", {"metadata": {"user_id": "x"}, "temperature": 0.5, "top_k": 3}, "vllm")


def test_unknown_fields_are_ignored_and_logged_once_per_name(caplog):
    fields._logged.discard(("responses", "zz_vendor_thing"))
    with caplog.at_level(logging.WARNING, logger="swiftbox.serve"):
        for _ in range(3):
            fields.screen("responses", {"zz_vendor_thing": 1, "model": "m"}, "builtin")
    said = [r for r in caplog.records if "zz_vendor_thing" in r.getMessage()]
    assert len(said) == 1 and "/v1/responses" in said[0].getMessage()


def test_structured_output_rows_are_honoured_on_both_engines():
    for api, name in [("chat", "response_format"), ("chat", "logit_bias"), ("completions", "logit_bias"),
                      ("responses", "text"), ("messages", "output_config")]:
        assert fields.SDK[api][name].builtin == fields.SDK[api][name].vllm == fields.HONOURED
    head = (ROOT / "swiftbox" / "serving" / "fields.py").read_text()[:1500]
    assert "FOR OTHER HELPERS" in head and "response_format" in head


def test_render_lists_every_row():
    text = fields.render_markdown()
    for api in fields.APIS:
        assert f"`POST {fields.PATHS[api]}`" in text
        for name in {**fields.SDK[api], **fields.EXTRAS[api]}:
            assert f"`{name}`" in text


def test_the_vllm_front_door_screens_before_relaying(tmp_path):
    """On the vLLM engine the table's refusals are the front door's: a refused field never reaches the child (its
    relay counter stays put), a hint is relayed, and the Responses store routes say vLLM keeps its own."""
    import sys

    import httpx
    import openai

    from swiftbox.device.cpu import CpuPlatform
    from swiftbox.serving.app import build_app
    from swiftbox.serving.server import ServerThread, bind
    from swiftbox.serving.vllm.child import VllmBackend, VllmProcess
    from swiftbox.serving.vllm.plan import plan
    from swiftbox.steps import ServeStep

    probe = bind("127.0.0.1", 0)
    port = probe.getsockname()[1]
    probe.close()
    p = plan(ServeStep(engine="vllm"), CpuPlatform(), model_path="/m", base_name="base", loras={},
             dtype="float32", port=port, executable=[sys.executable, str(ROOT / "tests" / "fakes" / "fake_vllm.py")])
    proc = VllmProcess(p, tmp_path / "vllm.log")
    proc.start(timeout=120)
    backend = VllmBackend(proc)
    server = ServerThread(build_app(backend, api_key="k")).start()
    try:
        client = openai.OpenAI(base_url=server.url + "/v1", api_key="k", max_retries=0, timeout=60)
        ask = [{"role": "user", "content": "hi"}]
        before = backend.forwarded
        with pytest.raises(openai.BadRequestError) as refused:
            client.chat.completions.create(model="base", messages=ask, modalities=["text", "audio"])
        assert refused.value.body["param"] == "modalities" and backend.forwarded == before
        answer = client.chat.completions.create(model="base", messages=ask, user="u1", modalities=["text"])
        assert answer.choices[0].message.content == "fake answer from base" and backend.forwarded == before + 1
        with pytest.raises(openai.NotFoundError, match="vLLM"):
            client.responses.retrieve("resp_1")
        with pytest.raises(openai.BadRequestError) as refused:      # vLLM keeps no responses: said up front
            client.responses.create(model="base", input="hi", previous_response_id="resp_1")
        assert refused.value.body["param"] == "previous_response_id" and backend.forwarded == before + 1
        prefill = httpx.post(server.url + "/v1/messages", headers={"x-api-key": "k"}, timeout=60, json={
            "model": "base", "max_tokens": 4, "messages": [*ask, {"role": "assistant", "content": "Yes, it"}]})
        assert prefill.status_code == 400 and "prefill" in prefill.json()["error"]["message"]
        assert backend.forwarded == before + 1
    finally:
        server.stop()
        proc.stop()


def test_the_once_per_name_memory_is_bounded(monkeypatch, caplog):
    """A client inventing a new field name per request cannot grow the server's memory of logged names."""
    monkeypatch.setattr(fields, "_logged", set())
    monkeypatch.setattr(fields, "MAX_LOGGED", 5)
    with caplog.at_level(logging.WARNING, logger="swiftbox.serve"):
        for k in range(50):
            fields.screen("chat", {f"made_up_{k}": 1}, "builtin")
    assert len(fields._logged) == 6
    assert sum("made_up_" in r.getMessage() for r in caplog.records) == 5
    assert any("further ones" in r.getMessage() for r in caplog.records)

"""Tool calling and reasoning end to end: the answer parsers of the built-in engine (each family's format),
vLLM's parser flags from the preset, the OpenAI tool conversation through the official client, and (slow) a
toy model trained on tool-calling data whose served answer comes back as `tool_calls`."""
from __future__ import annotations

import json
import time

import openai
import pytest

from swiftbox.serving import toolformats
from tests.support.serve_fixtures import KEY, start_server

TEMPLATES = "tests/fixtures/templates/"
WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Weather in a city", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}


def template(name: str) -> str:
    with open(TEMPLATES + name + ".jinja", encoding="utf-8") as fh:
        return fh.read()


@pytest.mark.parametrize("name,text,content", [
    ("Qwen-Qwen2.5-7B-Instruct", 'Let me check.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n'
                                 '</tool_call>', "Let me check."),
    ("mistralai-Mistral-Nemo-Instruct-2407", '[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}}]',
     None),
    ("mistralai-Mistral-Nemo-Instruct-2407", '[{"name": "get_weather", "arguments": {"city": "Paris"}}]', None),
    ("meta-llama-Llama-3.1-8B-Instruct", '{"name": "get_weather", "parameters": {"city": "Paris"}}', None),
    ("THUDM-glm-4-9b-chat", 'get_weather\n{"city": "Paris"}', None),
])
def test_each_family_tool_call_format_parses(name, text, content):
    fmt = toolformats.tool_format(template(name))
    parsed = toolformats.parse(text, fmt, tool_names={"get_weather"})
    assert parsed.content == content
    (call,) = parsed.tool_calls
    assert call["type"] == "function" and call["id"].startswith("call_")
    assert call["function"]["name"] == "get_weather" and json.loads(call["function"]["arguments"]) == {"city": "Paris"}


def test_plain_or_malformed_answers_stay_content_and_reasoning_splits():
    fmt = toolformats.tool_format(template("Qwen-Qwen2.5-7B-Instruct"))
    assert toolformats.parse("It is sunny.", fmt).tool_calls == []
    bad = toolformats.parse('<tool_call>{"name": oops}</tool_call>', fmt)
    assert bad.tool_calls == [] and "oops" in bad.content
    assert toolformats.thinks(template("Qwen-Qwen3-0.6B"))
    assert not toolformats.thinks(template("Qwen-Qwen2.5-7B-Instruct"))
    r = toolformats.parse("<think>\nPlan it.\n</think>\n\nHello.", "", think=True)
    assert (r.reasoning, r.content) == ("Plan it.", "Hello.")
    r1 = toolformats.parse("Plan it.\n</think>\n\nHello.", "", think=True)      # R1: the prompt opened <think>
    assert (r1.reasoning, r1.content) == ("Plan it.", "Hello.")


FORMATS = ["hermes", "mistral", "llama3_json", "glm4"]
DEEP = "[" * 100_000 + "]" * 100_000
HOSTILE = {   # what a model may write: each must end as tool calls or plain content, never an exception
    "deep nesting": '{"name": "f", "arguments": {"x": ' + DEEP + "}}",
    "5000-digit number": '{"name": "f", "arguments": {"x": ' + "9" * 5000 + "}}",
    "Infinity": '{"name": "f", "arguments": {"x": 1e999}}',
    "NaN": '{"name": "f", "arguments": {"x": NaN}}',
    "lone surrogate": '{"name": "f", "arguments": {"x": "\\ud800"}}',
    "surrogate name": '{"name": "\\udfff", "arguments": {}}',
    "unclosed": '{"name": "f", "arguments": {"x": [[[[',
}


def wrap(fmt: str, body: str) -> list[str]:
    """The hostile body where each format looks for a call (and the bare body)."""
    return {"hermes": [f"<tool_call>{body}</tool_call>", f"hi <tool_call>\n{body}\n</tool_call>" * 3],
            "mistral": [f"[TOOL_CALLS][{body}]", f"[{body}]"],
            "llama3_json": [body, f"<|python_tag|>{body}"],
            "glm4": ["f\n" + body.partition('"arguments": ')[2].removesuffix("}")]}[fmt] + [body]


def sendable(parsed) -> None:
    """The message the server builds from it goes out as UTF-8 JSON (what JSONResponse does)."""
    message = {"content": parsed.content, "reasoning_content": parsed.reasoning, "tool_calls": parsed.tool_calls}
    json.dumps(message, ensure_ascii=False, allow_nan=False).encode("utf-8")
    for call in parsed.tool_calls:   # strict JSON arguments: no NaN / Infinity a client's parser would refuse
        json.loads(call["function"]["arguments"], parse_constant=lambda c: pytest.fail(f"{c} in the arguments"))


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("case", list(HOSTILE))
def test_hostile_model_output_parses_to_calls_or_plain_content(fmt, case):
    for text in wrap(fmt, HOSTILE[case]):
        for think in (False, True):
            parsed = toolformats.parse(text, fmt, think=think, tool_names={"f"})
            assert parsed.tool_calls or parsed.content == text.strip(), (case, text[:80])
            sendable(parsed)


def _cost(text: str, fmt: str, think: bool) -> float:
    """Best of a few timings of one parse (stops early when one run alone is already slow)."""
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        toolformats.parse(text, fmt, think=think, tool_names={"f"})
        best = min(best, time.perf_counter() - t0)
        if best > 0.5:
            break
    return best


SHAPES = {   # hostile shapes at size n; each used to cost quadratic (or worse) time in a backtracking regex
    "unclosed tags": lambda n: "<tool_call>" * n,
    "open tag then whitespace": lambda n: "<tool_call>" + " " * n + "x",
    "whitespace inside a block": lambda n: "<tool_call>" + " " * n + "x</tool_call>",
    "unclosed tags after a call": lambda n: '<tool_call>{"name": "f"}</tool_call>' + "<tool_call>\n" * n,
    "think tags": lambda n: "<think>" * n + "</think>" + "<tool_call>" * n,
    "mistral markers": lambda n: "[TOOL_CALLS]" * n,
}


@pytest.mark.parametrize("shape", list(SHAPES))
def test_tool_call_parsing_is_linear(shape):
    """Work grows with the output's length, not its square: size 10n costs about 10x size n (a generous 40x
    allowed: a quadratic scan gives ~100x, the old regex on whitespace ~1000x). A ratio, not a time limit."""
    small, large = SHAPES[shape](400), SHAPES[shape](4000)
    for fmt in FORMATS:
        think = fmt == "hermes"
        _cost(small, fmt, think)                                 # warm up
        ratio = _cost(large, fmt, think) / max(_cost(small, fmt, think), 2e-5)
        assert ratio < 40, (shape, fmt, ratio)


def test_vllm_gets_the_presets_parsers():
    from swiftbox.catalog import presets as registry
    from swiftbox.device.cpu import CpuPlatform
    from swiftbox.serving.vllm.plan import plan
    from swiftbox.steps import ServeStep

    def argv(ref):
        return plan(ServeStep(engine="vllm"), CpuPlatform(), model_path="/m", base_name="m", loras={},
                    dtype="bfloat16", port=1, preset=registry.find(ref)).argv

    qwen3 = " ".join(argv("qwen3-0.6b"))
    assert "--enable-auto-tool-choice --tool-call-parser hermes" in qwen3 and "--reasoning-parser qwen3" in qwen3
    assert "--tool-call-parser llama3_json" in " ".join(argv("llama-3.2-1b-instruct"))
    r1 = " ".join(argv("deepseek-r1-distill-qwen-1.5b"))
    assert "--reasoning-parser deepseek_r1" in r1 and "--tool-call-parser" not in r1
    assert "--tool-call-parser" not in " ".join(argv("toy-not-a-preset"))


@pytest.fixture(scope="module")
def live(toy_dir, tmp_path_factory):
    # room for the tool schemas: the toy's template has no tools, so they come in swiftbox's default tool format
    server, _names, stop = start_server("toy", max_model_len=1024, work_dir=tmp_path_factory.mktemp("tools"))
    yield server
    stop()


def test_openai_tool_conversation_is_accepted(live):
    client = openai.OpenAI(base_url=live.url + "/v1", api_key=KEY, max_retries=0, timeout=120)
    messages = [{"role": "user", "content": "Weather in Paris?"},
                {"role": "assistant", "content": None, "tool_calls": [{"id": "call_1", "type": "function", "function": {
                    "name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
                {"role": "tool", "tool_call_id": "call_1", "content": '{"temp": 21}'}]
    r = client.chat.completions.create(model="toy", messages=messages, tools=[WEATHER], tool_choice="auto",
                                       max_tokens=4, temperature=0)
    assert r.choices[0].message.role == "assistant"
    with pytest.raises(openai.BadRequestError, match="tool_choice"):
        client.chat.completions.create(model="toy", messages=messages, tools=[WEATHER], tool_choice="required",
                                       max_tokens=4)
    with pytest.raises(openai.UnprocessableEntityError):
        client.chat.completions.create(model="toy", messages=messages, tools=[{"type": "function", "function": {}}])


TOOL_ROW = {"messages": [
    {"role": "user", "content": "What is the weather in Paris?"},
    {"role": "assistant", "content": None, "tool_calls": [
        {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]}],
    "tools": [WEATHER]}


@pytest.mark.slow
def test_tool_calling_sft_then_served_tool_calls(tmp_path):
    """LoRA SFT on tool-calling rows trains (the loss falls); a toy trained fully on them, served with the
    Qwen2.5 template it was trained with, answers through the openai client with `tool_calls`."""
    from swiftbox.runner import run_recipe

    path = tmp_path / "tools.jsonl"
    path.write_text("".join(json.dumps(TOOL_ROW) + "\n" for _ in range(16)))
    common = {"dataset": str(path), "batch_size": 4, "save_steps": 1000, "logging_steps": 1,
              "chat_template": TEMPLATES + "Qwen-Qwen2.5-7B-Instruct.jinja", "max_length": 1024}
    lora = run_recipe({"name": "lora", "model": "toy", "steps": [{"sft": {**common, "max_steps": 8,
                                                                         "learning_rate": 5e-3}}]},
                      runs_root=tmp_path, log=lambda m: None)["steps"][0]
    assert lora["ok"] and lora["metrics"]["loss_last"] < lora["metrics"]["loss_first"]
    assert lora["metrics"]["truncated_rows"] == 0          # the prompt trained on is the prompt served
    full = run_recipe({"name": "full", "model": "toy", "steps": [{"sft": {**common, "method": "full", "max_steps": 60,
                                                                         "learning_rate": 2e-3,
                                                                         "lr_scheduler": "constant"}}]},
                      runs_root=tmp_path, log=lambda m: None)["steps"][0]
    assert full["ok"], full
    server, names, stop = start_server(full["output"], max_model_len=1024, work_dir=tmp_path)
    try:
        client = openai.OpenAI(base_url=server.url + "/v1", api_key=KEY, max_retries=0, timeout=300)
        r = client.chat.completions.create(model=names.base, messages=TOOL_ROW["messages"][:1], tools=[WEATHER],
                                           max_tokens=160, temperature=0)
        choice = r.choices[0]
        assert choice.finish_reason == "tool_calls", choice.message.content
        (call,) = choice.message.tool_calls
        assert call.function.name == "get_weather" and json.loads(call.function.arguments) == {"city": "Paris"}
        stream = client.chat.completions.create(model=names.base, messages=TOOL_ROW["messages"][:1], tools=[WEATHER],
                                                max_tokens=160, temperature=0, stream=True)
        deltas = [c.choices[0].delta for c in stream if c.choices]
        calls = [tc for d in deltas for tc in (d.tool_calls or [])]
        assert calls and calls[0].function.name == "get_weather"
    finally:
        stop()

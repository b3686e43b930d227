"""The tool-call formats of serving/toolformats, one by one: each record's own example parses back to the call it
spells, the stream reader gives the same answer fed whole or a character at a time, reasoning splits per family
(<think>, opened by the prompt or not, [THINK], Gemma 4's thought channel, harmony's analysis channel), special
tokens are hidden from content but seen by the formats (TextStream.keep_special on a tokenizer where they are
special), arguments are typed by the tool's schema, and hostile output ends as calls or plain content - never an
exception - in time linear in its length."""
from __future__ import annotations

import json
import time

import pytest

from swiftbox.serving import toolformats as tf
from swiftbox.serving.toolformats.harmony import HARMONY

WEATHER = {"get_weather": {"type": "object", "properties": {"city": {"type": "string"}}}}
NAMED = [f.name for f in tf.FORMATS]


def calls(parsed) -> list[tuple[str, dict]]:
    return [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in parsed.tool_calls]


def streamed(text: str, fmt, *, reasoning=None, opened=False, hidden=(), step: int = 1) -> tf.Parsed:
    """The same answer through the stream reader, `step` characters at a time."""
    reader = tf.reader(fmt, reasoning, tools=WEATHER, opened=opened, hidden=hidden)
    events = []
    for at in range(0, len(text), step):
        events += reader.feed(text[at:at + step])
    return tf.collect(events + reader.finish())


def test_the_registry_names_each_format_once_and_maps_vllm_parsers():
    assert len(set(NAMED)) == len(NAMED)
    vllm = [n for f in tf.FORMATS for n in f.vllm]
    assert len(set(vllm)) == len(vllm)                          # one built-in format per vLLM parser
    for f in tf.FORMATS:
        assert tf.by_name(f.name) is f and all(tf.by_name(n) is f for n in f.vllm)
    assert tf.by_name("qwen3_coder").name == "qwen3_xml" and tf.by_name("openai") is HARMONY
    assert tf.by_name("no_such_parser") is None


PREAMBLE = {"harmony": "<|channel|>commentary<|message|>Let me check.<|end|><|start|>assistant"}


@pytest.mark.parametrize("name", NAMED)
def test_each_format_reads_its_own_example_whole_and_streamed(name):
    fmt = tf.by_name(name)
    assert fmt.example, name
    before = PREAMBLE.get(name, "Let me check.\n" if not fmt.leading_for(WEATHER) else "")
    for text in (fmt.example, before + fmt.example):
        whole = tf.parse(text, fmt, tools=WEATHER)
        assert calls(whole) == [("get_weather", {"city": "Paris"})], (name, text, whole)
        assert whole.content in (None, "Let me check."), whole
        for step in (1, 3, 7):
            s = streamed(text, fmt, step=step)
            assert calls(s) == calls(whole) and s.content == whole.content, (name, step, s)
        assert whole.tool_calls[0]["type"] == "function" and whole.tool_calls[0]["id"]


def test_two_calls_and_text_around_them():
    two = {
        "hermes": '<tool_call>{"name": "a", "arguments": {"x": 1}}</tool_call>\n<tool_call>{"name": "b", '
                  '"arguments": {}}</tool_call>',
        "mistral": '[TOOL_CALLS]a[ARGS]{"x": 1}[TOOL_CALLS]b[ARGS]{}',
        "llama_json": '{"name": "a", "parameters": {"x": 1}}; {"name": "b", "parameters": {}}',
        "deepseek": "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>a<｜tool▁sep｜>{\"x\": 1}<｜tool▁call▁end｜>"
                    "<｜tool▁call▁begin｜>b<｜tool▁sep｜>{}<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
        "lfm2": "<|tool_call_start|>[a(x=1), b()]<|tool_call_end|>",
        "olmo3": "<function_calls>a(x=1)\nb()</function_calls>",
        "gemma4": "<|tool_call>call:a{x:1}<tool_call|><|tool_call>call:b{}<tool_call|>",
        "harmony": "<|channel|>commentary to=functions.a <|constrain|>json<|message|>{\"x\": 1}<|call|>"
                   "<|start|>assistant<|channel|>commentary to=functions.b<|message|>{}<|call|>",
    }
    for name, text in two.items():
        parsed = tf.parse(text, name, tool_names={"a", "b"})
        assert calls(parsed) == [("a", {"x": 1}), ("b", {})], name
        assert calls(streamed(text, tf.by_name(name))) == calls(parsed), name


def test_xml_and_key_value_arguments_are_typed_by_the_schema():
    tools = {"f": {"properties": {"n": {"type": "integer"}, "code": {"type": "string"}, "opts": {"type": "object"}}}}
    xml = ("<tool_call>\n<function=f>\n<parameter=n>\n3\n</parameter>\n<parameter=code>\n007\n</parameter>\n"
           "<parameter=opts>\n{\"a\": [1, 2]}\n</parameter>\n</function>\n</tool_call>")
    assert calls(tf.parse(xml, "qwen3_xml", tools=tools)) == [("f", {"n": 3, "code": "007", "opts": {"a": [1, 2]}})]
    glm = "<tool_call>f\n<arg_key>n</arg_key>\n<arg_value>3</arg_value>\n<arg_key>code</arg_key>\n" \
          "<arg_value>007</arg_value>\n</tool_call>"
    assert calls(tf.parse(glm, "glm45", tools=tools)) == [("f", {"n": 3, "code": "007"})]
    gemma = '<|tool_call>call:f{n:3,code:<|"|>007<|"|>,opts:{a:[1,true,null]}}<tool_call|>'
    assert calls(tf.parse(gemma, "gemma4", tools=tools)) == [("f", {"n": 3, "code": "007",
                                                                    "opts": {"a": [1, True, None]}})]


@pytest.mark.parametrize("opened,text", [
    (False, "<think>\nPlan it.\n</think>\n\nHello."),
    (True, "Plan it.\n</think>\n\nHello."),               # DeepSeek-R1 / Qwen3.5: the prompt opened <think>
])
def test_think_blocks_split_whole_and_streamed(opened, text):
    for parsed in (tf.parse(text, None, think=True, opened=opened), streamed(text, None, reasoning=tf.reasoning.THINK,
                                                                             opened=opened)):
        assert (parsed.reasoning, parsed.content) == ("Plan it.", "Hello.")


def test_reasoning_of_each_family():
    r = tf.reasoning
    mistral = tf.parse("[THINK]Plan.[/THINK]Hello.", None, think=r.MISTRAL)
    gemma = tf.parse("<|channel>thought\nPlan.\n<channel|>Hello.", None, think=r.GEMMA4)
    harmony = tf.parse("<|channel|>analysis<|message|>Plan.<|end|><|start|>assistant<|channel|>final<|message|>"
                       "Hello.<|return|>", "harmony")
    for parsed in (mistral, gemma, harmony):
        assert (parsed.reasoning, parsed.content) == ("Plan.", "Hello."), parsed
    # an opened block that never closes is all reasoning (as vLLM), unless a tool call ends it (calls are answers)
    assert tf.parse("Still thinking", None, think=True, opened=True) == tf.Parsed("", "Still thinking", [])
    r1 = tf.parse('Hmm.\n<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>', "hermes",
                  think=True, opened=True, tool_names={"get_weather"})
    assert r1.reasoning == "Hmm." and calls(r1) == [("get_weather", {"city": "Paris"})]
    assert tf.reasoning_of("{{ '<think>' }}") is r.THINK and tf.reasoning_of("[THINK]") is r.MISTRAL
    assert tf.reasoning_of("plain ChatML") is None


def test_special_tokens_are_hidden_from_content_even_split_across_deltas():
    parsed = streamed("Hello <|im_end|> there<|im_end|>", None, hidden=("<|im_end|>",), step=4)
    assert parsed.content == "Hello  there"
    assert tf.parse("<|im_start|>Hi", None, hidden=("<|im_start|>",)).content == "Hi"
    # a call followed by the end of turn the engine let through
    text = '{"name": "get_weather", "parameters": {"city": "Paris"}}<|eot_id|>'
    assert calls(tf.parse(text, "llama_json", tool_names={"get_weather"}, hidden=("<|eot_id|>",))) == [
        ("get_weather", {"city": "Paris"})]
    # formats whose own markers are special tokens (DeepSeek's end in two of them) still read with all of them hidden
    for name in ("deepseek", "kimi_k2", "gemma4", "apertus", "deepseek_dsml"):
        ex = tf.by_name(name).example
        marks = tuple(m for m in ex.replace(">", ">\0").replace("<", "\0<").split("\0") if m.startswith("<|")
                      or m.startswith("<｜") or m.endswith("|>"))
        assert calls(tf.parse(ex, name, tools=WEATHER, hidden=marks)) == [("get_weather", {"city": "Paris"})], name


def test_the_parser_sees_special_tokens_the_text_stream_keeps(toy_dir):
    """On a tokenizer where harmony's markers are special tokens, the default detokenization drops them (the answer
    reads as "analysisPlan..." plain text); keep_special gives the parser its markers and the content stays clean."""
    from transformers import AutoTokenizer

    from swiftbox.serving.builtin.backend import special_tokens
    from swiftbox.serving.builtin.textstream import TextStream

    tok = AutoTokenizer.from_pretrained(toy_dir)
    tok.add_special_tokens({"additional_special_tokens": ["<|channel|>", "<|message|>", "<|end|>", "<|start|>",
                                                         "<|call|>", "<|constrain|>"]})
    text = ("<|channel|>analysis<|message|>Plan it.<|end|><|start|>assistant<|channel|>commentary "
            "to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"Paris\"}<|call|>")
    ids = tok(text, add_special_tokens=False)["input_ids"]
    hidden = special_tokens(tok)
    assert "<|channel|>" in hidden and "<|call|>" in hidden

    def through(keep: bool) -> str:
        stream = TextStream(tok, [])
        stream.keep_special = keep
        return "".join(stream.add(t) for t in ids) + stream.flush()

    assert "<|channel|>" not in through(False)
    parser = tf.answer_parser("<|channel|>{{ x }}<|message|>", [{"type": "function", "function": {
        "name": "get_weather", "parameters": WEATHER["get_weather"]}}], hidden=hidden)
    kept = parser(through(True))
    assert calls(kept) == [("get_weather", {"city": "Paris"})] and kept.reasoning == "Plan it."
    assert kept.content is None
    lost = parser(through(False))
    assert lost.tool_calls == [] and "analysis" in (lost.content or "")


def test_detection_reads_the_template_and_falls_back_to_the_default_format():
    assert tf.detect(None) is tf.detect("plain") is tf.by_name("hermes")
    assert tf.detect("<tool_call><function=x><parameter=y>").name == "qwen3_xml"
    assert tf.detect("<tool_call>{{ name }}<arg_key>").name == "glm45"
    # a native format that finds no call falls back to the default format (what swiftbox trains without one)
    hermes = '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'
    for name in ("mistral", "gemma4", "deepseek", "qwen3_xml", "glm45"):
        assert calls(tf.parse(hermes, name, tool_names={"get_weather"})) == [("get_weather", {"city": "Paris"})]


DEEP = "[" * 50_000 + "]" * 50_000
HOSTILE = {
    "deep nesting": ("{" + '"x": ' + DEEP + "}"),
    "5000-digit number": '{"x": ' + "9" * 5000 + "}",
    "NaN": '{"x": NaN}',
    "lone surrogate": '{"x": "\\ud800"}',
    "unclosed": '{"x": [[[[',
}


def wrapped(name: str, args: str) -> list[str]:
    """Hostile arguments where each format reads them, and its example cut short at a few points."""
    ex = tf.by_name(name).example
    out = [ex.replace('{"city": "Paris"}', args)] if '{"city": "Paris"}' in ex else []
    return out + [ex[:n] for n in (1, len(ex) // 3, len(ex) // 2, len(ex) - 1)]


@pytest.mark.parametrize("name", NAMED)
def test_hostile_output_ends_as_calls_or_plain_content(name):
    for args in HOSTILE.values():
        for text in wrapped(name, args):
            for think in (False, True):
                parsed = tf.parse(text, name, think=think, tool_names={"get_weather"})
                json.dumps({"c": parsed.content, "r": parsed.reasoning, "t": parsed.tool_calls}, ensure_ascii=False,
                           allow_nan=False).encode("utf-8")
                if parsed.tool_calls:
                    continue
                if name != "harmony":          # harmony keeps the message bodies, not its headers, as content
                    assert (parsed.content or "") + (parsed.reasoning or "") != "" or not text.strip(), (name, text)


def _cost(text: str, name: str) -> float:
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        tf.parse(text, name, think=True, tool_names={"f"})
        best = min(best, time.perf_counter() - t0)
    return best


def test_streaming_a_long_answer_is_linear():
    """Fed a token at a time, the reader's cost per token does not grow with the answer (held tails are short)."""
    def cost(n: int) -> float:
        reader = tf.reader(tf.by_name("hermes"), tf.reasoning.THINK, opened=True, hidden=("<|im_end|>",))
        t0 = time.perf_counter()
        for _ in range(n):
            reader.feed("think ")
        reader.feed("</think>")
        for _ in range(n):
            reader.feed("word <")
        reader.finish()
        return time.perf_counter() - t0
    cost(200)
    assert min(cost(4000) for _ in range(2)) / min(cost(400) for _ in range(2)) < 40


SHAPES = {
    "openers": lambda f, n: "".join(f.openers or f.leading or ("x",)) * n,
    "opener then spaces": lambda f, n: (f.openers or f.leading or ("x",))[0] + " " * n + "x",
    "text after a call": lambda f, n: f.example + " word" * n,
    "text before a call": lambda f, n: "word " * n + f.example,
    "gemma nesting": lambda f, n: "<|tool_call>call:f" + "{a:" * n,
    "xml params": lambda f, n: "<tool_call><function=f>" + "<parameter=a>" * n + "</tool_call>",
    "arg keys": lambda f, n: "<tool_call>f" + "<arg_key>a</arg_key>" * n + "</tool_call>",
}


@pytest.mark.parametrize("shape", list(SHAPES))
def test_parsing_is_linear(shape):
    """Size 10n costs about 10x size n (40x allowed; quadratic is ~100x): a ratio, not a time limit."""
    for f in tf.FORMATS:
        small, large = SHAPES[shape](f, 300), SHAPES[shape](f, 3000)
        _cost(small, f.name)
        ratio = _cost(large, f.name) / max(_cost(small, f.name), 5e-5)
        assert ratio < 40, (shape, f.name, ratio)

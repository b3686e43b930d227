"""Every common data shape is accepted with exact labels (issue 34): one real-shaped fixture per shape
(tests/fixtures/shapes, README there), loaded through the public loaders and encoded with real templates on the
toy's tokenizer. Labels decode to exactly the replies that train (plus the end-of-turn marker); replies a shape
marks as context (TRL prompt turns, OpenAI weight 0) stay unlabelled; tool rows for a template without tool calls
come out in swiftbox's default tool format, which the server's parser reads back."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from swiftbox import data
from tests.support.templates import TEMPLATES

SHAPES = Path(__file__).parents[1] / "fixtures" / "shapes"
CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'


@pytest.fixture(scope="module")
def tok(toy_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(toy_dir)


def use(tok, name: str):
    tok.chat_template = (TEMPLATES / f"{name}.jinja").read_text(encoding="utf-8")
    return tok


def labels(tok, row) -> list[str]:
    enc = data.encode(tok, row["messages"], row.get("tools"))
    pieces = [tok.decode(enc.input_ids[s:e]) for s, e in enc.replies]
    assert tok.decode([t for t in enc.labels if t != -100]) == "".join(pieces)
    return pieces


def load(name: str) -> list[dict]:
    return data.load_sft(str(SHAPES / name))


def test_trl_prompt_completion_strings_and_messages(tok):
    use(tok, "Qwen-Qwen2.5-7B-Instruct")
    text, chat = load("trl_prompt_completion.jsonl")
    assert [m["role"] for m in text["messages"]] == ["user", "assistant"]
    assert labels(tok, text) == ["Paris.<|im_end|>"]
    assert [m["role"] for m in chat["messages"]] == ["system", "user", "assistant", "user", "assistant"]
    assert labels(tok, chat) == ["Rome.<|im_end|>"]          # the prompt's own reply is context, not trained


def test_trl_conversational_preference_explicit_and_implicit_prompt(tok):
    use(tok, "Qwen-Qwen2.5-7B-Instruct")
    rows = data.load_dpo(str(SHAPES / "trl_preference_conversational.jsonl"))
    assert rows[0] == rows[1]                                  # the implicit prompt is the shared beginning
    pairs, counts = data.dpo_strings(rows, tok, 512)
    assert counts.dropped == 0
    assert [(p["chosen"], p["rejected"]) for p in pairs] == [("It is blue.<|im_end|>", "It is green.<|im_end|>")] * 2
    assert pairs[0]["prompt"].endswith("What color is the sky?<|im_end|>\n<|im_start|>assistant\n")
    swift = data.dpo_row({"messages": [{"role": "user", "content": "Sky?"}, {"role": "assistant", "content": "Blue."}],
                          "rejected_messages": [{"role": "user", "content": "Sky?"},
                                                {"role": "assistant", "content": "Green."}]})      # ms-swift
    assert (swift["prompt"], swift["chosen"][0]["content"], swift["rejected"][0]["content"]) == (
        [{"role": "user", "content": "Sky?"}], "Blue.", "Green.")


def test_ms_swift_column_aliases(tok):
    use(tok, "Qwen-Qwen2.5-7B-Instruct")
    rows = load("ms_swift_aliases.jsonl")
    assert [labels(tok, r) for r in rows] == [["4<|im_end|>"], ["9<|im_end|>"], ["Jupiter<|im_end|>"],
                                              ["Bonjour.<|im_end|>"]]
    assert rows[0]["messages"][0] == {"role": "system", "content": "You are terse."}
    assert rows[1]["messages"][0] == {"role": "user", "content": "Compute 3*3."}
    assert rows[3]["messages"][:2] == [{"role": "system", "content": "Translate to French."},
                                       {"role": "user", "content": "Say hello\npolitely"}]


def test_ms_swift_conversation_of_human_assistant_pairs(tok):
    use(tok, "Qwen-Qwen2.5-7B-Instruct")
    (row,) = load("ms_swift_conversation.jsonl")
    assert [m["role"] for m in row["messages"]] == ["system", "user", "assistant", "user", "assistant"]
    assert labels(tok, row) == ["Hello.<|im_end|>", "Goodbye.<|im_end|>"]


def test_anthropic_block_lists_with_tool_use_and_tool_result(tok):
    (row,) = load("anthropic_blocks.jsonl")
    assert [m["role"] for m in row["messages"]] == ["system", "user", "assistant", "tool", "assistant"]
    call = row["messages"][2]
    assert call["reasoning_content"] == "Need the tool." and call["content"] == "Let me check."
    assert call["tool_calls"][0]["function"] == {"name": "get_weather", "arguments": {"city": "Paris"}}
    assert row["messages"][3] == {"role": "tool", "content": "21 C, sunny", "tool_call_id": "toolu_01"}
    assert row["tools"][0]["function"]["parameters"]["required"] == ["city"]       # input_schema read
    use(tok, "Qwen-Qwen2.5-7B-Instruct")
    assert labels(tok, row) == ["Let me check.\n" + CALL + "<|im_end|>", "It is 21 C and sunny in Paris.<|im_end|>"]
    use(tok, "Qwen-Qwen3-0.6B")                                   # the thinking block trains where printed
    got = labels(tok, row)
    assert got[0] == "<think>\nNeed the tool.\n</think>\n\nLet me check.\n" + CALL + "<|im_end|>"


def test_mistral_thinking_chunks_train_as_reasoning(tok):
    (row,) = load("mistral_chunks.jsonl")
    assert row["messages"][1] == {"role": "assistant", "content": "4", "reasoning_content": "Two plus two."}
    use(tok, "Qwen-Qwen3-0.6B")
    assert labels(tok, row) == ["<think>\nTwo plus two.\n</think>\n\n4<|im_end|>"]
    use(tok, "mistralai-Ministral-3-14B-Reasoning-2512")        # prints only thinking chunks: given back as chunks
    assert labels(tok, row) == ["[THINK]Two plus two.[/THINK]4<|im_end|>"]


def test_openai_weight_zero_reply_is_not_trained(tok):
    use(tok, "Qwen-Qwen2.5-7B-Instruct")
    (row,) = load("openai_weight.jsonl")
    assert labels(tok, row) == ["Paris, dear.<|im_end|>"]
    bad = dict(row, messages=[dict(m, weight=0.5) if m["role"] == "assistant" else m for m in row["messages"]])
    with pytest.raises(ValueError, match="weight must be 0"):
        data.sft_row(bad)


def test_a_row_ending_with_a_tool_result_trains_the_call(tok):
    use(tok, "Qwen-Qwen2.5-7B-Instruct")
    (row,) = load("ends_with_tool_result.jsonl")
    assert row["messages"][-1]["role"] == "tool"
    assert labels(tok, row) == [CALL + "<|im_end|>"]
    with pytest.raises(ValueError, match="must end with an assistant turn"):
        data.sft_row({"messages": [{"role": "user", "content": "Hi"}]})


@pytest.mark.parametrize("shape", ["llamafactory_function_call.jsonl", "ms_swift_agent.jsonl"])
@pytest.mark.parametrize("name,eot", [("google-gemma-3-1b-it", "<end_of_turn>"), ("microsoft-phi-4", "<|im_end|>"),
                                      ("HuggingFaceTB-SmolLM3-3B", "<|im_end|>")])
def test_tool_rows_for_a_template_without_tools_use_the_default_format(tok, shape, name, eot):
    """Rendered in the default tool format at training time; the same text is what the server renders for a
    request with tools, and what its parser reads back as a tool call."""
    from swiftbox.serving import toolformats

    use(tok, name)
    (row,) = load(shape)
    got = labels(tok, row)
    assert got == [CALL + eot, "It is 21 degrees." + eot]
    prompt = data.render(tok, row["messages"][:-3], row["tools"], generation_prompt=True)
    assert '<tools>\n{"type": "function", "function": {"name": "get_weather"' in prompt
    parsed = toolformats.parse(got[0].removesuffix(eot), toolformats.tool_format(tok.chat_template))
    assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in parsed.tool_calls] == [
        ("get_weather", {"city": "Paris"})]
    assert parsed.content is None

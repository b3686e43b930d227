"""The template matrix (issue 12): the real chat templates of every preset family (tests/fixtures/templates,
provenance in its README) on the toy's tokenizer. For multi-turn with and without system, tool calls and
reasoning: the labelled tokens decode to exactly the assistant replies plus the end-of-turn marker, the DPO
completion is the reply and its prompt the generation prompt, and eval scores a choice on the whole reply.
Templates that cannot render a conversation, or where a reply cannot be located, are refused (exit 2).
The checks and what each template renders live in tests/support/family_table.py, which also builds the family table of
docs/models.md from them (tests/unit/test_family_table.py)."""
from __future__ import annotations

import pytest

from swiftbox import data
from swiftbox.errors import UserError
from tests.support.family_table import (
    FAMILIES,
    FIXTURE_OF,
    NAMES,
    TEMPLATES,
    TURNS,
    dpo_cases,
    generation_cases,
    reasoning_case,
    reasoning_messages,
    replies,
    sft_case,
    tool_cases,
    tool_dpo_cases,
    use,
)

QWEN3_LAST = FAMILIES["Qwen-Qwen3-0.6B"].last_prefix


@pytest.fixture(scope="module")
def tok(toy_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(toy_dir)


def test_every_preset_family_has_a_fixture():
    from swiftbox.catalog.presets import PRESETS

    missing = sorted({p.family for p in PRESETS} - set(FIXTURE_OF))
    assert not missing, f"preset families without a real-template fixture: {missing}"
    for family, name in FIXTURE_OF.items():
        assert name in FAMILIES and (TEMPLATES / f"{name}.jinja").is_file(), family
    assert sorted(p.stem for p in TEMPLATES.glob("*.jinja")) == NAMES    # every fixture is checked
    readme = (TEMPLATES / "README.md").read_text(encoding="utf-8")
    assert all(f"{name}.jinja" in readme for name in NAMES)     # every fixture has its provenance row


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("system", [False, True])
def test_multi_turn_labels_are_exactly_the_replies(tok, name, system):
    if system and not FAMILIES[name].system:
        with pytest.raises(UserError, match="System role not supported"):
            sft_case(tok, name, system)
        return
    got, want = sft_case(tok, name, system)
    assert got == want


@pytest.mark.parametrize("name", NAMES)
def test_reasoning_is_trained_as_the_template_renders_it(tok, name):
    got, want = reasoning_case(tok, name)     # earlier turns lose their reasoning where the template drops it;
    assert got == want                        # templates that ignore reasoning_content label the plain replies


@pytest.mark.parametrize("name", NAMES)
def test_tool_calls_are_labelled_as_the_model_must_emit_them(tok, name):
    for got, want in tool_cases(tok, name):   # the template's format, else swiftbox's default (data/dialect.py)
        assert got == want


@pytest.mark.parametrize("name", NAMES)
def test_dpo_split_and_eval_choice_use_the_same_spans(tok, name):
    for got, want in dpo_cases(tok, name):
        assert got == want


@pytest.mark.parametrize("name", NAMES)
def test_tool_call_dpo_completion_ends_with_the_call(tok, name):
    """A chosen reply that is a tool call ends where the template's call ends (its closing markup included), and is
    what SFT labels for the same turn."""
    for got, want in tool_dpo_cases(tok, name):
        assert got == want


@pytest.mark.parametrize("name", NAMES)
def test_generation_prompt_is_the_templates_own(tok, name):
    for got, want in generation_cases(tok, name):
        assert got == want


def test_qwen3_partial_renders_are_not_prefixes_yet_labels_are_exact(tok):
    use(tok, "Qwen-Qwen3-0.6B")
    partial = tok.apply_chat_template(TURNS[:2], tokenize=False)
    assert not tok.apply_chat_template(TURNS, tokenize=False).startswith(partial)
    assert replies(tok, TURNS) == ["Hello.<|im_end|>", QWEN3_LAST + "Bye.<|im_end|>"]


ECHO = ("{% for m in messages %}{% if m.role == 'user' %}<u>{{ m.content }}"
        "{% if not loop.first %} (you said: {{ messages[loop.index0 - 1].content }}){% endif %}</u>"
        "{% else %}<a>{{ m.content }}</a>{% endif %}{% endfor %}{% if add_generation_prompt %}<a>{% endif %}")
DROPS_HISTORY = ("{% for m in messages %}{% if m.role != 'assistant' or loop.last %}<{{ m.role }}>{{ m.content }}"
                 "</s>{% endif %}{% endfor %}{% if add_generation_prompt %}<assistant>{% endif %}")


@pytest.mark.parametrize("template,why", [(ECHO, "would fall inside"), (DROPS_HISTORY, "does not render")])
def test_templates_that_rewrite_history_are_refused(tok, template, why):
    tok.chat_template = template
    with pytest.raises(UserError, match=why) as err:
        data.encode(tok, TURNS)
    assert "chat_template" in str(err.value) and "\n" not in str(err.value)


# -- issue 42: the end-of-turn rule read off the template, reasoning fields, template switches ---------------------
RUN_CLOSE = ("{% for m in messages %}<|open|>{{ m.role }}<|sep|>{{ m.content }}"
             "{% if m.role == 'assistant' %}<|close|>response<|sep|>{% endif %}<|close|>message<|sep|><|end_of_msg|>"
             "{% endfor %}{% if add_generation_prompt %}<|open|>assistant<|sep|>{% endif %}")
CLOSE_IF_FOLLOWED = ("{% for m in messages %}<|{{ m.role }}_start|>{{ m.content }}"
                     "{% if m.role != 'assistant' or not loop.last %}<|{{ m.role }}_end|>{% endif %}{% endfor %}"
                     "{% if add_generation_prompt %}<|assistant_start|>{% endif %}")
TRAINING_FLAG = ("{% for m in messages %}<{{ m.role }}>{{ m.content }}"
                 "{% if m.role != 'assistant' or not loop.last or is_training %}<eos:{{ m.role }}>{% endif %}"
                 "{% endfor %}{% if add_generation_prompt %}<assistant>{% endif %}")
FOLLOWED_REWRITES = ("{% for m in messages %}<|{{ m.role }}_start|>"
                     "{{ m.content if loop.last or m.role != 'assistant' else 'SUMMARY' }}"
                     "{% if m.role != 'assistant' or not loop.last %}<|{{ m.role }}_end|>{% endif %}{% endfor %}"
                     "{% if add_generation_prompt %}<|assistant_start|>{% endif %}")


def test_a_closing_run_of_several_markers_is_labelled_whole_and_never_the_next_header(tok):
    tok.chat_template = RUN_CLOSE
    close = "<|close|>response<|sep|><|close|>message<|sep|><|end_of_msg|>"
    assert replies(tok, TURNS) == ["Hello." + close, "Bye." + close]


def test_a_closing_written_only_when_another_turn_follows_is_trained_on_the_last_reply(tok):
    tok.chat_template = CLOSE_IF_FOLLOWED
    assert replies(tok, TURNS) == ["Hello.<|assistant_end|>", "Bye.<|assistant_end|>"]
    assert data.encode(tok, TURNS).input_ids == tok(data.render(tok, TURNS) + "<|assistant_end|>",
                                                    add_special_tokens=False)["input_ids"]
    row = {"prompt": TURNS[:3], "chosen": [TURNS[3]], "rejected": [{"role": "assistant", "content": "No."}]}
    (pair,), _ = data.dpo_strings([row], tok, 4096)
    assert (pair["chosen"], pair["rejected"]) == ("Bye.<|assistant_end|>", "No.<|assistant_end|>")


def test_the_training_flag_the_template_reads_is_set_for_training_only(tok):
    tok.chat_template = TRAINING_FLAG
    assert replies(tok, TURNS) == ["Hello.<eos:assistant>", "Bye.<eos:assistant>"]
    assert not data.render(tok, TURNS).endswith("<eos:assistant>")      # serving renders without it
    assert tok.decode(data.encode(tok, TURNS).input_ids) == data.render(tok, TURNS, is_training=True)


def test_a_template_that_renders_history_differently_once_a_turn_follows_is_refused(tok):
    tok.chat_template = FOLLOWED_REWRITES
    with pytest.raises(UserError, match="once another turn follows") as err:
        data.encode(tok, TURNS[:2])
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("field", ["reasoning", "thinking"])
def test_reasoning_reaches_templates_that_read_it_under_another_name(tok, field):
    tok.chat_template = ("{% for m in messages %}<{{ m.role }}>{% if m." + field + " %}<think>{{ m." + field +
                         " }}</think>{% endif %}{{ m.content }}</s>{% endfor %}"
                         "{% if add_generation_prompt %}<assistant>{% endif %}")
    turns = [TURNS[0], dict(TURNS[1], reasoning_content="Think first.")]
    assert replies(tok, turns) == ["<think>Think first.</think>Hello.</s>"]


NEMOTRON = "nvidia-NVIDIA-Nemotron-3-Nano-30B-A3B-BF16"


def test_template_switches_of_a_row_reach_training_and_align_the_generation_prompt(tok):
    """Nemotron 3 opens <think> in its generation prompt while training renders <think></think>: the row's own
    `enable_thinking: false` renders both the same way, so the reply trains after the prompt the model gets."""
    from swiftbox.data.formats import sft_row

    use(tok, NEMOTRON)
    row = sft_row({"messages": TURNS, "chat_template_kwargs": {"enable_thinking": False}})
    (enc,), _ = data.tokenize_sft([row], tok, 4096)
    first = enc["labels"].index(next(t for t in enc["labels"] if t != -100))
    prompt = data.render(tok, TURNS[:3], generation_prompt=True, enable_thinking=False)
    assert tok.decode(enc["input_ids"][:first]).endswith(prompt[-40:]) and prompt.endswith("<think></think>")
    assert tok.decode([t for t in enc["labels"] if t != -100]) == "Hello.<|im_end|>Bye.<|im_end|>"


@pytest.mark.parametrize("switches,key", [
    ({"messages": []}, "messages"), ({"enable_thinking": "no"}, "enable_thinking"),
    ({"reasoning_effort": "huge"}, "reasoning_effort"), ([1], "")])
def test_a_row_with_a_switch_no_template_takes_is_one_line_naming_it(tmp_path, switches, key):
    import json

    path = tmp_path / "rows.jsonl"
    path.write_text(json.dumps({"messages": TURNS, "chat_template_kwargs": switches}) + "\n")
    with pytest.raises(UserError, match=rf"chat_template_kwargs{'.' + key if key else ''}: ") as err:
        data.load_sft(str(path))
    assert "\n" not in str(err.value)


def test_a_marked_turn_loses_only_the_header_the_generation_prompt_holds(tok):
    """{% generation %} around header and reply, a prompt that closes thinking (`<assistant>\\n</think>`) and a
    reasoning reply that opens it: the labels start after `<assistant>\\n`, never on the header (Laguna)."""
    tok.chat_template = ("{% for m in messages %}{% if m.role == 'assistant' %}{% generation %}<assistant>\n"
                         "{% if m.reasoning_content %}<think>{{ m.reasoning_content }}</think>{% endif %}"
                         "{{ m.content }}</assistant>{% endgeneration %}{% else %}<{{ m.role }}>{{ m.content }}"
                         "</{{ m.role }}>{% endif %}{% endfor %}{% if add_generation_prompt %}<assistant>\n</think>"
                         "{% endif %}")
    turns = [TURNS[0], dict(TURNS[1], reasoning_content="Think first.")]
    assert replies(tok, turns) == ["<think>Think first.</think>Hello.</assistant>"]
    assert replies(tok, TURNS[:2]) == ["Hello.</assistant>"]


# -- issue 42: the step's chat_template_kwargs (recipe key, --chat-template-kwargs JSON) --------------------------
DSV4 = "deepseek-ai-DeepSeek-V4"
THINKING = '{"thinking": true}'


def _step_rows(kind: str, flag: str, rows: list[dict]) -> list[dict]:
    """The rows as the step's pipeline reads them: the switches parsed from the CLI flag by the step's schema."""
    from swiftbox.cli import _settings_from_args, build_parser
    from swiftbox.steps import STEP_TYPES

    args = build_parser().parse_args([kind, "--dataset", "x.jsonl", "--chat-template-kwargs", flag])
    cfg = STEP_TYPES[kind].model_validate(_settings_from_args(args, STEP_TYPES[kind]))
    return data.with_switches(rows, cfg.chat_template_kwargs)


def test_the_steps_template_switches_change_what_sft_trains_on(tok):
    """DeepSeek-V4 prints a reply's reasoning only with `thinking`: the step's switch makes the last reply's
    reasoning train, after the generation prompt the model gets with the same switch; a row's own switch wins."""
    from swiftbox.data.formats import sft_row

    use(tok, DSV4)
    row = sft_row({"messages": reasoning_messages()})
    (plain,), _ = data.tokenize_sft([row], tok, 4096)
    (think,), _ = data.tokenize_sft(_step_rows("sft", THINKING, [row]), tok, 4096)
    assert "Think Bye." not in tok.decode(plain["input_ids"])
    assert tok.decode(think["input_ids"]).endswith("<think>Think Bye.</think>Bye.<｜end▁of▁sentence｜>")
    labels = tok.decode([t for t in think["labels"] if t != -100])
    assert labels.endswith("Think Bye.</think>Bye.<｜end▁of▁sentence｜>")
    last = max(i for i, t in enumerate(think["labels"]) if t == -100)
    prompt = data.render(tok, TURNS[:3], generation_prompt=True, thinking=True)
    assert prompt.endswith("<think>") and tok.decode(think["input_ids"][:last + 1]) == prompt
    own = sft_row({"messages": reasoning_messages(), "chat_template_kwargs": {"thinking": False}})
    (kept,), _ = data.tokenize_sft(_step_rows("sft", THINKING, [own]), tok, 4096)
    assert kept["input_ids"] == plain["input_ids"]


def test_the_steps_template_switches_reach_the_dpo_prompt(tok):
    use(tok, DSV4)
    row = {"prompt": TURNS[:3], "chosen": [{"role": "assistant", "content": "Bye."}],
           "rejected": [{"role": "assistant", "content": "No."}]}
    (plain,), _ = data.dpo_strings([row], tok, 4096)
    (think,), _ = data.dpo_strings(_step_rows("dpo", THINKING, [row]), tok, 4096)
    assert plain["prompt"].endswith("</think>") and think["prompt"].endswith("<think>")
    assert think["prompt"] == data.render(tok, TURNS[:3], generation_prompt=True, thinking=True)


@pytest.mark.parametrize("flag,why", [('{"enable_thinking": "no"}', "enable_thinking: expected true or false"),
                                      ('{"tokenize": true}', "tokenize: not a template switch"),
                                      ("thinking=true", "expected a JSON object")])
def test_a_step_switch_no_template_takes_is_refused_naming_it(flag, why):
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match=why):
        _step_rows("sft", flag, [])

"""GRPO's reward specs, built-in rewards, user reward files and prompt loading — no model, fast.

Bad specs, files and shapes are one line, exit 2, before any work: the schema refuses malformed specs, the
pipeline's check imports a named Python file, and every reward's result is checked (length, finite numbers)."""
from __future__ import annotations

import json
import math

import pytest

from swiftbox.errors import UserError
from swiftbox.steps import GrpoStep
from swiftbox.training import rewards
from swiftbox.training.rewards import parse_spec

DATA = "recipes/data/parity_sft.jsonl"


def build(specs, refs=("yes", "no"), max_len=8):
    return rewards.build(list(specs), references=list(refs), max_completion_length=max_len)


def call(fn, completions, refs, prompts=None):
    logged = {}
    out = fn(prompts=prompts or ["p"] * len(completions), completions=completions, solution=refs,
             completion_ids=[[1] * (2 + 3 * i) for i in range(len(completions))],
             log_metric=lambda k, v: logged.__setitem__(k, v))
    return out, logged


@pytest.mark.parametrize("text,kind,arg", [
    ("exact", "exact", ""), ("contains", "contains", ""), ("choice", "choice", ""), ("length", "length", ""),
    ("regex:^(yes|no)$", "regex", "^(yes|no)$"), ("format:<think>", "format", "think"),
    ("format:<think>…", "format", "think"), ("format:answer", "format", "answer"),
    ("model:runs/x/rm", "model", "runs/x/rm"), ("my/rew.py:score", "python", "my/rew.py"),
])
def test_specs_parse(text, kind, arg):
    spec = parse_spec(text)
    assert (spec.kind, spec.arg) == (kind, arg)


@pytest.mark.parametrize("text,says", [
    ("", "empty reward"), ("exactly", "unknown reward"), ("regex:(", "not a regular expression"),
    ("regex:", "empty pattern"), ("regex:(a)(b)", "at most one group"), ("format:<>", "format:<TAG>"),
    ("model:", "model:DIR"), ("r.py:1x", "not a Python function name"), ("r.txt:f", "unknown reward"),
])
def test_bad_specs_are_refused_by_the_schema(text, says):
    with pytest.raises(ValueError, match=says):
        parse_spec(text)
    with pytest.raises(Exception, match=says):
        GrpoStep(dataset=DATA, rewards=[text])


@pytest.mark.parametrize("settings,says", [
    ({"num_generations": 1}, "greater than or equal to 2"), ({"temperature": 0}, "greater than 0"),
    ({"temperature": math.inf}, "finite"), ({"beta": math.nan}, "finite"), ({"max_completion_length": 0}, "1"),
    ({"rewards": []}, "at least one reward"), ({"reward_weights": [1, 2]}, "2 value"),
    ({"reward_weights": [0]}, "not all zero"), ({"reward_weights": [math.inf]}, "finite"),
    ({"batch_size": 6, "num_generations": 4}, "multiple of num_generations"),
    ({"rewards": {"exact": 1}, "reward_weights": [1]}, "drop reward_weights"),
])
def test_bad_numbers_are_refused(settings, says):
    with pytest.raises(Exception, match=says):
        GrpoStep(dataset=DATA, **settings)


def test_weighted_map_is_rewards_plus_weights():
    cfg = GrpoStep(dataset=DATA, rewards={"exact": 1.0, "format:<think>": 0.25})
    assert cfg.rewards == ["exact", "format:<think>"] and cfg.reward_weights == [1.0, 0.25]


def test_builtin_rewards_score_what_they_say():
    comps, refs = ["Yes.", "no", "yes, it is", "maybe"], ["yes", "yes", "yes", "no"]
    exact, contains, choice, regex = build(["exact", "contains", "choice", "regex:answer: (\\w+)"], refs)
    assert call(exact, comps, refs)[0] == [1.0, 0.0, 0.0, 0.0]
    assert call(contains, comps, refs)[0] == [1.0, 0.0, 1.0, 0.0]
    assert call(choice, comps, refs)[0] == [1.0, 0.0, 1.0, 0.0]      # the first choice named is the answer
    assert call(regex, ["answer: yes", "answer: no", "none", "x"], refs)[0] == [1.0, 0.0, 0.0, 0.0]
    plain, = build(["regex:^(?:yes|no)$"], refs)
    assert call(plain, ["yes", "no", "yes!", "maybe"], refs)[0] == [1.0, 1.0, 0.0, 0.0]


def test_format_and_length_wrap_trl():
    think, other = build(["format:<think>", "format:<answer>"])
    assert call(think, ["<think>a</think>yes", "yes"], ["yes", "no"])[0] == [1.0, 0.0]
    assert call(other, ["<answer>a</answer>", "<answer>a"], ["yes", "no"])[0] == [1.0, 0.0]
    length, = build(["length"], max_len=8)          # soft overlong: 0 up to 6 tokens, then down to -1 at 8
    out, _ = call(length, ["a", "b", "c"], ["yes", "no", "no"])  # completion ids of 2, 5, 8 tokens
    assert out == [0.0, 0.0, -1.0]


def test_first_reward_logs_accuracy_against_the_reference():
    exact, contains = build(["exact", "contains"])
    _, logged = call(exact, ["yes", "no", "no", "no"], ["yes", "yes", "no", "yes"])
    assert logged == {"accuracy": 0.5}
    assert call(contains, ["yes"], ["yes"])[1] == {}


def test_reference_rewards_need_references():
    with pytest.raises(UserError, match="needs a reference answer in every row.*1 row"):
        build(["exact"], refs=["yes", None])
    with pytest.raises(UserError, match="distinct value"):
        build(["choice"], refs=["yes", "yes"])
    build(["format:<think>"], refs=[None, None])     # no reference needed


def write(tmp_path, body, name="my_rewards.py"):
    path = tmp_path / name
    path.write_text(body)
    return str(path)


def test_user_function_is_loaded_only_when_named_and_checked(tmp_path):
    path = write(tmp_path, "def short(completions, solution, **kw):\n"
                           "    return [float(len(c) < 4) for c in completions]\n"
                           "def wrong_len(completions, **kw):\n    return [1.0]\n"
                           "def nan(completions, **kw):\n    return [float('nan')] * len(completions)\n"
                           "def text(completions, **kw):\n    return ['a'] * len(completions)\n"
                           "def scalar(completions, **kw):\n    return 1.0\n"
                           "def boom(completions, **kw):\n    raise KeyError('solution')\n"
                           "def skip(completions, **kw):\n    return [None] * len(completions)\n"
                           "NOT_FN = 3\n")
    rewards.check_spec(parse_spec(f"{path}:short"))
    short, = build([f"{path}:short"])
    assert call(short, ["yes", "no way"], ["yes", "no"])[0] == [1.0, 0.0]
    assert short.__name__ == "short"           # TRL logs rewards/short/mean
    assert call(build([f"{path}:skip"])[0], ["a"], ["yes"])[0] == [None]   # TRL's "not applicable"
    for fn, says in (("wrong_len", "returned 1 value.s. for 2 completions"), ("nan", "must be finite"),
                     ("text", "expected numbers"), ("scalar", "returned float; expected a list"),
                     ("boom", "raised KeyError")):
        reward, = build([f"{path}:{fn}"])
        with pytest.raises(UserError, match=f"reward .*my_rewards.py:{fn}: .*{says}"):
            call(reward, ["yes", "no"], ["yes", "no"])


@pytest.mark.parametrize("body,fn,says", [
    ("def f(:\n", "f", "importing .*my_rewards.py failed .SyntaxError"),
    ("import no_such_module_xyz\n", "f", "importing .*failed .ModuleNotFoundError"),
    ("raise SystemExit(3)\n", "f", "importing .*failed .SystemExit"),
    ("def g(**kw):\n    return []\n", "f", "has no function 'f'"),
    ("f = 3\n", "f", "is not callable"),
])
def test_user_file_that_cannot_serve_is_one_line(tmp_path, body, fn, says):
    path = write(tmp_path, body)
    with pytest.raises(UserError, match=says):
        rewards.check_spec(parse_spec(f"{path}:{fn}"))


def test_missing_file_and_model_dir(tmp_path):
    with pytest.raises(UserError, match="not found"):
        rewards.check_spec(parse_spec(f"{tmp_path}/none.py:f"))
    with pytest.raises(UserError, match="not a model directory"):
        rewards.check_spec(parse_spec(f"model:{tmp_path}"))


def test_bad_reward_file_exits_2_before_any_output(cli, tmp_path):
    path = write(tmp_path, "import no_such_module_xyz\n")
    res = cli("grpo", "toy", "--dataset", DATA, "--rewards", f"{path}:f", "--out", str(tmp_path / "o"))
    assert res.returncode == 2, res.stderr
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "my_rewards.py" in lines[0] and "ModuleNotFoundError" in lines[0]
    assert not (tmp_path / "o").exists() and not (tmp_path / "o.partial").exists()
    res = cli("grpo", "toy", "--dataset", DATA, "--rewards", "regex:(", "--out", str(tmp_path / "o"))
    assert res.returncode == 2 and "not a regular expression" in res.stderr and len(res.stderr.splitlines()) == 1


def test_prompts_from_every_format_keep_the_reference(tmp_path):
    from swiftbox import data

    rows = [{"messages": [{"role": "user", "content": "Is 4 even?"}, {"role": "assistant", "content": "yes"}]},
            {"messages": [{"role": "system", "content": "S"}, {"role": "user", "content": "Q"}], "solution": "42"},
            {"prompt": "Is 3 even?", "answer": "no"},
            {"prompt": [{"role": "user", "content": "Q2"}], "solution": 7},
            {"instruction": "Add", "input": "1 1", "output": "2"},
            {"conversations": [{"from": "human", "value": "hi"}]},
            {"messages": [{"role": "user", "content": "Q"}, {"role": "assistant", "content": "a"}], "answer": "b"}]
    path = tmp_path / "g.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    got = data.load_grpo(str(path), seed=0)
    refs = sorted(str(g["reference"]) for g in got)
    assert refs == sorted(["yes", "42", "no", "7", "2", "None", "b"])
    assert all(g["prompt"][-1]["role"] == "user" for g in got)
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"messages": [{"role": "assistant", "content": "a"}]}) + "\n")
    with pytest.raises(UserError, match="bad.jsonl: row 1: the prompt must end with a user"):
        data.load_grpo(str(bad))
    bad.write_text(json.dumps({"text": "a"}) + "\n")
    with pytest.raises(UserError, match="fit no GRPO format"):
        data.load_grpo(str(bad))


def test_prompt_is_the_generation_prompt_render(toy_dir):
    from transformers import AutoTokenizer

    from swiftbox import data

    tok = AutoTokenizer.from_pretrained(str(toy_dir))
    rows = [{"prompt": [{"role": "user", "content": "Is 4 even?"}], "reference": "yes"},
            {"prompt": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "x " * 400}],
             "reference": None}]
    out, counts = data.grpo_prompts(rows, tok, 64)
    assert out[0] == {"prompt": tok.apply_chat_template(rows[0]["prompt"], tokenize=False,
                                                        add_generation_prompt=True), "solution": "yes"}
    assert counts.truncated == 1 and len(tok(out[1]["prompt"], add_special_tokens=False)["input_ids"]) <= 64
    assert "Be brief." in out[1]["prompt"] and out[1]["prompt"].endswith(out[0]["prompt"][-20:])


def test_vllm_rollouts_are_refused_off_cuda(tmp_path):
    from swiftbox.device import CpuPlatform
    from swiftbox.errors import Unsupported
    from swiftbox.pipelines.grpo import check

    with pytest.raises(Unsupported, match="vllm-colocate is not available on cpu.*use_vllm: false"):
        check(GrpoStep(dataset=DATA, use_vllm=True), CpuPlatform(), "toy")
    check(GrpoStep(dataset=DATA), CpuPlatform(), "toy")


def test_menu_reward_question_checks_the_file_as_typed(tmp_path):
    from menus.flows import FLOWS
    from menus.grpo_flow import check_user_reward

    path = write(tmp_path, "def f(completions, **kw):\n    return [0.0] * len(completions)\n")
    assert check_user_reward(f"{path}:f") is True
    assert "has no function 'g'" in check_user_reward(f"{path}:g")
    assert check_user_reward("exact") == "expected path/to/rewards.py:function"
    assert FLOWS["grpo"].kind == "grpo"

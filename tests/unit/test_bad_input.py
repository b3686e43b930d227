"""Every bad input is one line and exit 2 (issue 20): the bad-flag table of the outside attack, recipes that
nest too deep, alias bombs, duplicate keys, `--set` mistakes, and no debris left by a failed command."""
from __future__ import annotations

import json
import math
import re
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from swiftbox import cli
from swiftbox.errors import UserError
from swiftbox.recipe import apply_overrides, load_recipe
from tests.conftest import ROOT

SFT_DATA = str(ROOT / "recipes" / "data" / "parity_sft.jsonl")
EVAL_DATA = str(ROOT / "recipes" / "data" / "parity_eval.jsonl")

# (argv, a word the one line must contain). Each of these ended in a traceback, silently trained NaN
# weights, or was silently ignored before issue 20.
BAD_FLAGS = [
    (["sft", "toy", "--dataset", SFT_DATA, "--lr-scheduler", "bogus"], "lr_scheduler"),
    (["sft", "toy", "--dataset", SFT_DATA, "--seed", "-1"], "seed"),
    (["sft", "toy", "--dataset", SFT_DATA, "--epochs", "inf"], "epochs"),
    (["sft", "toy", "--dataset", SFT_DATA, "--epochs", "nan"], "epochs"),
    (["sft", "toy", "--dataset", SFT_DATA, "--lora.alpha", "inf"], "lora.alpha"),
    (["sft", "toy", "--dataset", SFT_DATA, "--lora.alpha", "1e300"], "lora.alpha"),
    (["sft", "toy", "--dataset", SFT_DATA, "--weight-decay", "inf"], "weight_decay"),
    (["sft", "toy", "--dataset", SFT_DATA, "--learning-rate", "nan"], "learning_rate"),
    (["sft", "toy", "--dataset", SFT_DATA, "--max-steps", "0"], "max_steps"),
    (["sft", "toy", "--dataset", SFT_DATA, "--seed", "99999999999999999999"], "seed"),
    (["sft", "toy", "--dataset", SFT_DATA, "--fsdp", "full_shard"], "fsdp"),
    (["dpo", "toy", "--dataset", SFT_DATA, "--beta", "inf"], "beta"),
    (["kto", "toy", "--dataset", SFT_DATA, "--beta", "nan"], "beta"),
    (["orpo", "toy", "--dataset", SFT_DATA, "--beta", "1e300"], "beta"),
    (["simpo", "toy", "--dataset", SFT_DATA, "--gamma", "inf"], "gamma"),
    (["rm", "toy", "--dataset", SFT_DATA, "--center-rewards", "nan"], "center_rewards"),
    (["merge", "toy", "--max-shard-size", "abc"], "max_shard_size"),
    (["merge", "toy", "--tolerance", "nan"], "tolerance"),
    (["quantize", "toy", "--group-size", "0"], "group_size"),
    (["eval", "toy", "--dataset", EVAL_DATA, "--out", ".", "--force"], "output"),
    (["eval", "toy:99999999999999999999", "--dataset", EVAL_DATA], "toy:SEED"),
    (["serve", "toy", "--host", ""], "host"),
    (["serve", "toy", "--host", "0.0.0.0"], "SWIFTBOX_API_KEY"),
    (["serve", "toy", "--host", "0.0.0.0", "--insecure-no-auth"], "--expose-without-auth"),
    (["serve", "toy", "--max-queue", "0"], "max_queue"),
    (["chat", "toy", "--temperature", "inf"], "temperature"),
    (["run", str(ROOT / "recipes" / "quickstart.yaml"), "--set", "eval[0].limit=BAD"], "count from 1"),
]


@pytest.mark.parametrize("argv,word", BAD_FLAGS, ids=[" ".join(a[:1] + a[-2:]) for a, _ in BAD_FLAGS])
def test_bad_flags_exit_2_with_one_line(argv, word, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SWIFTBOX_API_KEY", raising=False)
    try:
        rc = cli.main(argv)
    except SystemExit as exc:        # argparse's own refusals
        rc = exc.code
    err = capsys.readouterr().err.strip()
    assert rc == 2, err
    assert len(err.splitlines()) == 1 and word in err and "Traceback" not in err, err
    assert not list(tmp_path.rglob("summary.json")) and not list(tmp_path.rglob("*.partial")), "debris left behind"


@pytest.mark.slow
@pytest.mark.parametrize("argv", [
    ["sft", "toy", "--dataset", SFT_DATA, "--lora.targets", "no_such_module", "--max-steps", "1"],
    ["eval", "toy:99999999999999999999", "--dataset", EVAL_DATA],
])
def test_no_third_party_line_before_ours(argv, cli, tmp_path):
    """In a fresh process (import-time noise included): exactly one line, swiftbox's."""
    out = cli(*argv, cwd=tmp_path)
    assert out.returncode == 2, out.stderr
    assert out.stderr.strip().startswith("swiftbox:") and len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert not list(tmp_path.rglob("summary.json")) and not list(tmp_path.rglob("*.partial"))


def test_lr_schedulers_match_transformers():
    from transformers.trainer_utils import SchedulerType

    from swiftbox.steps import LR_SCHEDULERS

    assert set(LR_SCHEDULERS) == {s.value for s in SchedulerType}


def test_output_tilde_means_home(tmp_path, monkeypatch):
    from swiftbox.steps import EvalStep

    monkeypatch.setenv("HOME", str(tmp_path))
    assert EvalStep(output="~/x").output == str(tmp_path / "x")


# -- recipe files ------------------------------------------------------------------------------------------

def _bomb(levels: int = 9, width: int = 9) -> str:
    """A YAML 'billion laughs' as one flow value: each level defines an anchor and repeats the previous one
    `width` times (width**levels leaves once expanded; a few hundred nodes as loaded)."""
    text = "&a0 [" + ", ".join(["lol"] * width) + "]"
    for i in range(1, levels):
        text = f"&a{i} [{text}, " + ", ".join([f"*a{i - 1}"] * (width - 1)) + "]"
    return text


def _nested(depth: int) -> str:
    return "[" * depth + "]" * depth


def _load_text(tmp_path, text: str):
    path = tmp_path / "r.yaml"
    path.write_text(text, encoding="utf-8")
    return load_recipe(path)


@pytest.mark.parametrize("text,word", [
    (f"name: x\nsteps:\n- sft: {{dataset: {_nested(600)}}}\n", "nested"),          # RecursionError before
    (f"name: x\nsteps: {_nested(100)}\n", "nested"),
    ("name: x\nname: y\nsteps: [eval]\n", "duplicate key 'name'"),
    ("name: x\nsteps:\n- eval: {limit: 1, limit: 2}\n", "duplicate key 'limit'"),
    ("name: x\nmodel: 2026-13-45\nsteps: [eval]\n", "cannot be read"),
])
def test_malformed_recipe_files(text, word, tmp_path):
    with pytest.raises(UserError) as err:
        _load_text(tmp_path, text)
    assert word in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("where", ["header", "step", "setting", "steps", "set"])
def test_alias_bomb_is_refused_quickly(where, tmp_path):
    """The error formatter used to repr the expanded value (2 GB, killed); now reprlib bounds it."""
    bomb = _bomb()
    body = {"header": f"name: {bomb}\nsteps: [eval]",
            "step": f"name: x\nsteps: [{bomb}]",
            "setting": f"name: x\nsteps:\n- sft: {{dataset: {bomb}}}",
            "steps": f"name: x\nsteps: {bomb}",
            "set": "name: x\nsteps: [eval]"}[where]
    started = time.monotonic()
    with pytest.raises(UserError) as err:
        if where == "set":
            (tmp_path / "r.yaml").write_text(body)
            load_recipe(tmp_path / "r.yaml", [f"eval.limit={bomb}"])
        else:
            _load_text(tmp_path, body + "\n")
    assert "\n" not in str(err.value) and len(str(err.value)) < 400
    assert time.monotonic() - started < 30     # generous: the unbounded formatter never finished


def test_utf8_bom_recipe_loads(tmp_path):
    path = tmp_path / "r.yaml"
    path.write_bytes("\ufeffname: x\nmodel: toy\nsteps: [eval]\n".encode())
    assert load_recipe(path).name == "x"


@pytest.mark.parametrize("override,word", [
    ("eval[0].limit=BAD", "count from 1"),                    # silently ignored before
    # RecursionError before; whether yaml's parser or the depth check stops it first depends on the stack left
    ("eval.limit=" + _nested(600), "cannot be read|nested more than 32"),
    ("eval.limit=" + _nested(40), "nested"),
])
def test_set_overrides(override, word):
    with pytest.raises(UserError) as err:
        apply_overrides({"name": "x", "steps": [{"eval": {}}]}, [override])
    assert re.search(word, str(err.value)) and "\n" not in str(err.value)


yaml_scalar = st.one_of(st.sampled_from(["toy", "sft", "eval", "lora", "1e999", "-.inf", ".nan", "~", "''", "[", "{",
                                         "&a", "*a", "!!python/object:os.system", "\t", "2026-13-45", "0x", "- -"]),
                        st.integers(-10**30, 10**30).map(str), st.text(max_size=8).map(json.dumps))


@st.composite
def yaml_documents(draw):
    """Recipe-shaped YAML text with random damage: deep nesting, alias bombs, duplicates, odd scalars."""
    kind = draw(st.sampled_from(["sft", "eval", "dpo", "merge", "quantize", "serve", "chat", "download"]))
    key = draw(st.sampled_from(["dataset", "epochs", "lora", "limit", "host", "max_shard_size", "beta", "seed", "zz"]))
    value = draw(st.one_of(
        yaml_scalar,
        st.integers(1, 800).map(_nested),
        st.integers(1, 60).map(lambda d: "{a: " * d + "1" + "}" * d),
        st.just(_bomb()),
        st.lists(yaml_scalar, max_size=5).map(lambda xs: "[" + ", ".join(xs) + "]"),
    ))
    lines = [f"name: {draw(st.sampled_from(['x', 'x y', '', _bomb(), '1']))}"]
    if draw(st.booleans()):
        lines.append("model: toy")
    lines.append(f"steps:\n- {kind}: {{{key}: {value}}}")
    if draw(st.booleans()):
        lines.append(draw(st.sampled_from(["name: again", "steps: []", "device: quantum", "devices: '0,0'"])))
    return "\n".join(lines) + "\n"


FUZZ_DEADLINE_MS = 10_000   # per case; the unbounded formatter / recursion used to take minutes or crash


@settings(max_examples=200, deadline=FUZZ_DEADLINE_MS, suppress_health_check=list(HealthCheck))
@given(yaml_documents())
def test_fuzz_recipe_text_one_line_or_valid(tmp_path_factory, text):
    path = tmp_path_factory.mktemp("fuzz") / "r.yaml"
    path.write_text(text, encoding="utf-8")
    try:
        load_recipe(path)
    except UserError as exc:
        msg = str(exc)
        assert msg and "\n" not in msg and len(msg) < 500 and exc.exit_code == 2, msg


# -- a failed command leaves nothing behind ----------------------------------------------------------------

def test_failed_one_step_command_leaves_no_summary_or_partial(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    rc = cli.main(["eval", "toy", "--dataset", str(tmp_path / "missing.jsonl")])
    assert rc == 2
    assert not list(tmp_path.rglob("summary.json")) and not list(tmp_path.rglob("*.partial"))


def test_manifests_are_strict_json(tmp_path):
    from swiftbox.artifacts import write_json_atomic

    write_json_atomic(tmp_path / "m.json", {"loss": float("nan"), "ppl": [float("inf"), 1.5]})

    def refuse(token):
        raise ValueError(f"bare {token} in a manifest")

    data = json.loads((tmp_path / "m.json").read_text(), parse_constant=refuse)
    assert data == {"loss": "nan", "ppl": ["inf", 1.5]}


def test_parity_check_is_nan_safe():
    from swiftbox.parity import check

    assert check({"max_abs_diff": math.nan, "cosine_min": math.nan}, max_diff=1e-4, min_cosine=0.99) != []
    assert check({"max_abs_diff": 0.0, "cosine_min": 1.0}, max_diff=1e-4, min_cosine=0.99) == []

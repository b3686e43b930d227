"""Recipe schema, overrides and the one-line error contract (fuzzed with hypothesis)."""
from __future__ import annotations

import copy

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from swiftbox.errors import UserError
from swiftbox.recipe import apply_overrides, load_recipe, validate_recipe
from swiftbox.steps import STEP_TYPES, SftStep
from tests.conftest import ROOT

QUICKSTART = yaml.safe_load((ROOT / "recipes" / "quickstart.yaml").read_text())
# what the mutations below start from: the quickstart with an explicit lora block on its sft step
BASE = copy.deepcopy(QUICKSTART)
BASE["steps"][1]["sft"].update(method="lora", lora={"rank": 8, "alpha": 16})


def test_quickstart_and_every_shipped_recipe_validate():
    for path in sorted((ROOT / "recipes").glob("*.yaml")):
        recipe = load_recipe(path)
        assert recipe.steps, path
    recipe = load_recipe(ROOT / "recipes" / "quickstart.yaml")
    kinds = [s.kind for s in recipe.steps]
    assert kinds[:2] == ["eval", "sft"] and "dpo" in kinds and kinds[-2:] == ["serve", "verify"]
    sft, dpo = recipe.steps[1].config, recipe.steps[3].config
    # LoRA with the menu's defaults on the pretrained toy; DPO continues the adapter (docs/quickstart.md)
    assert isinstance(sft, SftStep) and sft.method == "lora" and (sft.lora.rank, sft.lora.alpha) == (8, 16)
    assert sft.lora.targets == "all-linear" and dpo.method == "lora"
    qlora = load_recipe(ROOT / "recipes" / "quickstart-qlora.yaml")
    assert [s.kind for s in qlora.steps] == kinds and qlora.steps[1].config.method == "qlora"


def test_overrides_reach_the_right_steps():
    data = apply_overrides(BASE, ["sft.lora.rank=16", "eval[2].limit=5", "model=hf:Qwen/Qwen2.5-0.5B-Instruct",
                                  "sft.epochs=1"])
    recipe = validate_recipe(data)
    assert recipe.header.model == "hf:Qwen/Qwen2.5-0.5B-Instruct"
    sft = next(s for s in recipe.steps if s.kind == "sft").config
    assert sft.lora.rank == 16 and sft.epochs == 1
    evals = [s.config for s in recipe.steps if s.kind == "eval"]
    assert [e.limit for e in evals[:3]] == [None, 5, None]
    assert BASE["steps"][1]["sft"]["lora"]["rank"] == 8  # the input is not mutated


@pytest.mark.parametrize("override,needle", [
    ("nonsense", "KEY=VALUE"), ("merge[9].force=true", "no merge[9] step"),
    ("chat.prompt=hi", "no chat step"), ("bogus.x=1", "not a step kind"),
])
def test_bad_overrides_are_one_line_user_errors(override, needle):
    with pytest.raises(UserError) as err:
        apply_overrides(QUICKSTART, [override])
    assert needle in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("mutate,needle", [
    (lambda r: r.update(name="bad name!"), "name"),
    (lambda r: r.update(device="tpu"), "device"),
    (lambda r: r.update(steps=[]), "steps"),
    (lambda r: r["steps"].append({"train": {}}), "unknown step kind 'train'"),
    (lambda r: r["steps"][1]["sft"]["lora"].update(rank="eight"), "steps[1].sft.lora.rank"),
    (lambda r: r["steps"][1]["sft"].update(method="qlora4"), "steps[1].sft.method"),
    (lambda r: r["steps"][1]["sft"].update(learning_rat=1e-4), "learning_rat: unknown setting"),
    (lambda r: r["steps"][1]["sft"].pop("dataset"), "dataset: required setting is missing"),
    (lambda r: r["steps"].__setitem__(0, {"eval": {}, "sft": {}}), "one key"),
    (lambda r: r["steps"].__setitem__(0, {"eval": [1, 2]}), "expected a mapping of settings"),
])
def test_malformed_recipes_name_the_field(mutate, needle):
    data = copy.deepcopy(BASE)
    mutate(data)
    with pytest.raises(UserError) as err:
        validate_recipe(data, "x.yaml")
    msg = str(err.value)
    assert needle in msg and "\n" not in msg and msg.startswith("x.yaml")


json_leaf = st.one_of(st.none(), st.booleans(), st.integers(-10**6, 10**6), st.floats(allow_nan=True),
                      st.text(max_size=12), st.sampled_from(list(STEP_TYPES) + ["lora", "rank", "model", "toy"]))
json_any = st.recursive(json_leaf, lambda kids: st.one_of(st.lists(kids, max_size=4),
                                                           st.dictionaries(st.text(max_size=8), kids, max_size=4)),
                        max_leaves=20)


@st.composite
def mutated_quickstart(draw):
    """The quickstart with one part replaced by something random: deep, realistic damage."""
    data = copy.deepcopy(BASE)
    target = draw(st.sampled_from(["top", "step", "setting", "nested"]))
    if target == "top":
        data[draw(st.sampled_from(["name", "model", "device", "steps", draw(st.text(max_size=6))]))] = draw(json_any)
    elif target == "step":
        data["steps"][draw(st.integers(0, len(data["steps"]) - 1))] = draw(json_any)
    elif target == "setting":
        i = draw(st.integers(0, len(data["steps"]) - 1))
        kind = next(iter(data["steps"][i]))
        key = draw(st.sampled_from(list(STEP_TYPES[kind].model_fields) + ["zzz"]))
        data["steps"][i][kind][key] = draw(json_any)
    else:
        key = draw(st.sampled_from(["rank", "alpha", "dropout", "targets", "q"]))
        data["steps"][1]["sft"]["lora"][key] = draw(json_any)
    return data


def check_contract(data):
    try:
        validate_recipe(data, "fuzz.yaml") if isinstance(data, dict) else load_recipe(data)
    except UserError as exc:
        msg = str(exc)
        assert msg and "\n" not in msg and len(msg) < 400, msg
        assert exc.exit_code == 2


FUZZ = {"deadline": None, "suppress_health_check": list(HealthCheck)}


@settings(max_examples=150, **FUZZ)
@given(mutated_quickstart())
def test_fuzz_mutated_recipes_fail_in_one_line_or_validate(data):
    check_contract(data)


@settings(max_examples=100, **FUZZ)
@given(st.one_of(json_any, st.dictionaries(st.sampled_from(["name", "model", "device", "steps", "x"]), json_any)))
def test_fuzz_arbitrary_documents(data):
    try:
        load_recipe(data) if isinstance(data, dict) else validate_recipe({"name": "x", "steps": data})
    except UserError as exc:
        assert "\n" not in str(exc) and exc.exit_code == 2


@pytest.mark.slow
@settings(max_examples=3000, **FUZZ)
@given(mutated_quickstart())
def test_fuzz_many_more_mutations(data):
    check_contract(data)


@pytest.mark.parametrize("text", ["steps: [\n  - sft: {", "- just\n- a list\n", "name: x\nsteps:\n  - sft:\n      "
                                                                                "lora: {rank: [}\n",
                                  "\x00\x01binary"])
def test_cli_malformed_recipe_files_exit_2_with_one_line(text, tmp_path, cli):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    out = cli("run", str(path), "--runs-root", str(tmp_path / "runs"))
    assert out.returncode == 2, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and str(path) in lines[0] and "Traceback" not in out.stderr
    assert not (tmp_path / "runs").exists()


def test_cli_missing_recipe_and_bad_flag(cli, tmp_path):
    out = cli("run", str(tmp_path / "nope.yaml"))
    assert out.returncode == 2 and "not found" in out.stderr and len(out.stderr.strip().splitlines()) == 1
    out = cli("sft", "--lora.rank", "many", "--dataset", "x.jsonl", "--output", str(tmp_path / "o"))
    assert out.returncode == 2 and "lora.rank" in out.stderr and len(out.stderr.strip().splitlines()) == 1
    out = cli("sft", "--no-such-flag")
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1

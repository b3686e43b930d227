"""The peers' tables (swiftbox/migrate): every key of the peers' own shipped example configs is mapped, ignored or
refused by name; omitted keys take the peer's defaults; refusals are one line naming the key; docs/migrating.md is
the rendering of the tables; export-config reads back to the same configuration. No training here."""
from __future__ import annotations

import dataclasses
import json
import shlex
from pathlib import Path

import pytest
import yaml

from swiftbox.migrate import detect, docs, import_config, ms_swift, peers
from swiftbox.migrate.engine import translate
from swiftbox.migrate.export import check_round_trip, export_config
from swiftbox.migrate.table import Refused
from swiftbox.recipe import validate_recipe
from tests.conftest import ROOT, run_cli

FIXTURES = ROOT / "tests" / "fixtures" / "peer_configs"
LF = FIXTURES / "llamafactory"
YAMLS = sorted(FIXTURES.glob("*/*.y*ml"))
COMMANDS = sorted(FIXTURES.glob("ms_swift/*.sh"))


def swift_words(path: Path) -> tuple[str, list[str]]:
    """`swift COMMAND ARGS` from a shipped shell example (env prefix and line continuations dropped)."""
    words = shlex.split(path.read_text().replace("\\\n", " "), comments=True)
    at = words.index("swift")
    return words[at + 1], words[at + 2:]


def strip_refusals(peer, config: dict, run) -> tuple[list[str], str]:
    """Translate; on each refusal, find the key it names, drop it, try again. Returns (the keys named in order,
    the last refusal naming no remaining key, or "" once it translates)."""
    named: list[str] = []
    for _ in range(40):
        try:
            run(config)
            return named, ""
        except Refused as exc:
            msg = str(exc)
            hit = next((k for k in config if any(f"{peer.name} {k}{end}" in msg for end in (" ", ":", "[", "."))),
                       None)
            if hit is None:
                return named, msg
            named.append(hit)
            del config[hit]
    raise AssertionError("refusals did not converge")


def test_the_fixtures_are_the_peers_files():
    assert len(YAMLS) == 9 and len(COMMANDS) == 3
    readme = (FIXTURES / "README.md").read_text()
    for path in YAMLS + COMMANDS:
        assert path.name in readme, f"{path.name} has no provenance line"


@pytest.mark.parametrize("path", YAMLS, ids=lambda p: p.name)
def test_every_key_of_the_shipped_yaml_is_in_its_table_and_the_docs(path):
    config = yaml.safe_load(path.read_text())
    peer = detect(config)
    assert peer is not None and peer.slug == path.parent.name.replace("_", "-")
    page = (ROOT / "docs" / "migrating.md").read_text()
    for key in config:
        assert key in peer.keys(), f"{path.name}: {key} is not in the {peer.name} table"
        assert f"`{key}`" in page, f"{key} is not in docs/migrating.md"


@pytest.mark.parametrize("path", COMMANDS, ids=lambda p: p.name)
def test_every_flag_of_the_shipped_commands_is_in_the_table_and_the_docs(path):
    _, argv = swift_words(path)
    page = (ROOT / "docs" / "migrating.md").read_text()
    for key in ms_swift.parse_argv(argv):
        assert key in ms_swift.PEER.keys(), f"{path.name}: --{key} is not in the ms-swift table"
        assert f"`{key}`" in page


@pytest.mark.parametrize("path", sorted(LF.glob("*.yaml")), ids=lambda p: p.name)
def test_llamafactory_examples_translate_into_valid_recipes(path):
    imported = import_config(yaml.safe_load(path.read_text()), path.name, base=LF, fetch=False)
    recipe = validate_recipe(imported.recipe)
    step = recipe.steps[0]
    assert recipe.header.model == "meta-llama/Meta-Llama-3-8B-Instruct"
    stage = yaml.safe_load(path.read_text())["stage"]
    assert step.kind == {"sft": "sft", "pt": "pt", "dpo": "dpo", "kto": "kto", "rm": "rm"}[stage]
    cfg = step.config
    assert cfg.dtype == "bfloat16" and cfg.batch_size == 1 and cfg.lr_scheduler == "cosine" and cfg.force
    if cfg.method == "lora":   # lora_rank 8 and no lora_alpha: LLaMA-Factory's 2 x rank; its dropout 0
        assert (cfg.lora.rank, cfg.lora.alpha, cfg.lora.dropout, cfg.lora.targets) == (8, 16, 0.0, "all-linear")
    assert cfg.gradient_checkpointing   # LLaMA-Factory checkpoints unless disable_gradient_checkpointing
    assert {"logging_steps", "plot_loss", "report_to", "ddp_timeout"} <= set(imported.ignored)
    files = [Path(f).name for f in ([cfg.dataset] if isinstance(cfg.dataset, str) else cfg.dataset)]
    assert files == {"sft": ["identity.json", "alpaca_en_demo.json"], "pt": ["c4_demo.jsonl"],
                     "dpo": ["dpo_en_demo.json"], "kto": ["kto_en_demo.json"], "rm": ["dpo_en_demo.json"]}[stage]
    if stage == "dpo":
        assert (cfg.beta, cfg.loss_type, cfg.learning_rate) == (0.1, "sigmoid", 5e-6)
    if path.name == "llama3_full_sft.yaml":
        assert cfg.method == "full" and cfg.deepspeed == "zero3"


EXPECTED_REFUSALS = {   # the keys of the peers' own examples swiftbox cannot honour, in the order it names them
    "lora-1b.yml": ["val_set_size", "optimizer", "datasets"],
    "instruct-lora-8b.yml": ["load_in_8bit", "val_set_size", "optimizer", "datasets"],
    "instruct-dpo-lora-8b.yml": ["load_in_8bit", "val_set_size", "optimizer", "datasets"],
    "lora_sft.sh": ["system", "dataset"],
    "readme_sft.sh": ["dataset"],
    "rlhf_dpo_lora.sh": ["split_dataset_ratio", "rpo_alpha", "dataset"],
}


@pytest.mark.parametrize("path", sorted(FIXTURES.glob("axolotl/*.yml")), ids=lambda p: p.name)
def test_axolotl_examples_are_refused_key_by_key(path):
    config = yaml.safe_load(path.read_text())
    peer = peers()["axolotl"]
    named, last = strip_refusals(peer, config, lambda c: translate(peer, c, path.name, base=path.parent, fetch=False))
    assert named == EXPECTED_REFUSALS[path.name]
    assert "datasets is missing" in last      # the hub dataset was refused by name, then nothing was left to train


@pytest.mark.parametrize("path", COMMANDS, ids=lambda p: p.name)
def test_ms_swift_commands_are_refused_flag_by_flag(path):
    command, argv = swift_words(path)
    config = ms_swift.parse_argv(argv)
    kind = ms_swift._command_kind(command, config)
    peer = dataclasses.replace(ms_swift.PEER, kind_of=lambda _c: kind)
    named, last = strip_refusals(peer, config, lambda c: translate(peer, c, path.name, fetch=False))
    assert named == EXPECTED_REFUSALS[path.name]
    assert "dataset is missing" in last


def test_docs_page_is_rendered_from_the_tables():
    assert (ROOT / "docs" / "migrating.md").read_text() == docs.render(), \
        "docs/migrating.md is stale: .venv/bin/python -m swiftbox.migrate.docs > docs/migrating.md"


def lf_config(tmp_path: Path, **keys) -> dict:
    (tmp_path / "data").mkdir(exist_ok=True)
    for name in ("dataset_info.json", "alpaca_en_demo.json", "dpo_en_demo.json"):
        (tmp_path / "data" / name).write_text((LF / "data" / name).read_text())
    return {"model_name_or_path": "toy", "stage": "sft", "dataset": "alpaca_en_demo", **keys}


def lf_step(tmp_path: Path, **keys):
    imported = import_config(lf_config(tmp_path, **keys), "x.yaml", base=tmp_path)
    return validate_recipe(imported.recipe).steps[0].config


def test_omitted_keys_take_the_peers_defaults(tmp_path):
    cfg = lf_step(tmp_path, lora_rank=16)
    assert (cfg.lora.alpha, cfg.lora.dropout, cfg.learning_rate, cfg.batch_size, cfg.lr_scheduler,
            cfg.max_length, cfg.epochs) == (32, 0.0, 5e-5, 8, "linear", 2048, 3.0)
    data = tmp_path / "rows.jsonl"
    data.write_text('{"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]}\n')
    imported = ms_swift.translate_argv("sft", ["--model", "toy", "--dataset", str(data), "--max_length", "64",
                                               "--per_device_train_batch_size", "3"])
    cfg = validate_recipe(imported.recipe).steps[0].config
    assert (cfg.lora.alpha, cfg.lora.dropout, cfg.weight_decay, cfg.grad_accum, cfg.learning_rate, cfg.epochs,
            cfg.lr_scheduler, cfg.gradient_checkpointing) == (32, 0.05, 0.1, 6, 1e-4, 3.0, "cosine", True)
    full = ms_swift.translate_argv("sft", ["--model", "toy", "--dataset", str(data), "--tuner_type", "full"])
    cfg = validate_recipe(full.recipe).steps[0].config
    assert cfg.learning_rate == 1e-5 and cfg.method == "full"
    from swiftbox.catalog.toy import toy_path

    own = json.loads((toy_path(0) / "config.json").read_text())["max_position_embeddings"]
    assert cfg.max_length == own      # unset: the model's own max_model_len, as ms-swift


@pytest.mark.parametrize("keys, named", [
    ({"stage": "ppo"}, "stage 'ppo'"),
    ({"finetuning_type": "freeze"}, "finetuning_type 'freeze'"),
    ({"frobnicate": 1}, "key 'frobnicate'"),
    ({"val_size": 0.1}, "val_size 0.1"),
    ({"template": "llama3"}, "template 'llama3' contradicts toy"),
    ({"template": "default"}, "template 'default'"),
    ({"max_samples": 2}, "max_samples 2"),
    ({"packing": True}, "packing true without neat_packing"),
    ({"stage": "dpo"}, "ranking false does not fit stage dpo"),
])
def test_what_swiftbox_cannot_honour_is_refused_by_name(tmp_path, keys, named):
    with pytest.raises(Refused, match=named.replace("(", r"\(")):
        lf_step(tmp_path, **keys)


def test_harmless_values_of_refused_keys_pass(tmp_path):
    cfg = lf_step(tmp_path, template="qwen", max_samples=1000, val_size=0.0, do_train=True, packing=True,
                  neat_packing=True)
    assert cfg.packing is True
    cfg = lf_step(tmp_path, stage="dpo", dataset="dpo_en_demo", pref_loss="simpo", pref_beta=0.2)
    assert type(cfg).__name__ == "SimpoStep" and (cfg.beta, cfg.gamma) == (0.2, 0.5)


def test_a_swiftbox_recipe_is_not_a_peers():
    assert detect({"name": "x", "model": "toy", "steps": [{"sft": {"dataset": "d.jsonl"}}]}) is None
    assert detect({"model": "toy", "tuner_type": "lora", "dataset": ["d"]}).slug == "ms-swift"


def test_a_command_line_speaks_ms_swift_only_with_its_own_flags():
    from swiftbox.cli import _speaks_ms_swift

    assert not _speaks_ms_swift(["sft", "--model", "toy", "--dataset", "d", "--epochs", "1", "--lora.rank", "4"])
    assert not _speaks_ms_swift(["sft", "--model", "toy", "--learning_rate", "1e-4", "--max_length", "64"])
    assert _speaks_ms_swift(["sft", "--model", "toy", "--dataset", "d", "--lora_rank", "4"])
    assert _speaks_ms_swift(["rlhf", "--rlhf_type", "dpo"]) and not _speaks_ms_swift(["rlhf", "--help"])


def test_a_refused_flag_is_one_line_exit_2(tmp_path):
    result = run_cli("sft", "--model", "toy", "--tuner_type", "lora", "--dataset", "AI-ModelScope/alpaca#500",
                     cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "dataset 'AI-ModelScope/alpaca#500': not a local file" in lines[0]
    result = run_cli("rlhf", "--rlhf_type", "ppo", "--model", "toy", cwd=tmp_path)
    assert result.returncode == 2 and "rlhf_type 'ppo'" in result.stderr


def test_run_prints_what_it_ignores(tmp_path, capsys):
    import os

    from swiftbox.recipe import from_peer

    here = os.getcwd()
    os.chdir(tmp_path)
    try:
        recipe = from_peer({**lf_config(tmp_path), "plot_loss": True, "logging_steps": 3}, "x.yaml")
    finally:
        os.chdir(here)
    assert recipe["steps"][0]["sft"]["dataset"] == [str(tmp_path / "data" / "alpaca_en_demo.json")]
    err = capsys.readouterr().err
    assert "read as LLaMA-Factory's config" in err and "plot_loss" in err and "logging_steps" in err


def manifest(kind: str, **settings) -> dict:
    from swiftbox.steps import STEP_TYPES

    cfg = STEP_TYPES[kind].model_validate(settings)
    return {"kind": kind, "input": "toy", "config": cfg.model_dump(mode="json")}


# LLaMA-Factory's dpo reads ranking rows, not prompt/chosen/rejected: test_export_refuses_what_the_peer_cannot_read
@pytest.mark.parametrize("to, kind, data", [("llamafactory", "sft", "rows.jsonl"), ("axolotl", "sft", "rows.jsonl"),
                                            ("ms-swift", "sft", "rows.jsonl"), ("axolotl", "dpo", "pairs.jsonl"),
                                            ("ms-swift", "dpo", "pairs.jsonl")])
def test_export_reads_back_to_the_same_config(tmp_path, to, kind, data):
    (tmp_path / "rows.jsonl").write_text(json.dumps({"messages": [{"role": "user", "content": "a"},
                                                                  {"role": "assistant", "content": "b"}]}) + "\n")
    (tmp_path / "pairs.jsonl").write_text(json.dumps({"prompt": "a", "chosen": "b", "rejected": "c"}) + "\n")
    settings = dict(dataset=str(tmp_path / data), lora={"rank": 4, "alpha": 8, "dropout": 0.1}, epochs=2,
                    learning_rate=3e-4, batch_size=2, grad_accum=3, max_length=128, warmup_ratio=0.05,
                    dtype="bfloat16", lr_scheduler="linear", seed=7, **({"packing": False} if kind == "sft" else {}))
    man = manifest(kind, **settings)
    exported, files = export_config(man, to, tmp_path / "info")
    for name, content in files.items():
        (tmp_path / "info").mkdir(exist_ok=True)
        (tmp_path / "info" / name).write_text(json.dumps(content))
    check_round_trip(man, to, exported, tmp_path)      # raises on any difference
    changed = dict(man, config=dict(man["config"], lora=dict(man["config"]["lora"], init="pissa")))
    with pytest.raises(Refused, match="swiftbox setting lora"):
        check_round_trip(changed, to, exported, tmp_path)


def test_export_refuses_what_the_peer_cannot_read(tmp_path):
    (tmp_path / "pairs.jsonl").write_text(json.dumps({"prompt": "a", "chosen": "b", "rejected": "c"}) + "\n")
    with pytest.raises(Refused, match="rows with chosen, prompt, rejected have no LLaMA-Factory"):
        export_config(manifest("dpo", dataset=str(tmp_path / "pairs.jsonl")), "llamafactory", tmp_path)
    with pytest.raises(Refused, match="has no ms-swift"):
        man = manifest("sft", dataset=str(tmp_path / "pairs.jsonl"), max_row_chars=10, group_by_length=True)
        check_round_trip(man, "ms-swift", export_config(man, "ms-swift")[0], tmp_path)


def test_export_infer_and_deploy_command_lines_become_their_steps(tmp_path):
    def step(command: str, *argv: str):
        recipe = validate_recipe(ms_swift.translate_argv(command, list(argv), fetch=False).recipe)
        return recipe.header.model, recipe.steps[0].kind, recipe.steps[0].config

    model, kind, cfg = step("export", "--adapters", "runs/x/sft", "--merge_lora", "true")
    assert (model, kind, cfg.adapters, cfg.max_shard_size) == ("runs/x/sft", "merge", ["runs/x/sft"], "5GB")
    model, kind, cfg = step("export", "--model", "toy", "--quant_method", "gptq", "--quant_bits", "4",
                            "--output_dir", "q")
    assert (kind, cfg.method, cfg.bits, cfg.output) == ("quantize", "gptq", 4, "q")
    cfg = step("export", "--model", "toy", "--quant_method", "bnb", "--quant_bits", "8")[2]
    assert (cfg.method, cfg.bits) == ("bnb", 8)
    model, kind, cfg = step("infer", "--adapters", "runs/x/sft", "--max_new_tokens", "32", "--temperature", "0")
    assert (model, kind, cfg.adapters, cfg.max_tokens, cfg.temperature) == ("runs/x/sft", "chat", None, 32, 0.0)
    model, kind, cfg = step("deploy", "--model", "toy", "--adapters", "a", "b", "--infer_backend", "pt")
    assert (kind, cfg.engine, cfg.host, cfg.port, cfg.adapters) == ("serve", "builtin", "0.0.0.0", 8000,
                                                                      {"adapter0": "a", "adapter1": "b"})
    with pytest.raises(Refused, match="merge_lora and quant_method"):
        step("export", "--model", "toy", "--merge_lora", "true", "--quant_method", "gptq")
    with pytest.raises(Refused, match="infer_backend 'sglang'"):
        step("deploy", "--model", "toy", "--infer_backend", "sglang")


@pytest.mark.parametrize("slug", ["llamafactory", "axolotl", "ms-swift"])
def test_a_value_of_the_wrong_shape_is_one_line_for_every_key(tmp_path, slug):
    from swiftbox.errors import UserError

    rows = tmp_path / "d.jsonl"
    rows.write_text(json.dumps({"messages": [{"role": "user", "content": "a"}, {"role": "assistant",
                                                                               "content": "b"}]}) + "\n")
    base = {"llamafactory": lf_config(tmp_path),
            "axolotl": {"base_model": "toy", "datasets": [{"path": str(rows), "type": "chat_template"}],
                        "learning_rate": 1e-4},
            "ms-swift": {"model": "toy", "tuner_type": "lora", "dataset": [str(rows)], "max_length": 64}}[slug]
    peer = peers()[slug]
    translate(peer, dict(base), "x.yaml", base=tmp_path)      # the base config itself is fine
    for key in peer.keys():
        for bad in ("zzz", {"a": [1]}, -1, None):
            try:
                translate(peer, {**base, key: bad}, "x.yaml", base=tmp_path)
            except UserError as exc:
                assert "\n" not in str(exc)


def test_an_ms_swift_argument_file_runs_as_a_recipe(tmp_path):
    from swiftbox.recipe import load_recipe

    rows = tmp_path / "d.jsonl"
    rows.write_text(json.dumps({"query": "a", "response": "b", "rejected_response": "c"}) + "\n")
    args = tmp_path / "args.json"
    args.write_text(json.dumps({"model": "toy", "rlhf_type": "kto", "tuner_type": "lora", "dataset": [str(rows)],
                                "max_length": 64, "lora_rank": 4}))
    recipe = load_recipe(args)
    step = recipe.steps[0]
    assert (recipe.name, step.kind, step.config.beta, step.config.lora.alpha, step.config.grad_accum) == \
        ("args", "kto", 0.1, 32, 16)

"""The menu's "Import a config from LLaMA-Factory / ms-swift / Axolotl": a peer's file or an ms-swift command line
becomes the importer's recipe, reviewed and run like every flow (the runner is the menu tests' FakeRunner); what the
importer refuses is its one line, shown at the prompt."""
from __future__ import annotations

import json
import shutil

from menus import main, peer_import
from swiftbox.errors import UserError
from tests.conftest import ROOT
from tests.fakes.menu_keys import CTRL_C, DOWN, ENTER, UP, keys, make_session

LF = ROOT / "tests" / "fixtures" / "peer_configs" / "llamafactory"
TO_IMPORT = DOWN * [value for value, _ in main.ITEMS].index("import") + ENTER


def test_import_a_llamafactory_file_then_run_it(tmp_path, monkeypatch):
    shutil.copytree(LF / "data", tmp_path / "data")
    text = (LF / "llama3_lora_sft.yaml").read_text().replace("meta-llama/Meta-Llama-3-8B-Instruct", "toy")
    (tmp_path / "sft.yaml").write_text(text.replace("template: llama3", "template: qwen"))
    monkeypatch.chdir(tmp_path)
    session = make_session(tmp_path)
    with keys(monkeypatch, [TO_IMPORT, ENTER, "sft.yaml" + ENTER, ENTER, UP + ENTER, CTRL_C]) as prompts:
        # main: Import; a file; its path; Run; next step: Back to the main menu; quit
        main.run_menu(session)
    assert "Import what?" in prompts and "Config file:" in prompts
    (recipe,) = session.run.recipes
    step = recipe["steps"][0]["sft"]
    assert recipe["model"] == "toy" and recipe["name"] == "sft"
    assert (step["lora"]["alpha"], step["grad_accum"], step["output"]) == (16, 8, "saves/llama3-8b/lora/sft")
    assert any("read as LLaMA-Factory's config" in line for line in session.echoed)


def test_import_an_ms_swift_command_line(tmp_path, monkeypatch):
    rows = tmp_path / "d.jsonl"
    rows.write_text(json.dumps({"messages": [{"role": "user", "content": "a"}, {"role": "assistant",
                                                                               "content": "b"}]}) + "\n")
    line = f"CUDA_VISIBLE_DEVICES=0 swift sft --model toy --tuner_type lora --dataset {rows} --max_length 64"
    session = make_session(tmp_path)
    with keys(monkeypatch, [TO_IMPORT, DOWN + ENTER, line + ENTER, ENTER, UP + ENTER, CTRL_C]):
        main.run_menu(session)
    (recipe,) = session.run.recipes
    assert recipe["steps"][0]["sft"]["lora"]["alpha"] == 32 and recipe["steps"][0]["sft"]["weight_decay"] == 0.1


def test_the_prompt_shows_the_importers_refusal(tmp_path):
    check = peer_import._checked(peer_import.imported_from_command)
    assert "rlhf_type 'ppo'" in check("swift rlhf --rlhf_type ppo --model toy")
    assert "COMMAND one of" in check("python train.py")
    recipe = tmp_path / "r.yaml"
    recipe.write_text("name: r\nmodel: toy\nsteps: [download]\n")
    assert "Run a recipe" in peer_import._checked(peer_import.imported_from_file)(str(recipe))
    try:
        peer_import.imported_from_file(str(tmp_path / "missing.yaml"))
    except UserError as exc:
        assert "not found" in str(exc)
    else:
        raise AssertionError("a missing file was accepted")

"""gkd (knowledge distillation, TRL's GKDTrainer): a student distilled from an SFT-trained teacher comes closer to it
(KL on the replies falls), the toy distils from itself with sequence-level KD, and teachers GKD cannot use are one
line: another tokenizer or another logit width (exit 2), a served URL (exit 3)."""
from __future__ import annotations

import json
import math
import shutil

import pytest

from swiftbox import cli
from swiftbox.artifacts import read_manifest
from swiftbox.runner import run_recipe
from tests.conftest import ROOT

SFT_DATA = str(ROOT / "recipes" / "data" / "parity_sft.jsonl")

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def run(tmp_path, name, model, *steps):
    return run_recipe({"name": name, "model": model, "steps": list(steps)}, runs_root=tmp_path, log=lambda m: None)


def test_student_comes_closer_to_its_teacher(tmp_path):
    teacher = {"dataset": SFT_DATA + "#32", "max_steps": 3, "batch_size": 8, "learning_rate": 5e-3,
               "save_steps": 100}
    run(tmp_path, "t", "toy", {"sft": teacher})
    gkd = {"dataset": SFT_DATA + "#16", "teacher": str(tmp_path / "t" / "sft"), "max_steps": 3, "batch_size": 4,
           "learning_rate": 5e-3, "max_new_tokens": 3, "logging_steps": 1, "save_steps": 100, "probe_rows": 4}
    summary = run(tmp_path, "g", "toy", {"gkd": gkd})
    m = summary["steps"][0]["metrics"]
    print(f"\ngkd: KL(teacher || student) {m['teacher_kl_before']} -> {m['teacher_kl_after']}, loss {m['train_loss']}")
    assert m["teacher_kl_before"] > 0.05 and m["teacher_kl_after"] < m["teacher_kl_before"] / 3
    assert math.isfinite(m["train_loss"]) and m["steps"] == 3
    out = tmp_path / "g" / "gkd"
    manifest = read_manifest(out)
    assert manifest["teacher"] == gkd["teacher"] and manifest["distillation"]["lmbda"] == 0.5
    assert (out / "adapter_model.safetensors").is_file() and not (tmp_path / "g" / "gkd.partial").exists()


def test_toy_distils_from_itself_with_sequence_level_kd(tmp_path):
    gkd = {"dataset": SFT_DATA + "#8", "teacher": "toy", "lmbda": 0.0, "seq_kd": True, "max_steps": 2,
           "batch_size": 4, "max_new_tokens": 3, "logging_steps": 1, "save_steps": 100, "probe_rows": 0}
    m = run(tmp_path, "s", "toy", {"gkd": gkd})["steps"][0]["metrics"]
    assert math.isfinite(m["train_loss"]) and m["steps"] == 2 and "teacher_kl_before" not in m
    assert read_manifest(tmp_path / "s" / "gkd")["distillation"]["seq_kd"] is True


@pytest.fixture(scope="module")
def other_teachers(tmp_path_factory, toy_dir):
    """A toy whose tokenizer has one more token, and a toy whose logit layer is wider (same tokenizer)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    root = tmp_path_factory.mktemp("teachers")
    vocab = root / "other-vocab"
    shutil.copytree(toy_dir, vocab)
    tok = AutoTokenizer.from_pretrained(str(toy_dir))
    tok.add_tokens(["<an-extra-token>"])
    tok.save_pretrained(str(vocab))
    wide = root / "wide"
    model = AutoModelForCausalLM.from_pretrained(str(toy_dir))
    model.resize_token_embeddings(model.config.vocab_size + 64)
    model.save_pretrained(str(wide))
    AutoTokenizer.from_pretrained(str(toy_dir)).save_pretrained(str(wide))
    return {"vocab": vocab, "wide": wide}


@pytest.mark.parametrize("which,word", [("vocab", "its tokenizer is not the student's"),
                                        ("wide", "logits per token")])
def test_teacher_that_gkd_cannot_compare_is_one_line_exit_2(which, word, other_teachers, capsys, tmp_path,
                                                             monkeypatch):
    monkeypatch.chdir(tmp_path)
    rc = cli.main(["gkd", "toy", "--teacher", str(other_teachers[which]), "--dataset", SFT_DATA + "#8",
                   "--max-steps", "1"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1 and word in err and "Traceback" not in err, err
    assert not list(tmp_path.rglob("*.partial")) and not list(tmp_path.rglob("swiftbox.json"))


@pytest.mark.parametrize("argv,rc,word", [
    (["--teacher", "http://127.0.0.1:8000/v1"], 3, "model reference"),
    (["--teacher", "toy", "--lmbda", "1.5"], 2, "lmbda"),
    (["--teacher", "toy", "--beta", "-0.1"], 2, "beta"),
    (["--teacher", "toy", "--streaming", "--max-steps", "2"], 2, "streaming"),
])
def test_bad_gkd_settings(argv, rc, word, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    got = cli.main(["gkd", "toy", "--dataset", SFT_DATA, *argv])
    err = capsys.readouterr().err.strip()
    assert got == rc and len(err.splitlines()) == 1 and word in err, err


def test_the_step_is_listed_with_its_settings():
    from swiftbox.steps import STEP_TYPES

    fields = STEP_TYPES["gkd"].model_fields
    assert {"teacher", "lmbda", "beta", "temperature", "seq_kd", "max_new_tokens", "lora"} <= set(fields)
    assert json.dumps(STEP_TYPES["gkd"](dataset="x", teacher="toy").model_dump())   # a manifest can hold it

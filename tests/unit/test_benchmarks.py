"""Standard benchmarks (eval --benchmark): the catalog, offline data lookup and its refusals, the one schema shared
by flags/recipes/API, and - with a stub model that knows every reference answer - proof that each shipped task is
wired to the harness's scorer: answering the reference scores 1.0, answering wrong scores the floor (0.0)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from swiftbox.benchmarks import catalog, data
from swiftbox.errors import UserError
from tests.fixtures.ifeval_answers import ANSWERS

ALL = ["gsm8k", "mmlu", "arc", "hellaswag", "ifeval"]


def test_catalog_names_aliases_and_unknown():
    assert [b.name for b in catalog.resolve(["ARC", "gsm8k", "arc_challenge"])] == ["arc_challenge", "gsm8k"]
    with pytest.raises(UserError, match="unknown benchmark 'mmlu-pro'.*available: mmlu, gsm8k"):
        catalog.resolve(["mmlu-pro"])


def test_schema_takes_a_comma_list_and_refuses_unknown_names():
    from pydantic import ValidationError

    from swiftbox.steps import EvalStep

    assert EvalStep(benchmark="gsm8k, arc").benchmark == ["gsm8k", "arc_challenge"]
    assert EvalStep(benchmark=["mmlu", "ifeval"]).benchmark == ["mmlu", "ifeval"]
    with pytest.raises(ValidationError, match="unknown benchmark 'nope'"):
        EvalStep(benchmark="gsm8k,nope")


def test_cli_takes_several_models_as_one_comparison():
    from swiftbox.cli import _settings_from_args, build_parser
    from swiftbox.steps import EvalStep

    args = build_parser().parse_args(["eval", "base", "runs/x/sft", "runs/x/quantize", "--benchmark", "gsm8k,mmlu",
                                      "--limit", "20"])
    settings = _settings_from_args(args, EvalStep)
    assert settings["model"] == "base" and settings["compare"] == ["runs/x/sft", "runs/x/quantize"]
    assert EvalStep(**settings).benchmark == ["gsm8k", "mmlu"]


@pytest.mark.parametrize("name", ALL)
def test_every_shipped_slice_is_found_with_tens_of_rows(name):
    (bench,) = catalog.resolve([name])
    tasks = data.locate(bench, None)
    assert sum(t.rows for t in tasks) >= 10
    for t in tasks:
        assert all(Path(f).is_file() for files in t.files.values() for f in files)
    if name == "mmlu":
        assert {t.task for t in tasks} == {"mmlu_clinical_knowledge", "mmlu_global_facts", "mmlu_machine_learning"}
        assert all(t.fewshot_split == "dev" for t in tasks)


def test_hugging_face_layout_is_read_from_a_data_dir(tmp_path):
    folder = tmp_path / "openai" / "gsm8k" / "main"
    folder.mkdir(parents=True)
    (folder / "test-00000-of-00001.parquet").write_bytes(b"")
    (folder / "train-00000-of-00001.parquet").write_bytes(b"")
    (t,) = data.locate(catalog.BENCHMARKS["gsm8k"], tmp_path)
    assert t.builder == "parquet" and t.fewshot_split == "train"
    assert t.files["test"] == [str(folder / "test-00000-of-00001.parquet")]
    ifeval = tmp_path / "google" / "IFEval"
    ifeval.mkdir(parents=True)
    (ifeval / "ifeval_input_data.jsonl").write_text('{"key": 1}\n')
    (t,) = data.locate(catalog.BENCHMARKS["ifeval"], tmp_path)
    assert t.files["train"] == [str(ifeval / "ifeval_input_data.jsonl")] and t.fewshot_split == "train"


def test_missing_data_names_the_files_and_where_they_come_from(tmp_path):
    with pytest.raises(UserError) as err:
        data.locate(catalog.BENCHMARKS["hellaswag"], tmp_path)
    msg = str(err.value)
    assert str(tmp_path / "Rowan" / "hellaswag") in msg and "validation.jsonl" in msg
    assert "hf download Rowan/hellaswag --repo-type dataset" in msg and "github.com/rowanz/hellaswag" in msg


def test_missing_data_is_one_line_exit_2_before_any_output(tmp_path, capsys, monkeypatch):
    from swiftbox.cli import main

    monkeypatch.chdir(tmp_path)
    rc = main(["eval", "toy", "--benchmark", "gsm8k,mmlu", "--data-dir", str(tmp_path)])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "benchmark gsm8k: no test split offline" in err[0]
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").rglob("swiftbox.json"))


def test_without_the_extra_the_step_is_refused_with_the_install_line(monkeypatch):
    from swiftbox.benchmarks import harness
    from swiftbox.errors import Unsupported
    from swiftbox.pipelines.eval_benchmarks import check_benchmarks
    from swiftbox.steps import EvalStep

    monkeypatch.setattr(harness, "missing_extra", lambda: "needs the [eval] extra: pip install 'swiftbox[eval]'")
    with pytest.raises(Unsupported, match=r"swiftbox\[eval\]"):
        check_benchmarks(EvalStep(benchmark="gsm8k"))


def test_a_chat_endpoint_is_refused_for_loglikelihood_tasks():
    pytest.importorskip("lm_eval")
    from swiftbox.pipelines.eval_benchmarks import check_benchmarks
    from swiftbox.steps import EvalStep

    with pytest.raises(UserError, match="mmlu, arc_challenge score answers by log-likelihood"):
        check_benchmarks(EvalStep(benchmark="gsm8k,mmlu,arc", url="http://127.0.0.1:9"))
    check_benchmarks(EvalStep(benchmark="gsm8k,ifeval", url="http://127.0.0.1:9"))     # generation only: fine


# -- known answers: the wiring from our files to the harness's scorer -------------------------------------------

def gold_index(doc: dict) -> int:
    if "answerKey" in doc:                                     # ARC
        return doc["choices"]["label"].index(doc["answerKey"])
    if "endings" in doc:                                       # HellaSwag
        return int(doc["label"])
    return int(doc["answer"])                                  # MMLU


def stub_lm(right: bool):
    """An lm-eval LM that always gives the reference answer (right) or a wrong one; it reads the reference from
    the row the harness hands it, never from our files."""
    from lm_eval.api.model import LM

    class KnowsTheAnswers(LM):
        def loglikelihood(self, requests, disable_tqdm: bool = False):
            out = []
            for req in requests:
                doc = req.doc
                n = len(doc.get("choices", {}).get("text", [])) if "answerKey" in doc else \
                    len(doc.get("endings") or doc.get("choices") or [])
                pick = gold_index(doc) if right else (gold_index(doc) + 1) % n
                out.append((0.0 if req.idx == pick else -10.0, req.idx == pick))
            return out

        def loglikelihood_rolling(self, requests, disable_tqdm: bool = False):
            return [0.0 for _ in requests]

        def generate_until(self, requests, disable_tqdm: bool = False):
            out = []
            for req in requests:
                doc = req.doc
                if "instruction_id_list" in doc:                 # IFEval: a response that follows every instruction
                    out.append(ANSWERS[doc["key"]] if right else "")
                else:                                            # GSM8K: the reference solution ends "#### N"
                    out.append(doc["answer"] if right else "#### -987654321")
            return out

    return KnowsTheAnswers()


@pytest.fixture(scope="module")
def stub_scores():
    pytest.importorskip("lm_eval")
    from swiftbox.benchmarks import harness

    datas = [t for b in catalog.resolve(ALL) for t in data.locate(b, None)]
    return {right: harness.evaluate(stub_lm(right), datas, limit=None, shots=0, chat_template=False)
            for right in (True, False)}


@pytest.mark.parametrize("name", ["gsm8k", "mmlu", "arc_challenge", "hellaswag", "ifeval"])
def test_answering_the_reference_scores_1_and_a_wrong_answer_the_floor(stub_scores, name):
    headline = catalog.BENCHMARKS[name].headline
    right, wrong = stub_scores[True], stub_scores[False]
    assert right["results"][name][headline] == pytest.approx(1.0)
    assert wrong["results"][name][headline] == pytest.approx(0.0)
    assert right["rows"][name] == sum(t.rows for t in data.locate(catalog.BENCHMARKS[name], None))  # every row scored


def test_the_harness_output_goes_to_the_run_log_not_the_screen(tmp_path, monkeypatch, capfd):
    """lm-eval's and datasets' progress bars and prints (issue 26: quiet on a terminal and in a pipe) land in the
    run's log while the harness runs; the terminal is restored after."""
    pytest.importorskip("lm_eval")
    import os

    from swiftbox import logs
    from swiftbox.benchmarks import harness

    run_log = logs.RunLog()
    run_log.attach(tmp_path / "swiftbox.log")
    monkeypatch.setattr(logs, "_run_log", run_log)
    monkeypatch.delenv(logs.ENV, raising=False)
    lm = stub_lm(True)
    answer = lm.generate_until

    def noisy(requests, disable_tqdm=False):
        os.write(2, b"NOISY-HARNESS-LINE\n")
        return answer(requests, disable_tqdm)

    monkeypatch.setattr(lm, "generate_until", noisy)
    datas = data.locate(catalog.BENCHMARKS["gsm8k"], None)
    out = harness.evaluate(lm, datas, limit=2, shots=0, chat_template=False)
    os.write(2, b"after the harness\n")
    err = capfd.readouterr().err
    assert out["rows"]["gsm8k"] == 2
    assert "NOISY-HARNESS-LINE" not in err and "Running generate_until" not in err
    assert "after the harness" in err                                  # the terminal is back
    logged = (tmp_path / "swiftbox.log").read_text()
    assert "NOISY-HARNESS-LINE" in logged and "--- lm-eval gsm8k: its output ---" in logged


def test_ifeval_slice_needs_no_nltk_sentence_data():
    rows = [json.loads(line) for line in open(data.SHIPPED / "google" / "IFEval" / "train.jsonl")]
    from swiftbox.benchmarks.harness import NEEDS_PUNKT

    assert len(rows) == len(ANSWERS) and {r["key"] for r in rows} == set(ANSWERS)
    assert not {i for r in rows for i in r["instruction_id_list"]} & set(NEEDS_PUNKT)


# -- the step: several models, one table, the harness's numbers in the manifest -----------------------------------

@pytest.mark.slow     # loads toy twice and imports the harness: ~60 s on a loaded 2-core box
def test_eval_step_compares_models_in_one_table(tmp_path, monkeypatch, capsys):
    pytest.importorskip("lm_eval")
    from swiftbox.benchmarks import harness
    from swiftbox.runner import run_step

    answers = iter([True, False])
    monkeypatch.setattr(harness, "local_lm", lambda model, tok, batch, max_length=None: stub_lm(next(answers)))
    entry = run_step("eval", {"model": "toy", "compare": ["toy"], "benchmark": "gsm8k,arc", "limit": 5},
                     runs_root=tmp_path, device="cpu")
    out = capsys.readouterr().out
    assert "gsm8k" in out and "arc_challenge" in out and "-1.0000" in out      # the Δ column: wrong minus right
    assert entry["metrics"] == {"gsm8k": 1.0, "arc_challenge": 1.0, "gsm8k@toy'": 0.0, "arc_challenge@toy'": 0.0}
    manifest = json.loads((Path(entry["output"]) / "swiftbox.json").read_text())
    assert manifest["results"]["toy"]["gsm8k"]["exact_match,strict-match"] == 1.0     # the harness's own keys
    assert manifest["rows"]["toy"] == {"gsm8k": 5, "arc_challenge": 5} and manifest["shipped_slices"] is True
    assert (Path(entry["output"]) / "samples" / "toy" / "gsm8k.jsonl").is_file()


# -- end to end with real models (slow): every shipped task runs offline through the harness's HF model -------------

@pytest.mark.slow
@pytest.mark.parametrize("which", ["toy", "real"])
def test_every_shipped_task_runs_offline_end_to_end(which, request, tmp_path, monkeypatch):
    pytest.importorskip("lm_eval")
    from swiftbox.runner import run_step

    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "hf-datasets"))      # nothing cached from earlier runs
    model = "toy" if which == "toy" else str(request.getfixturevalue("real_model_dir"))
    entry = run_step("eval", {"model": model, "benchmark": ",".join(ALL), "limit": 2, "max_gen_tokens": 8,
                              "batch_size": 4}, runs_root=tmp_path, device="cpu")
    manifest = json.loads((Path(entry["output"]) / "swiftbox.json").read_text())
    (label,) = manifest["results"]
    assert manifest["rows"][label] == {"gsm8k": 2, "mmlu": 6, "arc_challenge": 2, "hellaswag": 2, "ifeval": 2}
    for name in ("gsm8k", "mmlu", "arc_challenge", "hellaswag", "ifeval"):
        value = entry["metrics"][name]
        assert value is not None and 0.0 <= value <= 1.0


@pytest.mark.parametrize("missing", [None, "needs the [eval] extra: pip install 'swiftbox[eval]'"])
def test_menu_offers_standard_benchmarks_greyed_without_the_extra(monkeypatch, missing):
    from menus import flows, widgets
    from swiftbox.benchmarks import harness

    seen = {}

    def select(message, choices, default=None, **kw):
        seen.update({c.value: c.disabled for c in choices})
        return "own"

    monkeypatch.setattr(harness, "missing_extra", lambda: missing)
    monkeypatch.setattr(widgets, "select", select)
    assert flows._eval_what({}) == "own"
    assert seen["own"] is None and seen["bench"] == missing
    assert flows._eval_step({"what": "bench", "benchmark": "gsm8k, arc", "limit": 20}) == \
        {"benchmark": ["gsm8k", "arc"], "limit": 20}

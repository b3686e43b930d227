"""The menu driven in-process through prompt_toolkit pipe input: recipes built, choices refused, keys obeyed.

Nothing trains: the runner is a FakeRunner that records the recipe. Pipelines are reported as built
(`built` fixture) so every flow can reach its review screen whichever pipelines this checkout has.
"""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
import yaml

from menus import datasets, main, review, widgets
from menus.device_info import DeviceFacts, DeviceProbe
from menus.flows import FLOWS, run_flow
from menus.widgets import BACK
from swiftbox.catalog.presets import PRESETS as ALL_PRESETS
from tests.conftest import ROOT
from tests.fakes.menu_keys import BACKSPACE, CTRL_C, DOWN, ENTER, ESC, FACTS, UP, keys, make_session

SFT_DATA = "recipes/data/parity_sft.jsonl"


@pytest.fixture(autouse=True)
def _at_root(monkeypatch):
    monkeypatch.chdir(ROOT)  # bundled datasets are listed relative to the working directory


@pytest.fixture(autouse=True)
def _no_presets(monkeypatch):
    """Model lists are toy + Other (the keystrokes below count on it) unless a test puts presets back."""
    from swiftbox.catalog import presets as registry

    monkeypatch.setattr(registry, "PRESETS", ())


@pytest.fixture
def built():
    """Every pipeline is built; kept so the flow tests read as before."""


def only_step(recipe: dict):
    assert len(recipe["steps"]) == 1
    return next(iter(recipe["steps"][0].items()))


# -- every flow builds the recipe it should -------------------------------------------------------

FLOW_CASES = {
    # kind: (key chunks, expected step settings, expected model)
    "sft": ([ENTER, ENTER, ENTER, BACKSPACE + "16" + ENTER, BACKSPACE + "1" + ENTER, ENTER, ENTER],
            {"dataset": SFT_DATA, "method": "lora", "lora": {"rank": 16, "alpha": 32}, "epochs": 1.0}, "toy"),
    "dpo": ([ENTER, ENTER, DOWN + DOWN + ENTER, ENTER, ENTER, ENTER, ENTER],
            {"dataset": "recipes/data/parity_dpo.jsonl", "method": "full", "beta": 0.1, "epochs": 1.0}, "toy"),
    "eval": ([ENTER, ENTER, ENTER, DOWN + ENTER, ENTER, ENTER],
             {"dataset": "recipes/data/parity_eval.jsonl", "match": "contains"}, "toy"),
    "chat": ([ENTER, DOWN + ENTER, ENTER, ENTER, ENTER], {"prompt": "Is 12345 odd?"}, "toy"),
    "quantize": ([ENTER, ESC, ENTER, ENTER, DOWN + ENTER, ENTER, ENTER, ENTER],
                 {"method": "gptq", "bits": 8}, "toy"),
    "serve": ([ENTER, DOWN + ENTER, ENTER, BACKSPACE * 4 + "9001" + ENTER, "sk-test" + ENTER, DOWN + DOWN + ENTER,
               DOWN + ENTER, ENTER, ENTER],
              {"engine": "builtin", "host": "127.0.0.1", "port": 9001, "api_key": "sk-test", "runtime_adapters": False,
               "smoke": True}, "toy"),
    "download": ([ENTER, ENTER, ENTER], {}, "toy"),
}


@pytest.mark.parametrize("kind", sorted(FLOW_CASES))
def test_each_flow_builds_its_recipe(kind, tmp_path, monkeypatch, built):
    chunks, settings, model = FLOW_CASES[kind]
    facts = FACTS
    if kind == "quantize":  # a machine where GPTQ works (Esc at the method goes back to the model once)
        facts = DeviceFacts(**{**FACTS.__dict__, "refusals": {}})
    session = make_session(tmp_path, facts)
    with keys(monkeypatch, chunks):
        outcome = run_flow(session, FLOWS[kind])
    assert outcome is not BACK
    assert session.run.recipes == [outcome.recipe]
    step, got = only_step(outcome.recipe)
    assert (step, got) == (kind, settings)
    assert outcome.recipe["model"] == model
    assert outcome.recipe["name"].startswith(f"{kind}-toy-")
    assert outcome.summary["steps"][0]["ok"]


def test_merge_flow_asks_base_only_when_the_manifest_lacks_it(tmp_path, monkeypatch, built):
    adapter = tmp_path / "runs" / "old" / "sft"
    adapter.mkdir(parents=True)
    (adapter / "swiftbox.json").write_text(json.dumps({"kind": "sft", "artifact": "adapter"}))  # no base_model
    session = make_session(tmp_path)
    with keys(monkeypatch, [ENTER, "toy" + ENTER, ENTER, ENTER]) as prompts:
        outcome = run_flow(session, FLOWS["merge"])
    assert "Base model" in prompts[1]
    assert outcome.recipe["model"] == adapter.as_posix()
    assert only_step(outcome.recipe) == ("merge", {"base": "toy"})


def test_a_model_typed_by_hand_is_checked(tmp_path, monkeypatch, built):
    session = make_session(tmp_path)
    typed = "not a model" + ENTER + BACKSPACE * 11 + "Qwen/Qwen2.5-0.5B-Instruct" + ENTER  # rejected, then fixed
    with keys(monkeypatch, [DOWN + ENTER, typed, ENTER, ENTER]):  # Other, the id, output, Run
        outcome = run_flow(session, FLOWS["download"])
    assert outcome.recipe["model"] == "Qwen/Qwen2.5-0.5B-Instruct"
    from menus.questions import check_model_ref

    assert check_model_ref("hf:Qwen/Qwen2.5-0.5B") is True and check_model_ref("toy") is True
    assert "no such directory" in check_model_ref("./nowhere")


def test_ctrl_c_while_serving_stops_the_server_and_returns_to_main(tmp_path, monkeypatch, built):
    def serving(recipe, runs_root):
        raise KeyboardInterrupt

    session = make_session(tmp_path, runner=serving)
    with keys(monkeypatch, [ENTER, ENTER, ENTER, ENTER, ENTER, ENTER, ENTER, ENTER, ENTER]):
        with pytest.raises(widgets.ToMain):
            run_flow(session, FLOWS["serve"])
    assert "  server stopped" in session.echoed


def test_quantize_refused_here_offers_only_back(tmp_path, monkeypatch, built):
    refused = {m: f"{m} is not available here; use a GPU machine" for m in ("gptq", "awq", "bnb", "fp8", "gguf")}
    session = make_session(tmp_path, DeviceFacts(**{**FACTS.__dict__, "refusals": refused}))
    with keys(monkeypatch, [ENTER, ENTER, ESC]):  # model, method: Enter can only take "Back", model: Esc
        assert run_flow(session, FLOWS["quantize"]) is BACK
    assert session.run.recipes == []


def test_quantize_skips_refused_methods_and_offers_each_method_its_bits(tmp_path, monkeypatch, built):
    session = make_session(tmp_path)  # FACTS refuses gptq: Enter on the method lands on AWQ, which is 4-bit only
    with keys(monkeypatch, [ENTER, ENTER, ENTER, ENTER, ENTER, ENTER]):
        outcome = run_flow(session, FLOWS["quantize"])
    kind, step = only_step(outcome.recipe)
    assert kind == "quantize" and step["method"] == "awq" and step["bits"] == 4


# -- device-aware choices -------------------------------------------------------------------------

def test_qlora_is_shown_disabled_and_arrows_skip_it(tmp_path, monkeypatch, built):
    session = make_session(tmp_path)
    chunks = [ENTER, ENTER, DOWN + ENTER, ENTER, ENTER, ENTER, ENTER]  # Down from lora skips qlora
    with keys(monkeypatch, chunks):
        outcome = run_flow(session, FLOWS["sft"])
    assert only_step(outcome.recipe)[1]["method"] == "dora"


def test_qlora_offered_where_the_platform_can(tmp_path, monkeypatch, built):
    session = make_session(tmp_path, DeviceFacts(**{**FACTS.__dict__, "refusals": {}}))
    with keys(monkeypatch, [ENTER, ENTER, DOWN + ENTER, ENTER, ENTER, ENTER, ENTER]):
        outcome = run_flow(session, FLOWS["sft"])
    assert only_step(outcome.recipe)[1]["method"] == "qlora"


def test_vllm_disabled_without_vllm(tmp_path, monkeypatch, built):
    session = make_session(tmp_path)
    # engine list: auto, builtin, vllm (disabled): two Downs stop at builtin, wrapping goes back to auto
    chunks = [ENTER, DOWN + DOWN + DOWN + ENTER, ENTER, ENTER, ENTER, ENTER, ENTER, ENTER, ENTER]
    with keys(monkeypatch, chunks):
        outcome = run_flow(session, FLOWS["serve"])
    assert only_step(outcome.recipe)[1]["engine"] in ("auto", "builtin")


def test_disabled_choice_cannot_be_taken_through_the_filter(monkeypatch):
    choices = [widgets.choice(f"item {i}", i) for i in range(6)] + [widgets.choice("refused", "x", disabled="no")]
    with keys(monkeypatch, ["refused" + ENTER, ENTER]) as prompts:
        answer = widgets.select("pick", choices)
    assert answer != "x"
    assert len(prompts) in (1, 2)


def test_type_to_filter_picks_from_a_long_list(monkeypatch):
    choices = [widgets.choice(name, name) for name in ("alpha", "bravo", "charlie", "delta", "echo", "foxtrot")]
    with keys(monkeypatch, ["fox" + ENTER]):
        assert widgets.select("pick", choices) == "foxtrot"


def test_memory_estimates_come_from_the_registry(tmp_path, monkeypatch, built):
    from menus import questions, registry

    monkeypatch.setattr(registry, "memory_estimate", lambda ref, method, dtype: {"full": 40.0}.get(method, 2.5))
    note = questions.memory_note("Qwen/Qwen2.5-7B-Instruct", "full", "float32", FACTS)
    assert "40.0 GiB" in note and "more than this cpu's 16 GiB" in note
    assert "2.5 GiB" in questions.memory_note("Qwen/Qwen2.5-7B-Instruct", "lora", "float32", FACTS)


def test_presets_and_estimates_from_the_registry(tmp_path, monkeypatch, built):
    from menus import registry
    from swiftbox.catalog import presets as models

    qwen = next(p for p in ALL_PRESETS if p.name == "qwen2.5-7b-instruct")
    monkeypatch.setattr(models, "PRESETS", (qwen,))
    assert [o.ref for o in registry.model_options()] == ["toy", "Qwen/Qwen2.5-7B-Instruct"]
    assert registry.memory_estimate("Qwen/Qwen2.5-7B-Instruct", "dora", "bfloat16") == \
        models.memory_gib(qwen, "lora", "bfloat16")
    assert registry.memory_estimate("someone/unknown-model", "lora", "bfloat16") is None
    session = make_session(tmp_path)
    with keys(monkeypatch, [DOWN + ENTER, ENTER, DOWN + ENTER, ENTER, ENTER, ENTER, ENTER]) as prompts:
        outcome = run_flow(session, FLOWS["sft"])
    assert outcome.recipe["model"] == "Qwen/Qwen2.5-7B-Instruct"
    assert only_step(outcome.recipe)[1]["method"] == "dora"
    assert prompts[2] == "Method:"


def test_method_default_is_qlora_when_only_it_fits(monkeypatch):
    from menus import questions, registry

    monkeypatch.setattr(registry, "memory_estimate",
                        lambda ref, method, dtype: {"lora": 20.0, "qlora": 7.0}.get(method))
    assert questions.fitting_method("Qwen/Qwen2.5-7B-Instruct", "bfloat16", FACTS, set(), "lora") == "qlora"
    assert questions.fitting_method("Qwen/Qwen2.5-7B-Instruct", "bfloat16", FACTS, {"qlora"}, "lora") == "lora"
    roomy = DeviceFacts(**{**FACTS.__dict__, "memory_gib": 80.0})
    assert questions.fitting_method("Qwen/Qwen2.5-7B-Instruct", "bfloat16", roomy, set(), "lora") == "lora"


def test_every_registry_preset_is_offered(monkeypatch):
    from menus import registry
    from swiftbox.catalog import presets as models

    monkeypatch.setattr(models, "PRESETS", ALL_PRESETS)
    refs = [o.ref for o in registry.model_options()]
    assert refs[0] == "toy" and refs[1:] == [p.name if p.wheel else p.modelscope_id for p in models.PRESETS]
    assert "smollm2-135m-instruct" in refs and len(refs) > 5


# -- back / escape / ctrl-c -----------------------------------------------------------------------

def test_escape_walks_back_one_question_at_a_time(tmp_path, monkeypatch, built):
    session = make_session(tmp_path)
    with keys(monkeypatch, [ENTER, ENTER, ESC, ESC, ESC]) as prompts:
        assert run_flow(session, FLOWS["sft"]) is BACK
    assert [p.split(":")[0].strip("? ") for p in prompts] == ["Model to fine-tune", "Dataset", "Method", "Dataset",
                                                              "Model to fine-tune"]


def test_going_back_to_full_skips_the_rank(tmp_path, monkeypatch, built):
    session = make_session(tmp_path)
    chunks = [ENTER, ENTER, ENTER, ESC, DOWN + DOWN + ENTER, ENTER, ENTER, ENTER]  # lora, Esc at rank, full
    with keys(monkeypatch, chunks):
        outcome = run_flow(session, FLOWS["sft"])
    assert only_step(outcome.recipe)[1] == {"dataset": SFT_DATA, "method": "full", "epochs": 3.0}


def test_back_from_review_returns_to_the_last_question(tmp_path, monkeypatch, built):
    session = make_session(tmp_path)
    # download: model, output, review -> Back (last item), output again, review -> Run
    with keys(monkeypatch, [ENTER, ENTER, UP + ENTER, ENTER, ENTER]) as prompts:
        outcome = run_flow(session, FLOWS["download"])
    assert "Output directory" in prompts[3]
    assert len(session.run.recipes) == 1 and outcome.summary


def test_ctrl_c_in_a_flow_returns_to_main_and_twice_quits(tmp_path, monkeypatch, built):
    session = make_session(tmp_path)
    with keys(monkeypatch, [ENTER, CTRL_C, CTRL_C]) as prompts:  # Download, Ctrl-C at its model, Ctrl-C at main
        assert main.run_menu(session) == 0
    assert len(prompts) == 3
    assert any("back at the main menu" in line for line in session.echoed)
    assert session.echoed[-1] == "bye"
    assert session.run.recipes == []


def test_ctrl_c_outside_a_prompt_also_returns_to_main(tmp_path, monkeypatch):
    def interrupted(session, action):
        raise KeyboardInterrupt  # e.g. while the doctor report is being collected

    monkeypatch.setattr(main, "dispatch", interrupted)
    session = make_session(tmp_path)
    with keys(monkeypatch, [ENTER, CTRL_C]):
        assert main.run_menu(session) == 0
    assert session.echoed[-2:] == ["  (back at the main menu; Ctrl-C here quits)", "bye"]


def test_an_unusable_device_is_one_line_and_the_menu_stays(tmp_path, monkeypatch):
    from swiftbox.errors import Unsupported

    def doctor(session):
        raise Unsupported("device npu was requested but is not available here; available: cpu")

    monkeypatch.setattr(main, "doctor", doctor)
    session = make_session(tmp_path)
    with keys(monkeypatch, [UP + UP + ENTER, CTRL_C]):  # Device & environment, then quit
        assert main.run_menu(session) == 0
    assert "  ! swiftbox: device npu was requested but is not available here; available: cpu" in session.echoed
    probe = DeviceProbe(collector=lambda: (_ for _ in ()).throw(Unsupported("no such device"))).start()
    assert probe.facts(5) is None and probe.header() == "device unknown (no such device)"


def test_quit_item(tmp_path, monkeypatch):
    session = make_session(tmp_path)
    with keys(monkeypatch, [UP + ENTER]):  # the pointer wraps from the first item to Quit
        assert main.run_menu(session) == 0


def test_review_names_what_is_wrong_with_a_recipe():
    assert review.problem({"name": "x", "model": "toy", "steps": [{"sft": {"dataset": SFT_DATA}}]}) is None
    assert "epochs" in review.problem({"name": "x", "model": "toy", "steps": [{"sft": {"dataset": SFT_DATA,
                                                                                       "epochs": -1}}]})


# -- review: save / edit / next step --------------------------------------------------------------

def test_save_only_writes_a_recipe_the_runner_accepts(tmp_path, monkeypatch, built):
    from swiftbox.recipe import load_recipe

    session = make_session(tmp_path)
    review_keys = DOWN + DOWN + DOWN + ENTER  # Edit a setting
    chunks = [ENTER, ENTER, ENTER, ENTER, ENTER, ENTER,
              review_keys, "sft.epochs=2" + ENTER, "sft.nope=1" + ENTER, ENTER,  # edit, a bad edit, done
              DOWN + DOWN + ENTER]                                               # Save only
    with keys(monkeypatch, chunks):
        outcome = run_flow(session, FLOWS["sft"])
    assert outcome.saved and session.run.recipes == []
    saved = load_recipe(outcome.saved)
    assert saved.steps[0].config.epochs == 2
    assert any("sft.nope" in line and "unknown setting" in line for line in session.echoed)
    assert outcome.saved == str(tmp_path / "recipes" / f"{outcome.recipe['name']}.yaml")


def test_a_saved_recipe_never_holds_the_api_key(tmp_path, monkeypatch, built):
    session = make_session(tmp_path)
    chunks = [ENTER, ENTER, ENTER, ENTER, "sk-secret" + ENTER, ENTER, ENTER, ENTER, DOWN + ENTER]  # ... Save and run
    with keys(monkeypatch, chunks):
        outcome = run_flow(session, FLOWS["serve"])
    assert "sk-secret" not in (tmp_path / "recipes" / f"{outcome.recipe['name']}.yaml").read_text()
    assert only_step(session.run.recipes[0])[1]["api_key"] == "sk-secret"  # the run itself has it
    assert any("SWIFTBOX_API_KEY" in line for line in session.echoed)


def test_after_sft_merge_is_offered_with_the_adapter_carried(tmp_path, monkeypatch, built):
    session = make_session(tmp_path)
    chunks = [DOWN + ENTER,                                   # main: Fine-tune
              ENTER, ENTER, ENTER, ENTER, ENTER, ENTER, ENTER,  # sft questions, Run
              DOWN + ENTER,                                   # next: chat, *merge*, eval, dpo
              ENTER, ENTER,                                   # merge: output, Run (model + base carried)
              UP + ENTER,                                     # next after merge: Back to the main menu
              CTRL_C]
    with keys(monkeypatch, chunks) as prompts:
        main.run_menu(session)
    sft_recipe, merge_recipe = session.run.recipes
    adapter = tmp_path / "runs" / sft_recipe["name"] / "sft"
    assert merge_recipe["model"] == str(adapter)
    assert only_step(merge_recipe) == ("merge", {})
    assert any(p.startswith("sft finished. Next?") for p in prompts)
    assert any(p.startswith("merge finished. Next?") for p in prompts)


def test_recent_artifacts_are_choices(tmp_path, monkeypatch, built):
    adapter = tmp_path / "runs" / "quick" / "sft"
    adapter.mkdir(parents=True)
    (adapter / "swiftbox.json").write_text(json.dumps({"kind": "sft", "artifact": "adapter", "base_model": "toy"}))
    (tmp_path / "runs" / "quick" / "sft.partial").mkdir()
    session = make_session(tmp_path)
    with keys(monkeypatch, [ENTER, ENTER, ENTER, ENTER, ENTER, ENTER]):  # the newest output is the first choice
        outcome = run_flow(session, FLOWS["eval"])
    assert outcome.recipe["model"] == adapter.as_posix()


def test_dataset_path_is_checked_as_typed(tmp_path, monkeypatch, built):
    good = tmp_path / "mine.jsonl"
    good.write_text(json.dumps({"instruction": "hi", "output": "hello"}) + "\n")
    wrong = tmp_path / "prefs.jsonl"
    wrong.write_text(json.dumps({"prompt": "a", "chosen": "b", "rejected": "c"}) + "\n")
    assert datasets.check("sft", str(tmp_path / "missing.jsonl")).endswith("no such file")
    assert "do not fit sft" in datasets.check("sft", str(wrong))
    assert datasets.check("dpo", str(wrong)) is True
    session = make_session(tmp_path)
    typed = "nope.jsonl" + ENTER + BACKSPACE * 10 + str(good) + ENTER  # rejected, corrected, accepted
    own = DOWN * len(datasets.bundled("sft")) + ENTER  # past the bundled files to "A file of my own"
    with keys(monkeypatch, [ENTER, own, typed, ENTER, ENTER, ENTER, ENTER, ENTER]):
        outcome = run_flow(session, FLOWS["sft"])
    assert only_step(outcome.recipe)[1]["dataset"] == str(good)


def test_run_a_recipe_file(tmp_path, monkeypatch, built):
    (tmp_path / "recipes").mkdir()
    (tmp_path / "recipes" / "aaa.yaml").write_text(yaml.safe_dump({"name": "aaa", "model": "toy",
                                                                    "steps": [{"download": {}}]}))
    session = make_session(tmp_path)
    with keys(monkeypatch, [UP + UP + UP + ENTER, ENTER, ENTER, UP + ENTER, CTRL_C]):
        # main: Run a recipe; aaa.yaml; Run; next step: Back to the main menu; quit
        main.run_menu(session)
    assert session.run.recipes == [{"name": "aaa", "model": "toy", "steps": [{"download": {}}]}]


def test_runner_errors_are_one_line(tmp_path, monkeypatch, built):
    from swiftbox.errors import UserError

    def failing(recipe, runs_root):
        raise UserError("sft.dataset: file not found")

    session = make_session(tmp_path, runner=failing)
    with keys(monkeypatch, [ENTER, ENTER, ENTER]):
        outcome = run_flow(session, FLOWS["download"])
    assert outcome.error == "sft.dataset: file not found"
    assert "  ! swiftbox: sft.dataset: file not found" in session.echoed


# -- header and first paint -----------------------------------------------------------------------

def test_header_paints_before_the_device_is_known():
    import threading

    gate = threading.Event()
    probe = DeviceProbe(collector=lambda: (gate.wait(5), FACTS)[1]).start()
    assert probe.header().startswith("detecting device")
    gate.set()
    assert probe.facts(5) is FACTS
    assert probe.header() == "cpu · 1 device · 16 GiB (8 free) · float32"


def test_menu_modules_do_not_import_torch():
    code = ("import sys, time; t = time.perf_counter(); import menus.main, menus.flows, menus.review; "
            "menus.main.main_choices(); print(time.perf_counter() - t); "
            "sys.exit(1 if any(m == 'torch' or m.startswith('torch.') for m in sys.modules) else 0)")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr or "torch was imported by the menu modules"


def test_the_cli_opens_the_menu_before_building_its_parser(monkeypatch):
    from swiftbox import cli

    monkeypatch.setattr(cli, "build_parser", lambda: pytest.fail("the parser was built for the menu"))
    monkeypatch.setattr(main, "run_menu", lambda: 0)
    assert cli.main([]) == 0 and cli.main(["menu"]) == 0


def test_menu_needs_a_terminal(cli):
    proc = cli("menu", input="")
    assert proc.returncode == 2 and "interactive terminal" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_diagnose_compare_runs_the_config_check(tmp_path, monkeypatch, capsys):
    for name, seed in (("a", 1), ("b", 2)):
        (tmp_path / name).mkdir()
        manifest = {"kind": "sft", "device": "cpu", "seeds": {"seed": seed}, "config": {"seed": seed, "epochs": 1}}
        (tmp_path / name / "swiftbox.json").write_text(json.dumps(manifest))
    session = make_session(tmp_path)
    with keys(monkeypatch, [UP + UP + UP + UP + ENTER, DOWN + ENTER, str(tmp_path / "a") + ENTER,
                            str(tmp_path / "b") + ENTER, ENTER, CTRL_C]) as seen:
        # main: Diagnose; Compare two runs; run A; run B; pause; quit
        main.run_menu(session)
    assert any("Diagnose" in s for s in seen)
    assert "  the runs differ (see the table)" in session.echoed
    assert "seed" in capsys.readouterr().out

"""swiftbox replaces only what swiftbox wrote (issue 32, class 4): `--force` and a recipe's default output replace a
directory holding a swiftbox manifest (or an empty one), and nothing else. A directory of user files is exit 2
naming it, and every file in it survives. Each test here deleted the user's files before."""
from __future__ import annotations

import pytest

from swiftbox import cli
from swiftbox.artifacts import MANIFEST, prepare_output
from swiftbox.errors import UserError
from swiftbox.runner import run_recipe
from tests.conftest import ROOT
from tests.fakes.pipelines import recipe

EVAL_DATA = str(ROOT / "recipes" / "data" / "parity_eval.jsonl")


def user_dir(path):
    """A sacrificial directory of someone's files (no manifest)."""
    path.mkdir(parents=True)
    (path / "thesis.tex").write_text("years of work")
    (path / "data").mkdir()
    (path / "data" / "rows.csv").write_text("a,b\n1,2\n")
    return path


def intact(path) -> bool:
    return ((path / "thesis.tex").read_text() == "years of work"
            and (path / "data" / "rows.csv").read_text() == "a,b\n1,2\n" and not (path / MANIFEST).exists())


def test_force_refuses_a_directory_that_is_not_a_swiftbox_output(tmp_path, fake_pipelines):
    mine = user_dir(tmp_path / "mine")
    with pytest.raises(UserError, match="not a swiftbox output") as err:
        run_recipe(recipe({"sft": {"dataset": "d", "output": str(mine), "force": True}}), runs_root=tmp_path)
    assert str(mine) in str(err.value) and err.value.exit_code == 2
    assert intact(mine) and not (tmp_path / "mine.partial").exists()


def test_a_default_output_holding_user_files_is_refused(tmp_path, fake_pipelines):
    """runs/<recipe>/<step> is swiftbox's own name, but whatever sits there now may be someone's."""
    theirs = user_dir(tmp_path / "r" / "sft")
    with pytest.raises(UserError, match="not a swiftbox output"):
        run_recipe(recipe({"sft": {"dataset": "d"}}), runs_root=tmp_path)
    assert intact(theirs)


def test_an_output_dir_header_pointing_at_a_project_is_refused(tmp_path, fake_pipelines):
    project = tmp_path / "project"
    theirs = user_dir(project / "sft")
    with pytest.raises(UserError, match="not a swiftbox output"):
        run_recipe({**recipe({"sft": {"dataset": "d"}}), "output_dir": str(project)})
    assert intact(theirs)


def test_swiftbox_outputs_and_empty_directories_are_still_replaced(tmp_path, fake_pipelines):
    run_recipe(recipe({"sft": {"dataset": "d"}}), runs_root=tmp_path)
    run_recipe(recipe({"sft": {"dataset": "d"}}), runs_root=tmp_path)           # default output: replaced
    out = tmp_path / "out"
    run_recipe(recipe({"sft": {"dataset": "d", "output": str(out)}}), runs_root=tmp_path)
    run_recipe(recipe({"sft": {"dataset": "d", "output": str(out), "force": True}}), runs_root=tmp_path)
    empty = tmp_path / "empty"
    empty.mkdir()
    run_recipe(recipe({"sft": {"dataset": "d", "output": str(empty), "force": True}}), runs_root=tmp_path)
    assert all((p / MANIFEST).is_file() for p in (tmp_path / "r" / "sft", out, empty))


def test_a_file_in_the_way_is_refused_not_moved(tmp_path, fake_pipelines):
    notes = tmp_path / "notes"
    notes.write_text("mine")
    with pytest.raises(UserError, match="not a directory"):
        run_recipe(recipe({"sft": {"dataset": "d", "output": str(notes), "force": True}}), runs_root=tmp_path)
    assert notes.read_text() == "mine" and not list(tmp_path.glob(".notes.old-*"))


def test_a_partial_dir_swiftbox_did_not_make_is_refused(tmp_path, fake_pipelines):
    """`<out>.partial` is wiped at the start of a fresh run: only when swiftbox made it (its mark is inside)."""
    theirs = user_dir(tmp_path / "model.partial")
    with pytest.raises(UserError, match="model.partial"):
        run_recipe(recipe({"sft": {"dataset": "d", "output": str(tmp_path / "model")}}), runs_root=tmp_path)
    assert intact(theirs)
    from swiftbox.artifacts import PARTIAL_MARK

    work = prepare_output(tmp_path / "other", force=False)          # one swiftbox made: marked, and wiped on a re-run
    (work / "junk.bin").write_text("x")
    assert (work / PARTIAL_MARK).is_file()
    assert not (prepare_output(tmp_path / "other", force=False) / "junk.bin").exists()


def test_cli_force_on_user_files_is_one_line_exit_2_naming_the_directory(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    mine = user_dir(tmp_path / "mine")
    rc = cli.main(["eval", "toy", "--dataset", EVAL_DATA, "--limit", "1", "--out", str(mine), "--force"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1 and str(mine) in err, err
    assert intact(mine)


def test_a_summary_json_that_is_not_ours_is_not_overwritten(tmp_path, fake_pipelines):
    """The run directory (runs/<recipe>, or the recipe's output_dir) gets summary.json: not over someone's own."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "summary.json").write_text('{"quarter": "Q3", "revenue": 12}')
    with pytest.raises(UserError, match="summary.json"):
        run_recipe({**recipe({"sft": {"dataset": "d"}}), "output_dir": str(project)})
    assert (project / "summary.json").read_text() == '{"quarter": "Q3", "revenue": 12}'
    assert not (project / "sft").exists()
    run_recipe(recipe({"sft": {"dataset": "d"}}), runs_root=tmp_path)
    run_recipe(recipe({"sft": {"dataset": "d"}}), runs_root=tmp_path)    # our own summary: rewritten

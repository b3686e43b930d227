"""`--force` replaces only a directory whose manifest a swiftbox run wrote (issue 43, class 6): a user's own
`swiftbox.json` - `{}`, a list of settings, a manifest-looking object without the fields every run writes - is not
proof enough, and the refusal says what would have been deleted."""
from __future__ import annotations

import json

import pytest

from swiftbox.artifacts import MANIFEST, is_swiftbox_output, manifest_problem
from swiftbox.errors import UserError
from swiftbox.runner import run_recipe
from tests.fakes.pipelines import recipe


def _theirs(path, manifest: str):
    path.mkdir(parents=True)
    (path / MANIFEST).write_text(manifest)
    (path / "notes.md").write_text("mine")
    return path


@pytest.mark.parametrize("manifest", [
    "{}",
    '{"kind": "sft"}',
    '{"swiftbox_manifest": 1, "kind": "sft"}',
    '{"swiftbox_manifest": true, "kind": "sft", "config": {}, "versions": {}, "timings": {"started": "x"}}',
    '{"swiftbox_manifest": 99, "kind": "sft", "config": {}, "versions": {}, "timings": {"started": "x"}}',
    '{"swiftbox_manifest": 1, "kind": "sft", "config": {}, "versions": {}, "timings": {}}',
])
def test_force_keeps_a_directory_with_someone_elses_swiftbox_json(tmp_path, fake_pipelines, manifest):
    mine = _theirs(tmp_path / "mine", manifest)
    with pytest.raises(UserError, match="not a swiftbox output") as err:
        run_recipe(recipe({"sft": {"dataset": "d", "output": str(mine), "force": True}}), runs_root=tmp_path)
    text = str(err.value)
    assert "would delete 2 entries (notes.md, swiftbox.json)" in text and err.value.exit_code == 2
    assert (mine / "notes.md").read_text() == "mine" and (mine / MANIFEST).read_text() == manifest


def test_a_run_written_manifest_is_still_replaced(tmp_path, fake_pipelines):
    out = tmp_path / "out"
    run_recipe(recipe({"sft": {"dataset": "d", "output": str(out)}}), runs_root=tmp_path)
    written = json.loads((out / MANIFEST).read_text())
    assert manifest_problem(written) is None and is_swiftbox_output(out)
    run_recipe(recipe({"sft": {"dataset": "d", "output": str(out), "force": True}}), runs_root=tmp_path)
    assert json.loads((out / MANIFEST).read_text())["timings"]["started"] != "x"

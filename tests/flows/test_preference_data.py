"""Preference data that teaches nothing (issue 32, class 5): DPO on pairs whose chosen reply is the rejected one
exited 0 after training on nothing. Now identical pairs (KTO: the same reply labelled both good and bad) are
counted before the model loads: all or most of them -> exit 2 naming the count; some -> a loud warning."""
from __future__ import annotations

import json

import pytest

from swiftbox import cli
from swiftbox.runner import run_recipe

KINDS = ["dpo", "orpo", "simpo", "rm", "kto"]


def pairs(path, same: int, total: int = 8):
    rows = [{"prompt": f"Is {n} odd?", "chosen": "yes" if n % 2 else "no",
             "rejected": ("yes" if n % 2 else "no") if i < same else ("no" if n % 2 else "yes")}
            for i, n in enumerate(range(11, 11 + total))]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def kto_rows(path, contradicting: int, total: int = 8):
    """`total` rows; the first `contradicting` come as a good/bad couple of the very same reply."""
    rows = []
    for i in range(total):
        reply = "yes" if i % 2 else "no"
        label = (i % 2 == 1) if i >= contradicting else (i % 2 == 0)
        prompt = f"Is {i // 2 if i < contradicting else 100 + i} odd?"
        rows.append({"prompt": prompt, "completion": reply if i >= contradicting else "yes", "label": label})
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def dataset(kind, tmp_path, bad: int):
    return kto_rows(tmp_path / "d.jsonl", bad) if kind == "kto" else pairs(tmp_path / "d.jsonl", bad)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("bad", [8, 6])          # all of them, most of them
def test_degenerate_preference_data_is_refused_naming_the_count(kind, bad, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    rc = cli.main([kind, "toy", "--dataset", dataset(kind, tmp_path, bad), "--max-steps", "1",
                   "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip()
    assert rc == 2, err
    assert len(err.splitlines()) == 1 and f"{bad} of 8" in err and "d.jsonl" in err, err
    assert not (tmp_path / "out").exists()


class Loaded(Exception):
    """Raised where the model would load: the data checks are over by then."""


@pytest.mark.parametrize("kind", KINDS)
def test_some_degenerate_rows_warn_loudly_and_go_on(kind, tmp_path, monkeypatch, capsys):
    def stop(*args, **kwargs):
        raise Loaded

    monkeypatch.setattr("swiftbox.training.model.load_for_training", stop)
    recipe = {"name": "r", "model": "toy", "steps": [{kind: {"dataset": dataset(kind, tmp_path, 2), "max_steps": 1}}]}
    with pytest.raises(Loaded):
        run_recipe(recipe, runs_root=tmp_path)
    err = capsys.readouterr().err
    warning = [line for line in err.splitlines() if "WARNING" in line]
    assert len(warning) == 1 and "2 of 8" in warning[0] and kind in warning[0], err

"""`bench sft --peers`: the pure parts (sides, schedule, medians with spread, ratios, the JSON shape, argument
handling, the token count and the peer venv's layout). Nothing here installs a peer or trains."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import ROOT

sys.path.insert(0, str(ROOT / "bench"))
from peers import env, job, stats  # noqa: E402  (bench/peers/)


def test_sides_default_order_and_swiftbox_first():
    assert stats.parse_sides(None, "sft") == ["swiftbox", "hf", "ms-swift", "llamafactory"]
    assert stats.parse_sides("llamafactory,ms-swift", "sft") == ["swiftbox", "llamafactory", "ms-swift"]
    # the plain baseline runs both jobs (DPO: TRL's DPOTrainer); duplicates collapse
    assert stats.parse_sides("swiftbox,hf,hf,ms-swift", "dpo") == ["swiftbox", "hf", "ms-swift"]
    assert stats.parse_sides(None, "dpo") == ["swiftbox", "hf", "ms-swift", "llamafactory"]
    assert stats.parse_sides("swiftbox+--no-packing", "sft") == ["swiftbox", "swiftbox+--no-packing"]


def test_unknown_side_is_refused_naming_it():
    with pytest.raises(ValueError, match="unsloth"):
        stats.parse_sides("swiftbox,unsloth", "sft")


def test_schedule_interleaves_rounds():
    assert stats.schedule(["a", "b", "c"], 2) == [(0, "a"), (0, "b"), (0, "c"), (1, "a"), (1, "b"), (1, "c")]
    with pytest.raises(ValueError):
        stats.schedule(["a"], 0)


def test_median_spread():
    assert stats.median_spread([3.0, 1.0, 2.0, None]) == {"median": 2.0, "min": 1.0, "max": 3.0, "n": 3}
    assert stats.median_spread([1.0, 4.0]) == {"median": 2.5, "min": 1.0, "max": 4.0, "n": 2}
    assert stats.median_spread([]) == {"median": None, "min": None, "max": None, "n": 0}


def _results():
    # round 0: swiftbox 300, best peer 200 (ratio 1.5); round 1: swiftbox 200, best peer 250 (0.8); hf 100 both
    rows = []
    for r, (ours, ms, lf, hf) in enumerate([(300, 150, 200, 100), (200, 250, 100, 100)]):
        for side, tps, rss in (("swiftbox", ours, 2.0), ("ms-swift", ms, 3.0), ("llamafactory", lf, 2.5),
                               ("hf", hf, 4.0)):
            rows.append({"round": r, "side": side, "tokens_per_s": tps, "s_per_step": 1.0,
                         "peak_rss_bytes": int(rss * 2 ** 30), "final_loss": 7.0})
    rows.append({"round": 1, "side": "llamafactory", "error": "exit 1: boom"})
    return rows


def test_ratios_are_per_round_against_that_rounds_best_peer():
    assert stats.per_round_ratio(_results(), "swiftbox", ["ms-swift", "llamafactory"], "tokens_per_s") == \
        pytest.approx([1.5, 0.8])
    out = stats.summary(_results(), ["swiftbox", "hf", "ms-swift", "llamafactory"], "sft")
    assert out["vs_best_peer"] == {"median": 1.15, "min": 0.8, "max": 1.5, "n": 2}
    assert out["vs_hf"] == {"median": 2.5, "min": 2.0, "max": 3.0, "n": 2}
    assert out["sides"]["swiftbox"]["vs_best_peer"] == out["vs_best_peer"]


def test_summary_shape_failures_and_memory():
    out = stats.summary(_results(), ["swiftbox", "hf", "ms-swift", "llamafactory"], "sft")
    assert out["metric"] == "tokens_per_s"
    lf = out["sides"]["llamafactory"]
    assert lf["runs"] == 3 and lf["failed"] == ["exit 1: boom"] and lf["tokens_per_s"]["n"] == 2
    assert out["best_peer"] == "ms-swift"              # median 200 vs llamafactory's 150
    assert out["memory_vs_best_peer"] == pytest.approx(2.0 / 3.0, abs=1e-3)
    json.dumps(out)                                    # one JSON line: everything serialisable


def test_dpo_is_compared_on_tokens_per_second_with_pairs_alongside():
    rows = [{"round": 0, "side": "swiftbox", "tokens_per_s": 200.0, "pairs_per_s": 0.5},
            {"round": 0, "side": "ms-swift", "tokens_per_s": 100.0, "pairs_per_s": 1.0}]
    out = stats.summary(rows, ["swiftbox", "ms-swift"], "dpo")
    assert out["metric"] == "tokens_per_s" and out["vs_best_peer"]["median"] == 2.0 and out["vs_hf"] is None
    assert out["sides"]["swiftbox"]["per_s"]["median"] == 0.5


def test_token_count_padded_padding_free_and_block_mask():
    torch = pytest.importorskip("torch")
    padded = {"input_ids": torch.tensor([[5, 6, 7], [5, 0, 0]]), "attention_mask": torch.tensor([[1, 1, 1], [1, 0, 0]])}
    assert job.count_tokens(padded) == 4
    flat = {"input_ids": torch.tensor([[5, 6, 7, 8, 9]]), "position_ids": torch.tensor([[0, 1, 2, 0, 1]])}
    assert job.count_tokens(flat) == 5
    block = {"input_ids": torch.tensor([[5, 6, 7, 0]]), "attention_mask": torch.zeros(1, 1, 4, 4)}
    assert job.count_tokens(block) == 3
    dpo = {"prompt_input_ids": torch.tensor([[1, 2]]), "chosen_attention_mask": torch.tensor([[1, 1, 0]]),
           "rejected_attention_mask": torch.tensor([[1, 0, 0]])}
    assert job.count_tokens(dpo) == 3


def test_peer_venvs_live_under_the_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("SWIFTBOX_CACHE", str(tmp_path))
    assert env.venv_dir("ms-swift") == tmp_path / "peers" / "ms-swift"
    assert not env.installed("ms-swift")
    (tmp_path / "peers" / "ms-swift").mkdir(parents=True)
    (tmp_path / "peers" / "ms-swift" / "installed.json").write_text(json.dumps({"requirements": ["other==1"]}))
    assert not env.installed("ms-swift")               # a changed pin means a reinstall
    (tmp_path / "peers" / "ms-swift" / "installed.json").write_text(json.dumps({"requirements": env.PEERS["ms-swift"]}))
    assert env.installed("ms-swift")
    with pytest.raises(ValueError, match="unknown peer"):
        env.install("unsloth")


@pytest.mark.parametrize("argv, message", [
    (["--peers", "--sides", "swiftbox,nope"], "unknown nope"),
    (["--peers", "--rounds", "0"], "--rounds must be at least 1"),
    (["--peers", "--peer-rows", "3"], "--peer-rows must be at least 9"),
    (["--peers", "--profile", "--no-profile"], "--profile and --no-profile contradict"),
])
def test_bad_peer_arguments_exit_2_with_one_line(argv, message):
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "sft.py"), *argv], capture_output=True, text=True,
                          cwd=ROOT, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}, timeout=120)
    assert proc.returncode == 2
    assert message in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_profile_run_flags_parse_in_swiftbox_cli():
    """The profiled swiftbox run's flags are ones swiftbox's CLI takes (the split came back as an error when a
    boolean was spelled `--profile.profile-memory false`)."""
    from peers.run import PROFILE_FLAGS

    from swiftbox.cli import build_parser

    args = build_parser().parse_args(["sft", "toy", "--dataset", "d.jsonl", *PROFILE_FLAGS])
    got = {k: v for k, v in vars(args).items() if k.startswith("profile.")}
    assert got == {"profile.wait": "1", "profile.warmup": "0", "profile.active": "2", "profile.profile_memory": False}


def test_peer_flags_need_peers():
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "sft.py"), "--method", "dpo"], capture_output=True,
                          text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 2 and "go with --peers" in proc.stderr


def test_row_count_pairs_once_and_packed_segments(monkeypatch):
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(job, "METHOD", "dpo")
    concatenated = {"input_ids": torch.zeros(6, 5, dtype=torch.long), "completion_mask": torch.ones(6, 5)}
    assert job.count_rows(concatenated) == 3                     # chosen and rejected stacked: 3 pairs
    assert job.count_rows({"chosen_input_ids": torch.zeros(4, 7)}) == 4
    monkeypatch.setattr(job, "METHOD", "sft")
    packed = {"input_ids": torch.zeros(1, 6, dtype=torch.long), "position_ids": torch.tensor([[0, 1, 2, 0, 1, 0]])}
    assert job.count_rows(packed) == 3
    assert job.count_rows({"input_ids": torch.zeros(8, 4, dtype=torch.long)}) == 8


def test_trl_dpo_baseline_reads_the_same_pairs_as_conversations(tmp_path):
    data = ROOT / "bench" / "data" / "dpo_en_demo_64.json"
    rows = job.trl_pairs(str(data))
    raw = json.loads(data.read_text())
    assert len(rows) == len(raw)
    first = rows[0]
    assert first["prompt"][-1] == {"role": "user", "content": raw[0]["conversations"][-1]["value"]}
    assert first["chosen"] == [{"role": "assistant", "content": raw[0]["chosen"]["value"]}]
    assert first["rejected"] == [{"role": "assistant", "content": raw[0]["rejected"]["value"]}]
    assert {m["role"] for r in rows for m in r["prompt"]} <= {"system", "user", "assistant"}

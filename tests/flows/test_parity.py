"""parity: logit cosine / max |Δ| between two model references; table output; exit 1 past a threshold."""
from __future__ import annotations

import json

import pytest

from swiftbox.errors import UserError
from tests.support.adapters import shared_adapter, shared_merged


@pytest.mark.dtype   # ./launch.sh test runs it again as on a bf16-native CPU (SWIFTBOX_CPU_BF16=on)
def test_adapter_and_its_merge_agree_and_differ_from_the_base(toy_dir):
    import swiftbox as sb

    same = sb.parity(str(shared_adapter("lora")), str(shared_merged()))
    assert same["max_abs_diff"] <= 1e-4 and same["cosine_min"] > 0.999999 and same["argmax_agreement"] == 1.0
    apart = sb.parity(str(toy_dir), str(shared_adapter("lora")))
    assert apart["max_abs_diff"] > 0.05 and apart["positions"] == same["positions"] > 0


def test_probe_files(tmp_path, toy_dir):
    from swiftbox.parity import parity, read_probe

    probe = tmp_path / "probe.jsonl"
    probe.write_text(json.dumps({"messages": [{"role": "user", "content": "Is 7 odd?"},
                                              {"role": "assistant", "content": "yes"}]}) + "\n"
                     + json.dumps({"prompt": "Hello"}) + "\n")
    assert read_probe(probe) == [[{"role": "user", "content": "Is 7 odd?"}], "Hello"]
    result = parity(str(toy_dir), str(toy_dir), probe)
    assert result["prompts"] == 2 and result["max_abs_diff"] == 0.0
    with pytest.raises(UserError, match="no such file"):
        read_probe(tmp_path / "missing.txt")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"other": 1}\n')
    with pytest.raises(UserError, match="holds no prompts"):
        read_probe(bad)


def test_exits_1_past_a_threshold_and_prints_a_table(toy_dir, capsys):
    from swiftbox.parity import parity_cli

    assert parity_cli(str(toy_dir), str(shared_adapter("lora")), ["--max-diff", "1e-3"]) == 1
    out = capsys.readouterr().out
    assert "max_abs_diff" in out and "cosine_min" in out and "FAIL" in out


def test_launch_parity_is_wired_and_refuses_bad_input_in_one_line(cli, toy_dir, tmp_path):
    res = cli("parity", str(toy_dir), str(toy_dir), "--probe", str(tmp_path / "missing.txt"))
    assert res.returncode == 2 and "no such file" in res.stderr and "Traceback" not in res.stderr
    res = cli("parity", str(toy_dir), str(toy_dir), "--max-diff", "lots")
    assert res.returncode == 2 and "Traceback" not in res.stderr


@pytest.mark.dtype
def test_cli_passes_within_thresholds(toy_dir, capsys):
    from swiftbox.parity import parity_cli

    rc = parity_cli(str(shared_adapter("lora")), str(shared_merged()),
                    ["--max-diff", "1e-4", "--min-cosine", "0.9999", "--json"])
    assert rc == 0
    line = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert line["ok"] and line["max_abs_diff"] <= 1e-4
    rc = parity_cli(str(toy_dir), str(shared_adapter("lora")), ["--min-cosine", "0.999999", "--json"])
    assert rc == 1

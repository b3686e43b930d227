"""The adapter record (swiftbox/modeling/adapter_file.py): one typed reading of adapter_config.json, refusals in one
line naming the file and the field, each consumer's limits as one function over the record, and no other module
parsing the file by hand."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from swiftbox.errors import UserError
from swiftbox.modeling.adapter_file import MAX_RUNTIME_RANK, AdapterFile, AdapterFileError, limits

ROOT = Path(__file__).resolve().parents[2]


def _write(folder: Path, **config) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "adapter_config.json").write_text(json.dumps(config))
    return folder


def test_a_peft_lora_config_reads_into_the_record(tmp_path):
    from peft import LoraConfig

    LoraConfig(r=16, lora_alpha=32, target_modules=["q_proj", "v_proj"], rank_pattern={"v_proj": 24},
               use_rslora=True, base_model_name_or_path="acme/base").save_pretrained(str(tmp_path))
    record = AdapterFile.read(tmp_path)
    assert (record.peft_type, record.r, record.lora_alpha, record.use_rslora) == ("LORA", 16, 32, True)
    assert sorted(record.targets()) == ["q_proj", "v_proj"] and record.max_rank == 24
    assert record.base_model_name_or_path == "acme/base" and record.kind == "lora" and record.bias == "none"
    assert limits(record, "builtin") == limits(record, "vllm") == limits(record, "gguf") == []


def test_absent_fields_take_peft_defaults(tmp_path):
    record = AdapterFile.read(_write(tmp_path))
    assert (record.r, record.lora_alpha, record.init, record.use_dora, record.modules_to_save) == (8, 8, True, False,
                                                                                                   None)


def test_the_record_is_frozen(tmp_path):
    record = AdapterFile.read(_write(tmp_path, r=4))
    with pytest.raises(AttributeError):
        record.r = 8  # type: ignore[misc]
    with pytest.raises(TypeError):
        record.rank_pattern["x"] = 1  # type: ignore[index]


@pytest.mark.parametrize("config, field", [
    ({"r": 0}, "r"), ({"r": "8"}, "r"), ({"r": True}, "r"),
    ({"lora_alpha": "big"}, "lora_alpha"), ({"lora_alpha": float("inf")}, "lora_alpha"),
    ({"rank_pattern": {"q_proj": -1}}, "rank_pattern"), ({"rank_pattern": [1]}, "rank_pattern"),
    ({"alpha_pattern": {"q_proj": "x"}}, "alpha_pattern"),
    ({"target_modules": 3}, "target_modules"), ({"modules_to_save": "lm_head"}, "modules_to_save"),
    ({"bias": "some"}, "bias"), ({"init_lora_weights": 3}, "init_lora_weights"),
    ({"use_dora": "yes"}, "use_dora"), ({"base_model_name_or_path": 5}, "base_model_name_or_path"),
    ({"peft_type": 7}, "peft_type"),
])
def test_a_malformed_field_is_refused_in_one_line_naming_file_and_field(tmp_path, config, field):
    folder = tmp_path / "a"
    folder.mkdir()
    (folder / "adapter_config.json").write_text(json.dumps(config).replace("Infinity", "1e999"))
    with pytest.raises(AdapterFileError) as err:
        AdapterFile.read(folder)
    assert isinstance(err.value, UserError) and err.value.field == field
    text = str(err.value)
    assert "\n" not in text and str(folder) in text and f"adapter_config.json: {field} " in text
    assert str(folder) not in err.value.reason          # what a server may show a client


@pytest.mark.parametrize("content, why", [("{", "cannot be read"), ("[1, 2]", "is not a JSON object"),
                                          ("[" * 100_000, "cannot be read")])
def test_an_unreadable_file_is_refused_in_one_line(tmp_path, content, why):
    (tmp_path / "adapter_config.json").write_text(content)
    with pytest.raises(AdapterFileError, match=why) as err:
        AdapterFile.read(tmp_path)
    assert err.value.field == "" and "\n" not in str(err.value)


def test_a_missing_file_is_refused(tmp_path):
    with pytest.raises(AdapterFileError, match="adapter_config.json cannot be read"):
        AdapterFile.read(tmp_path)


def test_each_consumer_has_its_limits(tmp_path):
    dora = AdapterFile.read(_write(tmp_path / "d", use_dora=True))
    assert any("DoRA" in p for p in limits(dora, "builtin")) and any("DoRA" in p for p in limits(dora, "vllm"))
    assert any("magnitude" in p for p in limits(dora, "gguf")) and dora.kind == "dora"
    saved = AdapterFile.read(_write(tmp_path / "s", modules_to_save=["lm_head"]))
    assert limits(saved, "builtin") == [] and limits(saved, "vllm") and limits(saved, "gguf")
    biased = AdapterFile.read(_write(tmp_path / "b", bias="all", target_modules=["q_proj", "embed_tokens"]))
    text = " | ".join(limits(biased, "vllm"))
    assert "bias 'all'" in text and "embed_tokens" in text and limits(biased, "gguf") == []
    ia3 = AdapterFile.read(_write(tmp_path / "i", peft_type="IA3"))
    assert all(any("peft_type IA3" in p for p in limits(ia3, t)) for t in ("builtin", "vllm", "gguf"))
    with pytest.raises(ValueError):
        limits(ia3, "ollama")


def test_the_runtime_rank_cap_is_one_rule_for_both_engines(tmp_path):
    at = AdapterFile.read(_write(tmp_path / "at", r=MAX_RUNTIME_RANK))
    over = AdapterFile.read(_write(tmp_path / "over", r=8, rank_pattern={"q_proj": MAX_RUNTIME_RANK + 1}))
    assert limits(at, "builtin") == limits(at, "vllm") == []
    for engine in ("builtin", "vllm"):
        assert [p for p in limits(over, engine) if f"rank {MAX_RUNTIME_RANK + 1} > {MAX_RUNTIME_RANK}" in p]
    assert limits(over, "gguf") == []          # a GGUF LoRA has no rank cap


def test_the_engines_read_the_record(tmp_path):
    """serving/fit.py and verify answer from the record: a malformed field is the record's one line there too."""
    from swiftbox.serving.fit import adapter_problems_for_builtin, adapter_problems_for_vllm, read_adapter_rank

    bad = _write(tmp_path / "bad", r=-3)
    assert adapter_problems_for_builtin(bad) == adapter_problems_for_vllm(bad, None) == [
        "adapter_config.json: r -3 is not a positive integer"]
    assert read_adapter_rank(bad) is None and read_adapter_rank(_write(tmp_path / "ok", r=4)) == 4


def test_no_other_module_parses_adapter_config_json():
    """Every reader goes through the record: the file's name appears as a literal only in the record module and in
    the writers (training's rsLoRA rewrite)."""
    writers = {"swiftbox/modeling/adapter_file.py", "swiftbox/training/lora_init.py"}
    found = {str(p.relative_to(ROOT)) for p in (ROOT / "swiftbox").rglob("*.py")
             if re.search(r"""["']adapter_config\.json["']""", p.read_text())}
    assert found <= writers, sorted(found - writers)


@pytest.mark.parametrize("rank, method, warned", [(MAX_RUNTIME_RANK + 1, "lora", True),
                                                  (MAX_RUNTIME_RANK, "lora", False),
                                                  (MAX_RUNTIME_RANK + 1, "full", False)])
def test_training_warns_of_an_adapter_no_engine_serves(capsys, tmp_path, rank, method, warned):
    from swiftbox.device import current_platform
    from swiftbox.steps import SftStep
    from swiftbox.training.model import check_training

    rows = tmp_path / "x.jsonl"     # check refuses a dataset file that is not there before it looks at the rank
    rows.write_text('{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]}\n')
    check_training(SftStep(dataset=str(rows), method=method, lora={"rank": rank}), current_platform("cpu"), "toy")
    lines = [line for line in capsys.readouterr().err.splitlines() if "warning: lora.rank" in line]
    assert len(lines) == (1 if warned else 0)
    if warned:
        assert f"rank {rank} > {MAX_RUNTIME_RANK}" in lines[0] and "merge" in lines[0]

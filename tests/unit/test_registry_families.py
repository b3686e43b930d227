"""This year's model families in the registry (issue 34): hub ids, packing policy, memory rows and the refusal of a
family swiftbox cannot train (exit 3, naming the family and the reason). Their templates are checked in
tests/unit/test_templates.py."""
from __future__ import annotations

import json

import pytest

from swiftbox.catalog import presets as registry
from swiftbox.errors import Unsupported

NEW_FAMILIES = {"Qwen3.5", "Qwen3.5-MoE", "Qwen3-Next", "Gemma-3", "Gemma-4", "gpt-oss", "Llama-4", "GLM-4.5",
                "DeepSeek-V3", "Mistral-Small-3", "SmolLM3", "LFM2", "Granite-4", "Phi-4", "OLMo-3",
                # issue 42
                "DeepSeek-V4", "Seed-OSS", "MiniMax-M2", "Hunyuan-3", "Apertus", "Nemotron-H", "LFM2.5", "ERNIE-4.5",
                "GLM-5"}
# linear attention / Mamba / convolutions that still pad: none of the presets' (their mixers - and Granite-4's
# attention, whose mask ignores the packed rows' position_ids - run once per packed sample: test_hybrid_packing.py)
HYBRID: set[str] = set()
# attention-only families whose packed batch is still not exact in transformers
# (measured: tests/unit/test_packing_exact.py)
ATTENTION_NOT_EXACT = {"gpt-oss", "GLM-5"}    # GLM-5: its sparse-attention indexer picks keys across packed rows
# custom-code families (trust_remote_code): their own attention ignores the packed rows' position_ids; not measurable
# by the packing harness, so not proven exact: they pad
CUSTOM_CODE = {"InternLM", "Baichuan"}


def test_every_family_of_the_year_has_a_preset_with_both_hub_ids():
    families = {p.family for p in registry.PRESETS}
    assert NEW_FAMILIES <= families
    for p in registry.PRESETS_2026 + registry.PRESETS_2026B:
        assert "/" in p.modelscope_id and "/" in p.hf_id and p.model_type, p.name
        assert registry.find(p.name) is p and registry.find(f"hf:{p.hf_id}") is not None
        assert p.params_b > p.active_params_b >= 0


def test_every_preset_model_type_is_one_the_installed_transformers_builds():
    """A preset names a config.json model_type transformers knows (the packing policy, refusals and memory rows key on
    it); a typo or a family transformers dropped fails here."""
    from transformers import CONFIG_MAPPING

    unknown = {p.name: p.model_type for p in registry.PRESETS
               if p.model_type not in CONFIG_MAPPING and p.model_type not in registry.PACKING_UNPROVEN}
    assert not unknown


def test_packing_is_exact_only_where_every_layer_is_attention():
    for p in registry.PRESETS:
        assert p.packing == ("padding" if p.family in HYBRID | ATTENTION_NOT_EXACT | CUSTOM_CODE else "exact"), p.name
        assert p.model_type, p.name               # what the packing policy and refusals key on
        assert (p.family in CUSTOM_CODE) == p.trust_remote_code == (p.model_type in registry.PACKING_UNPROVEN), p.name
    assert registry.packing_policy("jamba") == registry.packing_policy("kimi_linear") == "padding"
    assert registry.packing_policy("llama") == "exact"


def test_models_table_has_a_memory_row_and_the_packing_policy_for_each_preset():
    table = registry.models_table()
    rows = {r["name"]: r for r in table["presets"]}
    for p in registry.PRESETS_2026 + registry.PRESETS_2026B:
        row = rows[p.name]
        assert set(row["memory_gib"]) == set(registry.METHODS) and row["packing"] == p.packing
        assert row["memory_gib"]["qlora"] < row["memory_gib"]["lora"] < row["memory_gib"]["full"]
    assert rows["mistral-small-3.2-24b-instruct-2506"]["training_refused"]
    assert rows["qwen3.5-4b"]["training_refused"] is None


def test_a_family_that_cannot_be_trained_is_refused_with_exit_3_naming_it(tmp_path):
    from swiftbox.training.model import refuse_family

    (tmp_path / "config.json").write_text(json.dumps({"model_type": "mistral3"}))
    with pytest.raises(Unsupported, match=r"Mistral Small 3\.x \(mistral3\) cannot be trained here: .*vision") as err:
        refuse_family(tmp_path)
    assert err.value.exit_code == 3 and "\n" not in str(err.value)
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "qwen3_5"}))
    refuse_family(tmp_path)                      # trainable families pass


@pytest.mark.slow
def test_sft_on_a_refused_family_exits_3(tmp_path, cli):
    """Through the CLI in a fresh process (slow: the import alone takes most of it)."""
    model = tmp_path / "m"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"model_type": "mistral3"}))
    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps({"messages": [{"role": "user", "content": "hi"},
                                             {"role": "assistant", "content": "yo"}]}) + "\n")
    out = cli("sft", "--model", str(model), "--dataset", str(data), "--output", str(tmp_path / "out"))
    assert out.returncode == 3, out.stderr
    assert "Mistral Small 3.x" in out.stderr + out.stdout

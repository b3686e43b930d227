"""GGUF export, the parts that need no llama.cpp build: the Ollama Modelfile from real chat templates, the GGUF
header reader and verify's file checks (on files written with the `gguf` package), the step's type validation,
the refusals, the pre-tokenizer identification, the converter's architecture table, the cached setup and the
gguf extra in install.sh. The whole path through a real llama.cpp is in test_gguf_slow.py."""
from __future__ import annotations

import json
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.support.adapters import make_adapter, one_line_error
from tests.support.gguf_files import CHATML, write_gguf

TEMPLATES = ROOT / "tests" / "fixtures" / "templates"
pytest.importorskip("gguf")


def _jinja(template: str, messages: list[dict], special: dict) -> str:
    from swiftbox.export.llamacpp.modelfile import _render

    return _render(template, messages, True, special)


EXTRA_CONVERSATION = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "a"},
                      {"role": "assistant", "content": "b"}, {"role": "user", "content": "c"},
                      {"role": "assistant", "content": "d"}, {"role": "user", "content": "e"}]


# -- the Modelfile's TEMPLATE ------------------------------------------------------------------------------------
def test_chatml_template_becomes_ollamas_go_template():
    from swiftbox.export.llamacpp import modelfile as M

    special = {"bos_token": "<s>", "eos_token": "</s>"}
    template = (TEMPLATES / "internlm-internlm2_5-7b-chat.jinja").read_text()
    p, go = M.translate(template, special)
    assert p.bos == "<s>"  # left to llama.cpp, which adds BOS itself
    assert go == ('{{ if not .System }}{{ end }}{{ range $i, $_ := .Messages }}'
                  '{{ $last := eq (len (slice $.Messages $i)) 1 }}'
                  '{{ if eq .Role "system" }}<|im_start|>system\n{{ .Content }}<|im_end|>\n'
                  '{{ else if eq .Role "user" }}<|im_start|>user\n{{ .Content }}<|im_end|>\n'
                  '{{ if $last }}<|im_start|>assistant\n{{ end }}'
                  '{{ else if eq .Role "assistant" }}<|im_start|>assistant\n{{ .Content }}'
                  '{{ if not $last }}<|im_end|>\n{{ end }}{{ end }}{{ end }}')
    # a conversation the translation was not checked on renders as the Jinja template does (minus the BOS)
    assert M.simulate(p, EXTRA_CONVERSATION) == _jinja(template, EXTRA_CONVERSATION, special)[len("<s>"):]


@pytest.mark.parametrize("name,default_system", [("Qwen-Qwen2.5-7B-Instruct.jinja", "You are Qwen"),
                                                 ("meta-llama-Llama-3.1-8B-Instruct.jinja", "Cutting Knowledge Date")])
def test_default_system_blocks_render_only_without_a_system_message(name, default_system):
    from swiftbox.export.llamacpp import modelfile as M

    template = (TEMPLATES / name).read_text()
    special = {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"}
    p, go = M.translate(template, special)
    assert default_system in p.default_block and go.startswith("{{ if not .System }}" + p.default_block)
    for conv in (EXTRA_CONVERSATION, EXTRA_CONVERSATION[1:]):
        want = _jinja(template, conv, special)
        assert M.simulate(p, conv) == want[len(p.bos):]


def test_llama3_stops_at_eot_and_leaves_begin_of_text_to_llamacpp():
    from swiftbox.export.llamacpp import modelfile as M

    p, go = M.translate((TEMPLATES / "meta-llama-Llama-3.1-8B-Instruct.jinja").read_text(),
                        {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"})
    assert p.bos == "<|begin_of_text|>" and "<|begin_of_text|>" not in go
    assert p.assistant == ("<|start_header_id|>assistant<|end_header_id|>\n\n", "<|eot_id|>")
    assert p.generation == "<|start_header_id|>assistant<|end_header_id|>\n\n"


def test_smollm2_keeps_its_first_im_start_where_the_gguf_adds_no_bos():
    """SmolLM2's bos_token is `<|im_start|>`, the opener of its first turn, and its GGUF says add_bos_token false:
    the TEMPLATE must write that text itself (left out, Ollama saw "system\nYou are ..." with no turn opener)."""
    from swiftbox.export.llamacpp import modelfile as M

    template = (TEMPLATES / "HuggingFaceTB-SmolLM2-135M-Instruct.jinja").read_text()
    special = {"bos_token": "<|im_start|>", "eos_token": "<|im_end|>"}
    p, go = M.translate(template, special, strip_bos=False)
    assert p.bos == "" and go.startswith("{{ if not .System }}<|im_start|>system\nYou are a helpful AI assistant")
    assert '{{ if eq .Role "system" }}<|im_start|>system\n{{ .Content }}' in go
    for conv in (EXTRA_CONVERSATION, EXTRA_CONVERSATION[1:]):
        assert M.simulate(p, conv) == _jinja(template, conv, special)        # every character, the first included
    stripped, _ = M.translate(template, special)                            # a runtime that adds BOS: left to it
    assert stripped.bos == "<|im_start|>" and stripped.default_block.startswith("system\n")


def test_the_modelfile_follows_the_ggufs_add_bos_token(tmp_path):
    from swiftbox.export.llamacpp import gguf_file
    from swiftbox.export.llamacpp import modelfile as M

    class Tok:
        chat_template = (TEMPLATES / "HuggingFaceTB-SmolLM2-135M-Instruct.jinja").read_text()
        bos_token, eos_token, eos_token_id = "<|im_start|>", "<|im_end|>", 2

        def convert_ids_to_tokens(self, i):
            return "<|im_end|>"

    no_bos = M.build("m-q8_0.gguf", Tok(), tmp_path, adds_bos=False)[0].text()
    assert 'TEMPLATE """{{ if not .System }}<|im_start|>system\n' in no_bos
    for adds in (True, None):
        assert 'TEMPLATE """{{ if not .System }}system\n' in M.build("m.gguf", Tok(), tmp_path, adds_bos=adds)[0].text()
    info = gguf_file.GGUFInfo(tmp_path / "m.gguf", 3, "llama", 7, "model", 0, 0)
    assert info.adds_bos is None
    info.meta["tokenizer.ggml.add_bos_token"] = False
    assert info.adds_bos is False


def test_templates_that_do_not_decompose_get_no_template_and_say_why(tmp_path):
    from swiftbox.export.llamacpp import modelfile as M

    mistral = (TEMPLATES / "mistralai-Mistral-Nemo-Instruct-2407.jinja").read_text()
    with pytest.raises(M.NotDecomposable):
        M.translate(mistral, {"bos_token": "<s>", "eos_token": "</s>"})

    class Tok:
        chat_template, bos_token, eos_token, eos_token_id = mistral, "<s>", "</s>", 2

        def convert_ids_to_tokens(self, i):
            return "</s>"

    mf, facts = M.build("m-q8_0.gguf", Tok(), tmp_path)
    text = mf.text()
    assert 'TEMPLATE """' not in text and 'PARAMETER stop "</s>"' in text
    assert "# no TEMPLATE: the template does not render the content of a system" in text
    assert facts["template"].startswith("no TEMPLATE")


def test_a_template_ending_chats_with_eos_and_one_without_a_system_role_still_translate():
    from swiftbox.export.llamacpp import modelfile as M

    phi, _ = M.translate((TEMPLATES / "microsoft-Phi-3.5-mini-instruct.jinja").read_text(),
                         {"bos_token": "<s>", "eos_token": "<|endoftext|>"})
    assert phi.assistant[1] == "<|end|>\n"           # not "<|end|>\n<|endoftext|>"
    gemma, go = M.translate((TEMPLATES / "google-gemma-2-2b-it.jinja").read_text(),
                            {"bos_token": "<bos>", "eos_token": "<eos>"})
    assert gemma.system is None and '"system"' not in go and gemma.generation == "<start_of_turn>model\n"


def test_modelfile_text_from_the_toy(toy_dir, tmp_path):
    from transformers import AutoTokenizer

    from swiftbox.export.llamacpp import modelfile as M

    tok = AutoTokenizer.from_pretrained(toy_dir)
    mf, facts = M.build("toy-q8_0.gguf", tok, toy_dir)
    lines = mf.text().splitlines()
    assert lines[1] == "FROM ./toy-q8_0.gguf" and lines[2].startswith('TEMPLATE """{{ if not .System }}')
    assert 'PARAMETER stop "<|im_end|>"' in lines
    assert "PARAMETER temperature 0" in lines           # the toy's generation config does not sample
    assert facts["template"] == "translated"
    gen = {"do_sample": True, "temperature": 0.6, "top_p": 0.9, "repetition_penalty": 1.1}
    assert M.parameters(gen) == [("temperature", 0.6), ("top_p", 0.9), ("repeat_penalty", 1.1)]
    adapter = M.Modelfile("base-f16.gguf", None, ["<|im_end|>"], [], None, "lora-f16.gguf").text()
    assert "FROM ./base-f16.gguf\nADAPTER ./lora-f16.gguf\n" in adapter


# -- GGUF files and verify's file checks -----------------------------------------------------------------------
def test_header_reader_counts_tensor_types_and_finds_tokenizer_and_template(tmp_path):
    from swiftbox.export.llamacpp import gguf_file

    info = gguf_file.read(write_gguf(tmp_path / "m.gguf"))
    assert info.architecture == "llama" and info.general_type == "model" and info.tokens == 8
    assert info.type_counts == {"Q8_0": 4, "F32": 2} and info.tensor_count == info.header_tensor_count == 6
    assert set(info.weight_tensors()) == {f"blk.{i}.{n}.weight" for i in (0, 1) for n in ("attn_q", "ffn_down")}
    assert info.chat_template == CHATML
    broken = tmp_path / "cut.gguf"
    broken.write_bytes((tmp_path / "m.gguf").read_bytes()[:200])
    with pytest.raises(ValueError, match="cut.gguf is not a readable GGUF"):
        gguf_file.read(broken)


def test_tensor_inspection_requires_the_type_asked_for(tmp_path):
    from swiftbox.export.llamacpp import gguf_file
    from swiftbox.export.writers.gguf import inspect

    q8 = gguf_file.read(write_gguf(tmp_path / "q8.gguf"))
    f16 = gguf_file.read(write_gguf(tmp_path / "f16.gguf", weight_type="F16"))
    assert inspect(q8, "q8_0")["quantized_modules"] == 4 and inspect(q8, "q4_k_m")["quantized_modules"] == 4
    assert inspect(f16, "f16")["quantized_modules"] == 4
    silent = inspect(f16, "q8_0")           # a "q8_0" export that kept 16-bit weights fails
    assert silent["quantized_modules"] == 0 and silent["unquantized"]


def test_verify_file_checks_on_a_gguf_export(tmp_path):
    from swiftbox.verify.gguf import check_files
    from swiftbox.verify.report import Report

    out = tmp_path / "export"
    out.mkdir()
    write_gguf(out / "m-q8_0.gguf")
    (out / "Modelfile").write_text('FROM ./m-q8_0.gguf\nTEMPLATE """x"""\nPARAMETER stop "<|im_end|>"\n')
    report = Report(str(out), "llama.cpp")
    assert check_files(report, out / "m-q8_0.gguf", None, {"type": "q8_0"}, out) is not None
    assert report.ok, [c.line() for c in report.failures]
    assert [c.name for c in report.checks] == ["m-q8_0.gguf: header", "m-q8_0.gguf: q8_0 weights",
                                               "m-q8_0.gguf: tokenizer", "m-q8_0.gguf: chat template", "Modelfile"]

    write_gguf(out / "m-q8_0.gguf", template=None, weight_type="F16")
    (out / "Modelfile").write_text("FROM ./gone.gguf\n")
    report = Report(str(out), "llama.cpp")
    check_files(report, out / "m-q8_0.gguf", None, {"type": "q8_0"}, out)
    failed = {c.name: c.detail for c in report.failures}
    assert "4 decoder weight(s) are not q8_0" in failed["m-q8_0.gguf: q8_0 weights"]
    assert "no tokenizer.chat_template" in failed["m-q8_0.gguf: chat template"]
    assert "gone.gguf, which is not there" in failed["Modelfile"]


def test_verify_checks_a_gguf_lora_is_an_adapter(tmp_path):
    from swiftbox.verify.gguf import check_files
    from swiftbox.verify.report import Report

    base, lora = write_gguf(tmp_path / "b.gguf"), write_gguf(tmp_path / "l.gguf", adapter=True, weight_type="F16")
    report = Report(str(tmp_path), "llama.cpp")
    check_files(report, base, lora, {}, None)
    assert report.ok and "GGUF LoRA, 6 tensors, alpha 16.0" in report.checks[-1].detail
    report = Report(str(tmp_path), "llama.cpp")
    check_files(report, base, base, {}, None)     # a model where the LoRA should be
    assert report.failures[0].name == "b.gguf: LoRA"


# -- the step: types, refusals --------------------------------------------------------------------------------
def test_gguf_types_and_bits():
    from pydantic import ValidationError

    from swiftbox.steps import QuantizeStep as Q

    assert (Q(method="gguf").type, Q(method="gguf").bits) == ("q8_0", 8)
    assert Q(method="gguf", bits=4).type == "q4_k_m" and Q(method="gguf", bits=16).type == "f16"
    assert Q(method="gguf", type="q6_k").bits == 6 and Q(method="gguf", adapter_only=True).type == "f16"
    for bad, why in [({"method": "gguf", "bits": 4, "type": "q8_0"}, "contradicts"),
                     ({"method": "gptq", "type": "q8_0"}, "applies to method gguf only"),
                     ({"method": "awq", "adapter_only": True}, "applies to method gguf only"),
                     ({"method": "gguf", "type": "q3_k"}, "q4_k_m"), ({"method": "gguf", "bits": 3}, "16")]:
        with pytest.raises(ValidationError, match=why):
            Q(**bad)


def test_cli_refuses_a_gguf_type_mismatch_in_one_line(cli, toy_dir, tmp_path):
    res = cli("quantize", str(toy_dir), "--method", "gguf", "--type", "q4_k_m", "--bits", "8", "--output",
              str(tmp_path / "g"))
    assert res.returncode == 2 and "contradicts gguf type q4_k_m" in one_line_error(res)
    assert not (tmp_path / "g").exists()


def test_missing_llama_cpp_is_exit_3_naming_the_extra(monkeypatch):
    from swiftbox.device import base, current_platform
    from swiftbox.errors import Unsupported

    monkeypatch.setattr(base, "_importable", lambda pkg: pkg != "llama_cpp")
    with pytest.raises(Unsupported, match="SWIFTBOX_EXTRAS=quant,serve,dev,gguf ./install.sh"):
        current_platform("cpu").require("gguf")
    monkeypatch.setattr(base, "_importable", lambda pkg: True)
    assert current_platform("cpu").supports("gguf")


def _tree(folder: Path, archs: list[str]) -> Path:
    (folder / "conversion").mkdir(parents=True)
    (folder / "convert_hf_to_gguf.py").write_text("")
    (folder / "conversion" / "__init__.py").write_text(
        "TEXT_MODEL_MAP: dict[str, str] = {" + ", ".join(f'"{a}": "x"' for a in archs) + "}\n")
    return folder


def test_unknown_architecture_is_exit_3_naming_it_and_the_alternative(tmp_path, toy_dir):
    from swiftbox.errors import Unsupported
    from swiftbox.export.llamacpp import convert

    tree = _tree(tmp_path / "tree", ["LlamaForCausalLM", "Qwen2ForCausalLM"])
    assert convert.converter_architectures(tree) == {"LlamaForCausalLM", "Qwen2ForCausalLM"}
    assert convert.check_architecture(toy_dir, tree) == "Qwen2ForCausalLM"
    odd = tmp_path / "odd"
    odd.mkdir()
    (odd / "config.json").write_text(json.dumps({"architectures": ["FancyNewForCausalLM"]}))
    with pytest.raises(Unsupported, match="does not know the architecture FancyNewForCausalLM.*gptq, awq or bnb"):
        convert.check_architecture(odd, tree)
    old = tmp_path / "old"
    old.mkdir()
    (old / "convert_hf_to_gguf.py").write_text('@ModelBase.register("GPT2LMHeadModel", "X")\nclass A: pass\n')
    assert convert.converter_architectures(old) == {"GPT2LMHeadModel", "X"}


def test_real_converter_table_lists_the_toy_and_the_real_model_architectures():
    from swiftbox.export.llamacpp import convert, tree

    found = tree()
    if found is None:
        pytest.skip("llama.cpp's tree is not cached here (python -m swiftbox.export.llamacpp.setup --tree-only)")
    archs = convert.converter_architectures(found)
    assert {"Qwen2ForCausalLM", "LlamaForCausalLM"} <= archs and len(archs) > 100


def test_pre_tokenizer_is_named_only_when_tokenizer_json_shows_one_llamacpp_has(tmp_path, toy_dir):
    from swiftbox.export.llamacpp.convert import pre_tokenizer_of

    assert pre_tokenizer_of(toy_dir) == "smollm"    # single digits, then the GPT-2 byte-level split
    spec = json.loads((toy_dir / "tokenizer.json").read_text())
    cases = {"gpt-2": {**spec, "pre_tokenizer": spec["pre_tokenizer"]["pretokenizers"][1]},
             None: {**spec, "normalizer": {"type": "NFC"}}}
    cases["none2"] = {**spec, "pre_tokenizer": {"type": "Metaspace"}}
    for want, content in cases.items():
        folder = tmp_path / str(want)
        folder.mkdir()
        (folder / "tokenizer.json").write_text(json.dumps(content))
        assert pre_tokenizer_of(folder) == (None if want == "none2" else want)


def test_adapter_inputs_are_refused_with_the_way_forward(tmp_path, toy_dir, monkeypatch):
    from swiftbox.errors import Unsupported, UserError
    from swiftbox.export.writers import gguf_adapter
    from swiftbox.steps import QuantizeStep

    lora = make_adapter(toy_dir, tmp_path / "lora")
    with pytest.raises(UserError, match="merge first.*--adapter-only"):
        gguf_adapter.check(QuantizeStep(method="gguf"), str(lora))
    with pytest.raises(UserError, match="is a full model, not a LoRA adapter"):
        gguf_adapter.check_adapter(QuantizeStep(method="gguf", adapter_only=True), str(toy_dir))
    with pytest.raises(UserError, match="type q4_k_m is not available for a GGUF LoRA"):
        gguf_adapter.check_adapter(QuantizeStep(method="gguf", adapter_only=True, type="q4_k_m"), str(lora))
    dora = tmp_path / "dora"           # the same adapter, declared DoRA (what a DoRA run's config says)
    shutil.copytree(lora, dora)
    config = json.loads((dora / "adapter_config.json").read_text())
    (dora / "adapter_config.json").write_text(json.dumps({**config, "use_dora": True}))
    with pytest.raises(Unsupported, match="DoRA.*merge it"):
        gguf_adapter.check_adapter(QuantizeStep(method="gguf", adapter_only=True), str(dora))
    assert gguf_adapter.check_adapter(QuantizeStep(method="gguf", adapter_only=True), str(lora)).adapters == [lora]


@pytest.fixture
def gguf_here(tmp_path, monkeypatch):
    """This machine as one with the gguf extra, for the step's check alone: an importable (empty) `llama_cpp` and a
    llama.cpp tree whose converter table lists `archs` (nothing here converts or runs a model)."""
    fake = tmp_path / "site"
    (fake / "llama_cpp").mkdir(parents=True)
    (fake / "llama_cpp" / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(fake))

    def with_archs(*archs: str) -> Path:
        folder = tmp_path / f"tree-{len(archs)}-{'-'.join(archs)}"
        if not folder.exists():
            _tree(folder, list(archs))
        monkeypatch.setenv("SWIFTBOX_LLAMA_CPP_DIR", str(folder))
        return folder

    return with_archs


def test_every_gguf_input_refusal_comes_before_any_output(tmp_path, toy_dir, gguf_here, monkeypatch):
    """The gguf method's input refusals live in the step's check: each exits 2/3 through the runner with neither
    <out> nor <out>.partial created and the writer never called, and the same refusal comes from the pipeline's
    check alone, with no step context."""
    import swiftbox as sb
    from swiftbox.device import current_platform
    from swiftbox.errors import Unsupported, UserError
    from swiftbox.export.writers import gguf_adapter
    from swiftbox.pipelines import load_pipeline
    from swiftbox.steps import QuantizeStep

    def reached(cfg, ctx):
        raise AssertionError(f"run reached for {ctx.input} (its refusal belongs to check)")

    monkeypatch.setattr(gguf_adapter, "run_step", reached)

    lora = make_adapter(toy_dir, tmp_path / "lora")
    dora = tmp_path / "dora"
    shutil.copytree(lora, dora)
    config = json.loads((dora / "adapter_config.json").read_text())
    (dora / "adapter_config.json").write_text(json.dumps({**config, "use_dora": True}))
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(b"GGUF" + b"\0" * 12)
    gguf_here("Qwen2ForCausalLM")
    cases = [   # (input, settings, the refusal, its exit code)
        (str(lora), {}, "is an adapter, not a full model; merge first", 2),
        (str(toy_dir), {"adapter_only": True}, "is a full model, not a LoRA adapter", 2),
        (str(lora), {"adapter_only": True, "type": "q4_k_m"}, "type q4_k_m is not available for a GGUF LoRA", 2),
        (str(dora), {"adapter_only": True}, "cannot be a GGUF LoRA: .*DoRA", 3),
        (str(toy_dir), {"dataset": str(tmp_path / "nope.jsonl")}, "calibration file .*nope.jsonl not found", 2),
        (str(broken), {}, "broken.gguf: not a readable GGUF file", 2),
        (str(toy_dir), {"unknown_arch": True}, "does not know the architecture Qwen2ForCausalLM", 3),
        (str(lora), {"adapter_only": True, "unknown_arch": True}, "does not know the architecture Qwen2ForCausalLM",
         3),
    ]
    for i, (ref, settings, refusal, code) in enumerate(cases):
        settings = dict(settings)
        gguf_here("LlamaForCausalLM") if settings.pop("unknown_arch", False) else gguf_here("Qwen2ForCausalLM")
        out = tmp_path / f"out{i}"
        with pytest.raises((UserError, Unsupported), match=refusal) as err:
            sb.quantize(ref, method="gguf", output=str(out), device="cpu", **settings)
        assert err.value.exit_code == code, (ref, settings)
        assert not out.exists() and not out.with_name(out.name + ".partial").exists(), (ref, settings)
        with pytest.raises((UserError, Unsupported), match=refusal):
            load_pipeline("quantize").check(QuantizeStep(method="gguf", **settings), current_platform("cpu"), ref)


def test_gate_fails_on_tokenizer_disagreement_and_nan():
    from swiftbox.export.writers.gguf import TOLERANCES, gate

    ok = {"quantized_modules": 4, "linear_modules": 4, "unquantized": [], "error": None}
    tol = {**TOLERANCES[8], "max_size_ratio": 0.4}
    good = {"size_ratio": 0.3, "perplexity_ratio": 1.0, "cosine_mean": 0.999, "argmax_agreement": 0.97,
            "greedy_agreement": 0.8, "tokenizer_agreement": 1.0}
    assert gate(good, ok, tol) == []
    broken = gate({**good, "tokenizer_agreement": 0.5, "tokenizer_first_diff": "12345"}, ok, tol)
    assert len(broken) == 1 and "tokenizes 50% of the texts differently" in broken[0] and "12345" in broken[0]
    assert gate({**good, "greedy_agreement": float("nan")}, ok, tol)[0].startswith("greedy_agreement nan")


# -- setup: the cached tree, the built wheel, install.sh ----------------------------------------------------------
def test_setup_unpacks_the_sdist_once_and_reuses_a_built_wheel(tmp_path, monkeypatch):
    from swiftbox.export import llamacpp
    from swiftbox.export.llamacpp import setup

    monkeypatch.setenv("SWIFTBOX_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("SWIFTBOX_LLAMA_CPP_DIR", raising=False)
    folder = llamacpp.cache_dir()
    folder.mkdir(parents=True)
    top = tmp_path / f"llama_cpp_python-{llamacpp.LLAMA_CPP_VERSION}"
    (top / "vendor" / "llama.cpp").mkdir(parents=True)
    (top / "vendor" / "llama.cpp" / "convert_hf_to_gguf.py").write_text("# converter\n")
    with tarfile.open(folder / setup.SDIST, "w:gz") as archive:
        archive.add(top, arcname=top.name)
    assert llamacpp.tree() is None
    monkeypatch.setattr(setup, "_pip", lambda *a, **k: pytest.fail("nothing to download or build"))
    src = setup.unpack(folder)
    assert llamacpp.tree() == src / "vendor" / "llama.cpp" and not (folder / "src.partial").exists()
    wheel = folder / "wheels" / f"llama_cpp_python-{llamacpp.LLAMA_CPP_VERSION}-py3-none-linux_x86_64.whl"
    wheel.parent.mkdir()
    wheel.write_bytes(b"")
    assert setup.build(folder) == wheel
    monkeypatch.setenv("SWIFTBOX_LLAMA_CPP_DIR", str(tmp_path / "elsewhere"))
    assert llamacpp.tree() is None


def test_install_sh_builds_llama_cpp_first_for_the_gguf_extra(tmp_path):
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "PIP_CONFIG_FILE": "/dev/null", "SWIFTBOX_ACCEL": "cpu",
           "SWIFTBOX_INSTALL_DRY": "1", "SWIFTBOX_VENV": str(tmp_path / "v"), "SWIFTBOX_TORCH_INDEX": "pip"}
    plain = subprocess.run(["bash", str(ROOT / "install.sh")], capture_output=True, text=True, timeout=120,
                           env={**env, "SWIFTBOX_EXTRAS": "quant,serve,dev"}, check=False)
    gguf = subprocess.run(["bash", str(ROOT / "install.sh")], capture_output=True, text=True, timeout=120,
                          env={**env, "SWIFTBOX_EXTRAS": "quant,serve,dev,gguf"}, check=False)
    assert plain.returncode == gguf.returncode == 0, gguf.stderr
    assert "swiftbox.export.llamacpp.setup" not in plain.stdout
    assert "-m swiftbox.export.llamacpp.setup --constraints" in gguf.stdout
    extras = (ROOT / "pyproject.toml").read_text()
    assert 'gguf = ["gguf==0.19.0", "sentencepiece>=0.2", "llama-cpp-python==0.3.36"]' in extras


def test_menu_greys_gguf_with_the_reason_and_never_offers_an_export_to_chat(monkeypatch, tmp_path):
    from menus import artifacts
    from menus.device_info import collect
    from swiftbox.device import base

    monkeypatch.setattr(base, "_importable", lambda pkg: pkg != "llama_cpp")
    assert "SWIFTBOX_EXTRAS=quant,serve,dev,gguf" in collect().why_not("gguf")
    export = artifacts.Artifact(path=str(tmp_path), kind="quantize", artifact="gguf", base_model=None, mtime=0,
                                metrics={})
    assert "llama.cpp / Ollama" in artifacts.refusal(export, "chat")

"""The version check against compat_matrix.json, with injected versions: matching sets, one-off sets,
unknown CANN; CANN read from its version file; doctor showing every reason and the fix (also as JSON)."""
from __future__ import annotations

import json

import pytest

from swiftbox.device import compat_matrix as cm
from swiftbox.device import doctor as doctor_mod
from tests.conftest import run_cli

MATRIX = cm.load()


def statuses(findings) -> dict[str, str]:
    return {f.component: f.status for f in findings}


def only(findings, status):
    return [f for f in findings if f.status == status]


def test_every_row_names_a_source_that_exists_and_the_sources_say_where_they_are():
    for table in ("npu_torch", "npu_vllm", "cuda_vllm", "floors"):
        for row in MATRIX[table]:
            assert row["source"] is None or row["source"] in MATRIX["sources"], row
    for source in MATRIX["sources"].values():
        assert source.get("url") or (source.get("repo") and source.get("path")), source
    # the newest vllm-ascend final release and the torch_npu rows it relies on are present
    newest = MATRIX["npu_vllm"][0]
    assert {"vllm_ascend": "0.23.0", "cann": "9.1.0", "torch_npu": "2.10.0.post4"}.items() <= newest.items()
    assert any(r["torch_npu"] == "2.10.0.post4" and r["cann"] == "9.1.0" for r in MATRIX["npu_torch"])


def test_matching_npu_set_is_ok():
    v = {"cann": "9.1.0", "torch": "2.10.0+cpu", "torch_npu": "2.10.0.post4", "vllm": "0.23.0",
         "vllm_ascend": "0.23.0", "triton_ascend": "3.2.2"}
    findings = cm.check(v, "npu", MATRIX)
    assert not only(findings, "error") and not only(findings, "warn"), findings
    assert statuses(findings)["torch_npu"] == "ok" and statuses(findings)["vllm_ascend"] == "ok"


def test_torch_one_off_from_torch_npu_says_which_torch_to_install():
    v = {"cann": "9.1.0", "torch": "2.11.0", "torch_npu": "2.10.0.post4"}
    errors = only(cm.check(v, "npu", MATRIX), "error")
    assert len(errors) == 1 and errors[0].component == "torch"
    assert errors[0].message == "torch_npu 2.10.0.post4 needs torch 2.10.0, found 2.11.0"
    # keeping torch 2.11 is possible too: CANN 9.1.0 has a torch_npu for it
    assert errors[0].fix == "pip install torch==2.10.0  (or keep torch 2.11.0: pip install torch_npu==2.11.0)"


def test_torch_npu_built_for_another_cann_names_the_one_for_this_cann():
    v = {"cann": "8.5.0", "torch": "2.10.0", "torch_npu": "2.10.0.post4"}
    errors = only(cm.check(v, "npu", MATRIX), "error")
    assert [e.component for e in errors] == ["torch_npu"]
    assert "built for CANN 9.1.0; this machine has CANN 8.5.0" in errors[0].message
    # no torch_npu for torch 2.10 on CANN 8.5.0: the newest set for that CANN
    assert errors[0].fix == "pip install torch==2.9.0 torch_npu==2.9.0"


def test_vllm_ascend_one_off_vllm_and_missing_triton():
    v = {"cann": "9.1.0", "torch": "2.10.0", "torch_npu": "2.10.0.post4", "vllm": "0.22.1", "vllm_ascend": "0.23.0"}
    findings = cm.check(v, "npu", MATRIX)
    vllm = next(f for f in findings if f.component == "vllm")
    assert vllm.status == "error" and vllm.fix == "pip install vllm==0.23.0"
    triton = next(f for f in findings if f.component == "triton_ascend")
    assert triton.status == "warn" and triton.fix == "pip install triton-ascend==3.2.2"


def test_vllm_without_vllm_ascend_on_npu():
    v = {"cann": "9.0.0", "torch": "2.10.0", "torch_npu": "2.10.0", "vllm": "0.21.0"}
    f = next(f for f in cm.check(v, "npu", MATRIX) if f.component == "vllm_ascend")
    assert f.status == "error" and f.fix == "pip install vllm-ascend==0.21.0rc1"


def test_unknown_cann_is_said_not_guessed():
    findings = cm.check({"cann": "5.0.1", "torch": "2.10.0", "torch_npu": "2.10.0.post4"}, "npu", MATRIX)
    cann = next(f for f in findings if f.component == "cann")
    assert cann.status == "unknown" and "CANN 5.0.1 is not in the table" in cann.message
    assert not any("built for CANN" in f.message for f in findings)  # no fix invented against an unknown CANN


def test_missing_cann_and_missing_torch_npu():
    findings = cm.check({"cann": None, "cann_where": "no ascend_toolkit_install.info found", "torch": "2.9.0",
                         "torch_npu": None}, "npu", MATRIX)
    assert statuses(findings)["cann"] == "unknown"
    assert statuses(findings)["torch_npu"] == "error"


def test_cuda_vllm_against_torch_and_floors():
    bad = cm.check({"torch": "2.11.0", "vllm": "0.29.0", "bitsandbytes": "0.45.0"}, "cuda", MATRIX)
    vllm = next(f for f in bad if f.component == "vllm")
    assert vllm.status == "error"
    assert vllm.fix == "pip install torch==2.13.0  (or keep torch 2.11.0: pip install vllm==0.26.0)"
    bnb = next(f for f in bad if f.component == "bitsandbytes")
    assert bnb.status == "error" and bnb.fix == "pip install 'bitsandbytes>=0.46.1'"
    good = cm.check({"torch": "2.13.0+cu130", "vllm": "0.29.0", "bitsandbytes": "0.50.2"}, "cuda", MATRIX)
    assert not only(good, "error")
    assert statuses(cm.check({"torch": "2.13.0", "vllm": "0.27.3"}, "cuda", MATRIX))["vllm"] == "unknown"


def test_cann_version_read_from_the_toolkit_info_file(tmp_path, monkeypatch):
    monkeypatch.delenv("SWIFTBOX_CANN_VERSION", raising=False)
    info = tmp_path / "ascend_toolkit_install.info"
    info.write_text("package_name=Ascend-cann-toolkit\nversion=8.3.RC2\ninnerversion=V100R001C23\n")
    assert cm.cann_version([str(tmp_path / "missing.info"), str(info)]) == ("8.3.RC2", str(info))
    assert cm.cann_version([str(tmp_path / "missing.info")])[0] is None
    monkeypatch.setenv("ASCEND_TOOLKIT_HOME", str(tmp_path))
    assert cm.cann_version()[0] == "8.3.RC2"
    assert cm.cann_key("8.0.rc1.alpha003") == "8.0.RC1"


def test_pins_script_for_install_sh(capsys):
    assert cm.main(["pins", "9.0.0"]) == 0
    assert capsys.readouterr().out.strip() == "torch==2.9.0 torch_npu==2.9.0.post2"
    assert cm.main(["pins", "1.0"]) == 1
    assert cm.npu_pins("8.5.1") == ["torch==2.9.0", "torch_npu==2.9.0"]  # only vllm-ascend's table has 8.5.1
    assert cm.main(["pins", "9.1.0", "--vllm"]) == 0
    assert capsys.readouterr().out.split() == ["torch==2.10.0", "torch_npu==2.10.0.post4", "vllm==0.23.0",
                                               "vllm-ascend==0.23.0", "triton-ascend==3.2.2"]


def test_doctor_shows_each_unavailable_reason_and_the_fix(monkeypatch, capsys):
    from swiftbox import device

    def boom():
        raise RuntimeError("driver exploded")

    monkeypatch.setattr(device.CudaPlatform, "is_available", classmethod(lambda cls: boom()))
    versions = {"torch": "2.11.0", "torch_npu": "2.10.0.post4", "cann": "9.1.0", "cann_where": "/x/info"}
    assert doctor_mod.doctor(as_json=True, device="cpu", versions=versions) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["unavailable"]["cuda"] == "detector raised RuntimeError: driver exploded"
    assert info["unavailable"]["npu"]  # torch_npu is not installed here: said, not dropped
    assert info["compatible"] is False
    assert any(f["fix"].startswith("pip install torch==2.10.0") for f in info["compatibility"])


@pytest.mark.parametrize("args", [["doctor"], ["models"]])
def test_tables_piped_keep_whole_values(args):
    res = run_cli(*args, env={"COLUMNS": "80"})
    assert res.returncode == 0, res.stderr
    if args == ["models"]:
        assert "LLM-Research/Meta-Llama-3.1-8B-Instruct" in res.stdout
        assert "deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B" in res.stdout
    assert "…" not in res.stdout
    assert "\x1b[" not in res.stdout  # no colour codes into a pipe


def test_models_json():
    res = run_cli("models", "--json")
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    ids = {p["hf_id"] for p in data["presets"]}
    assert "meta-llama/Llama-3.1-8B-Instruct" in ids
    first = data["presets"][0]
    assert set(first["memory_gib"]) == {"full", "lora", "qlora", "infer"} and first["fits"]["qlora"] in (True, False)
    assert data["device"]["platform"] == "cpu"


def test_torch_flavour_from_metadata():
    from swiftbox.device.torch_flavour import flavour

    assert flavour("2.13.0+cpu", []) == "cpu"
    assert flavour("2.13.0+cu128", []) == "cuda"
    assert flavour("2.13.0+rocm6.4", []) == "rocm"
    # PyPI's plain version is the CUDA build: its requirements say so (torch 2.14.1's METADATA)
    cuda_reqs = ['cuda-toolkit[cublas,cudart]==13.0.3; platform_system == "Linux"',
                 'nvidia-cudnn-cu13==9.24.0.43; platform_system == "Linux"']
    assert flavour("2.14.1", cuda_reqs) == "cuda"
    assert flavour("2.14.1", ["filelock", "sympy>=1.13.3"]) == "cpu"


@pytest.mark.parametrize("args", [["models"], ["models", "--json"]])
def test_a_reader_that_leaves_early_is_not_an_error(args):
    import os
    import subprocess
    import sys

    from tests.conftest import ROOT

    proc = subprocess.Popen([sys.executable, "-m", "swiftbox", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    proc.stdout.close()  # like `| head` that has already gone: every write meets a closed pipe
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 0, err
    assert "Traceback" not in err and "BrokenPipe" not in err

"""The front door: --help is fast and torch-free, doctor works, the Python API mirrors the schema."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import ROOT, run_cli


def test_help_lists_every_command_without_importing_torch():
    code = ("import sys, io, contextlib; from swiftbox.cli import main\n"
            "buf = io.StringIO()\n"
            "with contextlib.redirect_stdout(buf):\n"
            "    try: main(['--help'])\n"
            "    except SystemExit: pass\n"
            "print(buf.getvalue()); print('TORCH' if 'torch' in sys.modules else 'NO-TORCH')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert out.stdout.strip().endswith("NO-TORCH")
    for command in ("run", "quickstart", "doctor", "test", "bench", "download", "sft", "dpo", "merge", "quantize",
                    "serve", "chat", "eval", "models", "parity"):
        assert command in out.stdout


def test_pipeline_help_comes_from_the_schema():
    out = run_cli("sft", "--help")
    assert out.returncode == 0
    for flag in ("--lora.rank", "--max-steps", "--method", "--resume", "--out"):
        assert flag in out.stdout


@pytest.mark.parametrize(("mode", "dtype"), [("off", "float32"), ("on", "bfloat16")])
def test_doctor_reports_cpu(mode, dtype, no_vllm_cpu):
    """doctor names the dtype the CPU computes in (fp32 without native bf16, bf16 with it: SWIFTBOX_CPU_BF16 forces
    either, so this holds on every CPU) and prints the dtype policy."""
    out = run_cli("doctor", "--json", env={**no_vllm_cpu, "SWIFTBOX_CPU_BF16": mode})
    assert out.returncode == 0, out.stderr
    info = json.loads(out.stdout)
    assert info["platform"] == "cpu" and info["dtype"] == dtype and info["dist_backend"] == "gloo"
    assert info["cpu_bf16"] == mode and info["env"]["SWIFTBOX_CPU_BF16"] == mode
    assert info["capabilities"]["vllm"].startswith("no - vLLM's CPU build")
    assert info["versions"]["torch"] != "not installed"
    assert info["lock"]["files"][0] == "swiftbox/constraints/common.txt" and isinstance(info["lock"]["differs"], list)
    policy = {row["step"]: row for row in info["dtype_policy"]}
    assert policy["merge"]["compute"] == policy["merge"]["check"] == "float32"
    assert policy["eval / serve / chat"]["compute"] == dtype
    table = run_cli("doctor", env={**no_vllm_cpu, "SWIFTBOX_CPU_BF16": mode})
    assert table.returncode == 0 and "capabilities" in table.stdout and "dtype policy" in table.stdout


def test_requesting_npu_on_this_machine_exits_3(tmp_path):
    out = run_cli("run", "recipes/quickstart.yaml", "--runs-root", str(tmp_path), env={"SWIFTBOX_DEVICE": "npu"})
    assert out.returncode == 3
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "npu" in lines[0] and "available: cpu" in lines[0]


def test_python_api_functions_carry_the_schema():
    import swiftbox

    assert swiftbox.sft.__name__ == "sft" and "lora" in swiftbox.sft.__doc__
    assert callable(swiftbox.run_recipe) and callable(swiftbox.eval)
    with pytest.raises(AttributeError):
        swiftbox.no_such_thing  # noqa: B018 - the attribute access is the test


def test_menu_without_a_terminal_says_so():
    out = run_cli(input="")
    assert out.returncode == 2 and "interactive terminal" in out.stderr


def test_devices_on_the_command_line_mean_what_they_mean_in_a_recipe():
    """`--devices 2` is two devices for sft and serve alike; `--devices 3,` is device id 3."""
    from swiftbox.cli import _settings_from_args, build_parser
    from swiftbox.device import Devices
    from swiftbox.steps import STEP_TYPES

    parser = build_parser()
    for kind, extra in (("sft", ["--dataset", "d.jsonl"]), ("serve", [])):
        for flag, want in (("2", Devices(count=2)), ("0,1", Devices(ids=(0, 1))), ("3,", Devices(ids=(3,)))):
            args, _ = parser.parse_known_args([kind, "toy", *extra, "--devices", flag])
            cfg = STEP_TYPES[kind].model_validate(_settings_from_args(args, STEP_TYPES[kind]))
            assert cfg.devices == want, (kind, flag)


def test_builtin_engine_refuses_devices_it_cannot_use(cli):
    res = cli("serve", "toy", "--engine", "builtin", "--devices", "2", "--smoke", timeout=120)
    assert res.returncode == 2 and "built-in engine runs on one device" in res.stderr.strip().splitlines()[-1]

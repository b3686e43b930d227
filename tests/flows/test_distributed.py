"""Multi-process training (issue 8): launch plans for simulated NPU / CUDA, refusals, and real torchrun runs.

Launching is the runner's decision (issue 27): for a pipeline declared `distributed` the runner asks
`launch.plan_for` and runs the workers, each of which runs the pipeline's `execute`. The mechanics run end to end
through a stand-in pipeline (tests/fakes/dist_standin.py: a real gloo all_reduce on 2 processes); the slow test trains
LoRA SFT on 2 processes for real.
"""
from __future__ import annotations

import importlib
import json
import os
import shlex
import sys
import time
from pathlib import Path

import pytest

from swiftbox.device import CpuPlatform, CudaPlatform, NpuPlatform, parse_devices
from swiftbox.errors import SwiftboxError, Unsupported, UserError
from swiftbox.runner import run_recipe
from swiftbox.steps import SftStep
from swiftbox.training.distributed import launch as distributed
from swiftbox.training.distributed.args import PRESETS, check_distributed, preset_path, training_arguments_extra
from swiftbox.training.distributed.launch import failure_error, plan_for, plan_launch
from tests.conftest import ROOT

DATA = str(ROOT / "recipes" / "data" / "parity_sft.jsonl")


def plan_here(cfg, platform, tmp_path, header_devices=None):
    """The launch plan the runner would make for this step (work dir <tmp>/out.partial)."""
    return plan_launch(cfg, platform, tmp_path / "out.partial", parse_devices(header_devices))


@pytest.fixture
def npu8(monkeypatch):
    monkeypatch.setattr(NpuPlatform, "device_count", lambda self: 8)
    monkeypatch.setattr(NpuPlatform, "device_name", lambda self, i=0: "Ascend910B2")
    return NpuPlatform()


@pytest.fixture
def cuda4(monkeypatch):
    monkeypatch.setattr(CudaPlatform, "device_count", lambda self: 4)
    monkeypatch.setattr(CudaPlatform, "device_name", lambda self, i=0: "NVIDIA H100")
    return CudaPlatform()


def flag(argv, name):
    return argv[argv.index(name) + 1]


# -- launch plans ------------------------------------------------------------------------------
@pytest.mark.parametrize("devices", ["0,1,2,3,4,5,6,7", 8, list(range(8))])
def test_npu_plan_two_nodes_of_eight(npu8, tmp_path, devices):
    cfg = SftStep(dataset=DATA, devices=devices, nnodes=2, node_rank=1, master_addr="10.0.0.1", master_port=29600)
    plan = plan_here(cfg, npu8, tmp_path)
    argv = plan.argv
    assert argv[1:3] == ["-m", "torch.distributed.run"]
    assert (flag(argv, "--nnodes"), flag(argv, "--node-rank"), flag(argv, "--nproc-per-node")) == ("2", "1", "8")
    assert (flag(argv, "--master-addr"), flag(argv, "--master-port")) == ("10.0.0.1", "29600")
    assert "--standalone" not in argv
    assert argv[-3:] == ["-m", "swiftbox.training.distributed.worker", str(tmp_path / "out.partial" / "launch.json")]
    assert plan.backend == "hccl" and plan.world_size == 16
    assert plan.env["ASCEND_RT_VISIBLE_DEVICES"] == "0,1,2,3,4,5,6,7"
    assert int(plan.env["HCCL_CONNECT_TIMEOUT"]) >= 600
    assert plan.env["SWIFTBOX_DEVICE"] == "npu"
    assert "CUDA_VISIBLE_DEVICES" not in plan.env
    line = plan.command_line()
    assert "ASCEND_RT_VISIBLE_DEVICES=0,1,2,3,4,5,6,7" in line and "HCCL_CONNECT_TIMEOUT=" in line
    assert shlex.split(line)[-len(argv):] == argv  # the printed line is exactly what runs


NPU_SIM_PLAN = """
import json, sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from tests.fakes.npu_sim import install_fake_npu
install_fake_npu("Ascend910B2", 8)
from swiftbox.device import current_platform
from swiftbox.training.distributed.launch import plan_launch
from swiftbox.steps import SftStep
cfg = SftStep(dataset="d.jsonl", devices=8, nnodes=2, node_rank=0, master_addr="10.0.0.1", master_port=29500)
plan = plan_launch(cfg, current_platform(), Path("w"))
print(json.dumps({"argv": plan.argv, "env": plan.env, "backend": plan.backend, "world": plan.world_size}))
"""


def test_npu_plan_under_the_simulated_torch_npu(tmp_path):
    """Detection through a fake torch_npu (8 x 910B2), not a monkeypatched class: the plan still holds."""
    import subprocess

    env = {k: v for k, v in os.environ.items() if k != "SWIFTBOX_DEVICE"}
    res = subprocess.run([sys.executable, "-c", NPU_SIM_PLAN, str(ROOT)], capture_output=True,
                         text=True, cwd=tmp_path, env=env, timeout=300)
    assert res.returncode == 0, res.stderr
    plan = json.loads(res.stdout.strip().splitlines()[-1])
    assert plan["backend"] == "hccl" and plan["world"] == 16
    assert plan["env"]["ASCEND_RT_VISIBLE_DEVICES"] == "0,1,2,3,4,5,6,7" and plan["env"]["SWIFTBOX_DEVICE"] == "npu"
    assert "HCCL_CONNECT_TIMEOUT" in plan["env"]
    argv = plan["argv"]
    assert (flag(argv, "--nnodes"), flag(argv, "--node-rank"), flag(argv, "--nproc-per-node")) == ("2", "0", "8")
    assert (flag(argv, "--master-addr"), flag(argv, "--master-port")) == ("10.0.0.1", "29500")


def test_npu_training_arguments_use_hccl(npu8, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "16")
    assert training_arguments_extra(SftStep(dataset=DATA, devices=8), npu8) == {"ddp_backend": "hccl"}


def test_each_rank_loads_onto_its_own_device(npu8, cuda4, deepspeed_installed, monkeypatch):
    from swiftbox.training.distributed.args import model_device_map

    monkeypatch.setenv("LOCAL_RANK", "3")
    assert model_device_map(SftStep(dataset=DATA), npu8) == npu8.device_map(3) == "npu:3"
    assert model_device_map(SftStep(dataset=DATA, deepspeed="zero2"), cuda4) == "cuda:3"
    assert model_device_map(SftStep(dataset=DATA, deepspeed="zero3"), cuda4) is None
    assert model_device_map(SftStep(dataset=DATA, fsdp="full_shard auto_wrap"), cuda4) is None
    assert model_device_map(SftStep(dataset=DATA), CpuPlatform()) == "cpu"


def test_npu_device_that_does_not_exist_is_bad_input(npu8, tmp_path):
    with pytest.raises(UserError, match="device 9 does not exist"):
        plan_here(SftStep(dataset=DATA, devices="0,9"), npu8, tmp_path)


def test_cuda_plan_one_node(cuda4, tmp_path, monkeypatch):
    plan = plan_here(SftStep(dataset=DATA, devices="2,3"), cuda4, tmp_path)
    assert plan.backend == "nccl" and plan.world_size == 2
    assert plan.env["CUDA_VISIBLE_DEVICES"] == "2,3" and plan.env["SWIFTBOX_DEVICE"] == "cuda"
    assert "ASCEND_RT_VISIBLE_DEVICES" not in plan.env and "HCCL_CONNECT_TIMEOUT" not in plan.env
    # one node on the default port: torchrun's standalone rendezvous picks a free port
    assert "--standalone" in plan.argv and flag(plan.argv, "--nproc-per-node") == "2"
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert training_arguments_extra(SftStep(dataset=DATA, devices=2), cuda4) == {"ddp_backend": "nccl"}


def test_one_process_on_another_card_goes_through_the_visible_env(cuda4, tmp_path):
    from swiftbox.training.distributed.launch import needs_launch

    cfg = SftStep(dataset=DATA, devices="3,")
    assert needs_launch(cfg, cuda4) and not needs_launch(cfg, CpuPlatform())
    assert not needs_launch(SftStep(dataset=DATA, devices=1), cuda4)
    assert plan_for(cfg, CpuPlatform(), None, tmp_path) is None        # one CPU process: the runner's own
    plan = plan_here(cfg, cuda4, tmp_path)
    assert plan.world_size == 1 and plan.env["CUDA_VISIBLE_DEVICES"] == "3"


def test_recipe_level_devices_count_too(cuda4, tmp_path):
    plan = plan_here(SftStep(dataset=DATA), cuda4, tmp_path, "0,1,2")
    assert plan.world_size == 3 and plan.env["CUDA_VISIBLE_DEVICES"] == "0,1,2"
    plan = plan_here(SftStep(dataset=DATA), cuda4, tmp_path, 2)
    assert plan.world_size == 2 and plan.env["CUDA_VISIBLE_DEVICES"] == "0,1"  # a count, as on the CLI
    plan = plan_here(SftStep(dataset=DATA, devices=[3]), cuda4, tmp_path, 2)
    assert plan.world_size == 1 and plan.env["CUDA_VISIBLE_DEVICES"] == "3"   # the step's own wins


def test_refusals_come_first_even_for_one_process(tmp_path):
    from swiftbox.pipelines import load_pipeline

    with pytest.raises(Unsupported, match="gloo"):
        load_pipeline("sft").check(SftStep(dataset=DATA, deepspeed="zero3"), CpuPlatform(), "toy")
    with pytest.raises(Unsupported, match="gloo"):
        run_recipe({"name": "r", "model": "toy", "steps": [{"sft": {"dataset": DATA, "deepspeed": "zero3"}}]},
                   runs_root=tmp_path)
    assert [p.name for p in (tmp_path / "r").iterdir()] == ["summary.json"]   # no sft.partial left behind


def test_one_process_runs_in_the_runner(tmp_path):
    assert plan_for(SftStep(dataset=DATA), CpuPlatform(), None, tmp_path) is None
    assert plan_for(SftStep(dataset=DATA, devices=1), CpuPlatform(), None, tmp_path) is None
    assert plan_for(SftStep(dataset=DATA), CpuPlatform(), parse_devices(1), tmp_path) is None
    assert plan_for(SftStep(dataset=DATA), CpuPlatform(), parse_devices(2), tmp_path).world_size == 2  # the header's
    assert training_arguments_extra(SftStep(dataset=DATA), CpuPlatform()) == {}


def test_swiftbox_under_a_foreign_torchrun_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(UserError, match="devices: N"):
        plan_for(SftStep(dataset=DATA, devices=2), CpuPlatform(), None, tmp_path)


@pytest.mark.parametrize("step,env,words", [
    ({"devices": 2}, {"WORLD_SIZE": "2"}, "started under torchrun directly"),
    ({"fsdp": "full_shard auto_wrap"}, {}, "this step runs one"),
])
def test_launch_refusals_come_before_the_output_exists(tmp_path, monkeypatch, step, env, words):
    """The runner asks for the launch plan before it makes <out>.partial: a refused launch leaves nothing."""
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    with pytest.raises(UserError, match=words):
        run_recipe({"name": "r", "model": "toy", "steps": [{"sft": {"dataset": DATA, **step}}]}, runs_root=tmp_path)
    assert [p.name for p in (tmp_path / "r").iterdir()] == ["summary.json"]


def test_training_pipelines_declare_that_they_run_on_n_processes():
    from swiftbox.pipelines import load_pipeline

    training = {"sft", "pt", "dpo", "kto", "orpo", "simpo", "rm", "grpo", "gkd"}
    for kind in ("sft", "pt", "dpo", "kto", "orpo", "simpo", "rm", "grpo", "gkd", "eval", "merge", "quantize",
                 "serve", "chat", "download"):
        pipeline = load_pipeline(kind)
        assert pipeline.distributed == (kind in training), kind
        assert pipeline.module == f"swiftbox.pipelines.{kind}"       # what a worker imports


def test_no_pipeline_relaunches_itself():
    """The launch is the runner's: no pipeline or training module names the launcher or a worker global."""
    for path in [*(ROOT / "swiftbox" / "pipelines").rglob("*.py"), *(ROOT / "swiftbox" / "training").glob("*.py")]:
        text = path.read_text()
        assert "maybe_relaunch" not in text and "_WORKER_SPEC" not in text, path
        assert "distributed.launch" not in text, path


# -- DeepSpeed configs and refusals -------------------------------------------------------------
def test_bundled_deepspeed_configs_are_auto():
    for name in PRESETS:
        data = json.loads((preset_path(name)).read_text())
        assert data["train_micro_batch_size_per_gpu"] == "auto" and data["gradient_accumulation_steps"] == "auto"
        assert data["zero_optimization"]["stage"] == (2 if name == "zero2" else 3)
    offload = json.loads((preset_path("zero3_offload")).read_text())["zero_optimization"]
    assert offload["offload_param"]["device"] == "cpu" and offload["offload_optimizer"]["device"] == "cpu"


@pytest.fixture
def deepspeed_installed(monkeypatch):
    from swiftbox.training.distributed import args as distributed_args

    real = distributed_args.package_version
    monkeypatch.setattr(distributed_args, "package_version",
                        lambda pkg: "0.16.0" if pkg == "deepspeed" else real(pkg))
    return distributed_args


def test_deepspeed_preset_goes_to_training_arguments(cuda4, deepspeed_installed, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "4")
    extra = training_arguments_extra(SftStep(dataset=DATA, devices=4, deepspeed="zero3"), cuda4)
    assert extra["ddp_backend"] == "nccl" and Path(extra["deepspeed"]) == preset_path("zero3")


def test_deepspeed_user_json(cuda4, deepspeed_installed, tmp_path):
    good = tmp_path / "ds.json"
    good.write_text(json.dumps({"zero_optimization": {"stage": 1}, "train_micro_batch_size_per_gpu": "auto"}))
    assert training_arguments_extra(SftStep(dataset=DATA, deepspeed=str(good)), cuda4)["deepspeed"] == str(good)
    bad = tmp_path / "bad.json"
    bad.write_text("{nope")
    with pytest.raises(UserError, match="not valid JSON"):
        check_distributed(SftStep(dataset=DATA, deepspeed=str(bad)), cuda4)
    with pytest.raises(UserError, match="neither a preset"):
        check_distributed(SftStep(dataset=DATA, deepspeed=str(tmp_path / "missing.json")), cuda4)


def test_deepspeed_on_cpu_names_gloo_ddp(tmp_path):
    with pytest.raises(Unsupported) as err:
        check_distributed(SftStep(dataset=DATA, devices=2, deepspeed="zero2"), CpuPlatform())
    assert err.value.exit_code == 3 and "gloo" in str(err.value) and "cpu" in str(err.value)


def test_deepspeed_not_installed_names_the_extra(cuda4, monkeypatch):
    from swiftbox.training.distributed import args as distributed_args

    monkeypatch.setattr(distributed_args, "package_version", lambda pkg: None)
    with pytest.raises(Unsupported, match=r"pip install 'swiftbox\[deepspeed\]'") as err:
        check_distributed(SftStep(dataset=DATA, devices=2, deepspeed="zero2"), cuda4)
    assert err.value.exit_code == 3


def test_qlora_with_zero3_follows_installed_versions(cuda4, deepspeed_installed, monkeypatch):
    cfg = SftStep(dataset=DATA, method="qlora", deepspeed="zero3")
    check_distributed(cfg, cuda4)  # today's versions shard 4-bit weights (bnb_4bit_quant_storage)
    from swiftbox.training.distributed.args import quantization_extra

    assert quantization_extra(cfg, "bfloat16") == {"bnb_4bit_quant_storage": "bfloat16"}
    assert quantization_extra(SftStep(dataset=DATA, method="qlora", deepspeed="zero2"), "bfloat16") == {}
    monkeypatch.setattr(deepspeed_installed, "package_version", lambda pkg: {"deepspeed": "0.16.0"}.get(pkg, "0.42.0"))
    with pytest.raises(Unsupported, match="qlora with ZeRO-3 needs bitsandbytes>=0.43.0"):
        check_distributed(cfg, cuda4)
    check_distributed(SftStep(dataset=DATA, method="qlora", deepspeed="zero2"), cuda4)


@pytest.mark.parametrize("settings,field", [
    ({"deepspeed": "zero2", "fsdp": "full_shard"}, "fsdp: deepspeed and fsdp are both set"),
    ({"nnodes": 2, "node_rank": 2}, "node_rank: 2 is not below nnodes (2)"),
    ({"devices": "0,x"}, "devices"),
    ({"devices": "2"}, "'2' is ambiguous: write 2 (no quotes) for 2 device(s), or '2,' / [2] for device id 2"),
    ({"deepspeed": "zero9"}, "deepspeed"),
    ({"fsdp": "shard_everything"}, "fsdp"),
])
def test_bad_distributed_settings_are_one_line_exit_2(tmp_path, settings, field):
    with pytest.raises(UserError) as err:
        run_recipe({"name": "r", "model": "toy", "steps": [{"sft": {"dataset": DATA, **settings}}]}, runs_root=tmp_path)
    assert err.value.exit_code == 2 and field in str(err.value) and "\n" not in str(err.value)


def test_cli_refuses_node_rank_beyond_nnodes(cli):
    res = cli("sft", "--model", "toy", "--dataset", DATA, "--nnodes", "2", "--node-rank", "5")
    assert res.returncode == 2, res.stderr
    assert "node_rank: 5 is not below nnodes (2)" in res.stderr and "Traceback" not in res.stderr


# -- failure reports -----------------------------------------------------------------------------
def torchrun_report(root_rank: int, root_code: int, other=(1, 1, 1)) -> list[str]:
    """The tail of torchrun's ChildFailedError report, as torch 2.x prints it."""
    block = """[{i}]:
  time      : 2026-11-21_05:00:00
  host      : node-b
  rank      : {rank} (local_rank: {local})
  exitcode  : {code} (pid: 4242)
  error_file: <N/A>
  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html"""
    text = ("torch.distributed.elastic.multiprocessing.errors.ChildFailedError:\n" + "=" * 60 +
            "\nswiftbox.training.distributed.worker FAILED\n" + "-" * 60 + "\nFailures:\n" +
            block.format(i=1, rank=other[0], local=other[1], code=other[2]) + "\n" + "-" * 60 +
            "\nRoot Cause (first observed failure):\n" +
            block.format(i=0, rank=root_rank, local=root_rank % 2, code=root_code) + "\n" + "=" * 60)
    return text.splitlines()


def test_failure_report_names_the_first_rank_to_fail_and_keeps_its_exit_class():
    marks = [distributed.worker_mark(3, 2, 100.5, "UserError: dataset: row 7 has no messages"),
             distributed.worker_mark(2, 1, 101.0, "RuntimeError: Connection closed by peer [10.0.0.2]:5000")]
    # torchrun "first observed" rank 2 (both died within its poll); the worker marks say rank 3 failed first
    err = failure_error(1, marks + torchrun_report(root_rank=2, root_code=1, other=(3, 1, 2)))
    assert isinstance(err, UserError) and err.exit_code == 2
    assert str(err) == ("distributed run failed: rank 3 (local_rank 1 on node-b): "
                        "UserError: dataset: row 7 has no messages")
    killed = failure_error(1, marks[1:] + torchrun_report(root_rank=3, root_code=-9, other=(2, 0, 1)))
    assert type(killed) is SwiftboxError and str(killed).startswith("distributed run failed: rank 3 (local_rank 1 on "
                                                                    "node-b): killed by signal 9")
    silent = failure_error(1, torchrun_report(root_rank=1, root_code=7, other=(0, 0, -15)))
    assert "rank 1 (local_rank 1 on node-b): exit code 7" in str(silent)
    early = failure_error(1, ["RuntimeError: The server socket has failed to listen on any local network address."])
    assert type(early) is SwiftboxError and "before any rank reported" in str(early)


# -- real torchrun, 2 gloo processes --------------------------------------------------------------
@pytest.fixture
def standin(monkeypatch):
    module = importlib.import_module("tests.fakes.dist_standin")
    monkeypatch.setattr("swiftbox.runner.load_pipeline", lambda kind: module.PIPELINE)
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    return module


def test_two_process_launch_end_to_end(standin, tmp_path, capfd):
    recipe = {"name": "d", "model": "toy", "steps": [{"sft": {"dataset": DATA, "devices": 2, "learning_rate": 0.001}}]}
    summary = run_recipe(recipe, runs_root=tmp_path)
    out = tmp_path / "d" / "sft"
    assert summary["steps"][0]["ok"] and summary["steps"][0]["metrics"]["world_size"] == 2
    written = json.loads((out / "standin.json").read_text())
    assert written == {"world_size": 2, "sum": 3.0, "input": "toy", "lr": 0.001}  # 1 + 2 summed across ranks
    manifest = json.loads((out / "swiftbox.json").read_text())
    assert manifest["metrics"] == {"allreduce_sum": 3.0, "world_size": 2} and manifest["artifact"] == "standin"
    dist = manifest["distributed"]
    assert (dist["world_size"], dist["nproc_per_node"], dist["backend"]) == (2, 2, "gloo")
    assert not (out / distributed.RESULT_FILE).exists() and (out / "launch.json").is_file()
    assert not (tmp_path / "d" / "sft.partial").exists()
    printed = capfd.readouterr().err
    assert "-m torch.distributed.run --standalone --nnodes 1 --nproc-per-node 2" in printed
    assert dist["command"] in printed


@pytest.mark.parametrize("kind,cls", [("crash", SwiftboxError), pytest.param("user", UserError, marks=pytest.mark.slow),
                                      pytest.param("kill", SwiftboxError, marks=pytest.mark.slow)])
def test_a_rank_failing_mid_run_ends_the_job_naming_it(standin, tmp_path, monkeypatch, kind, cls):
    monkeypatch.setenv("STANDIN_FAIL_RANK", "1")
    monkeypatch.setenv("STANDIN_FAIL_KIND", kind)
    started = time.time()
    with pytest.raises(SwiftboxError) as err:
        run_recipe({"name": "d", "model": "toy", "steps": [{"sft": {"dataset": DATA, "devices": 2}}]},
                   runs_root=tmp_path)
    assert type(err.value) is cls and time.time() - started < 120  # rank 0 was stopped, not left waiting
    message = str(err.value)
    assert message.startswith("distributed run failed: rank 1 (local_rank 1") and "\n" not in message
    assert {"crash": "simulated crash on rank 1", "user": "bad row seen on rank 1",
            "kill": "killed by signal 9"}[kind] in message
    assert not (tmp_path / "d" / "sft").exists()  # nothing committed
    summary = json.loads((tmp_path / "d" / "summary.json").read_text())
    assert summary["steps"][0]["ok"] is False and "rank 1" in summary["steps"][0]["error"]


def test_user_env_is_respected(npu8, tmp_path, monkeypatch):
    monkeypatch.setenv("HCCL_CONNECT_TIMEOUT", "3600")
    monkeypatch.setenv("ASCEND_RT_VISIBLE_DEVICES", "4,5,6,7")
    plan = plan_here(SftStep(dataset=DATA, devices=2), npu8, tmp_path)
    assert plan.env["HCCL_CONNECT_TIMEOUT"] == "3600" and plan.env["ASCEND_RT_VISIBLE_DEVICES"] == "4,5"
    with pytest.raises(UserError, match="makes only 4 visible"):
        plan_here(SftStep(dataset=DATA, devices=6), npu8, tmp_path)


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_two_nodes_meet_through_the_static_rendezvous(standin, tmp_path):
    """Two 'nodes' on this machine, one process each: the multi-node flags really rendezvous."""
    import threading

    port, results = free_port(), {}

    def node(rank):
        step = {"dataset": DATA, "devices": 1, "nnodes": 2, "node_rank": rank, "master_port": port}
        try:
            results[rank] = run_recipe({"name": "d", "model": "toy", "steps": [{"sft": step}]},
                                       runs_root=tmp_path / f"node{rank}")
        except BaseException as exc:  # reported below
            results[rank] = exc

    threads = [threading.Thread(target=node, args=(r,)) for r in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=240)
    assert all(isinstance(results.get(r), dict) for r in (0, 1)), results
    main = json.loads((tmp_path / "node0" / "d" / "sft" / "swiftbox.json").read_text())
    assert main["metrics"] == {"allreduce_sum": 3.0, "world_size": 2}
    assert json.loads((tmp_path / "node0" / "d" / "sft" / "standin.json").read_text())["world_size"] == 2
    other = json.loads((tmp_path / "node1" / "d" / "sft" / "swiftbox.json").read_text())
    assert other["distributed"]["node_rank"] == 1 and "node 0" in other["distributed"]["note"]
    assert not (tmp_path / "node1" / "d" / "sft" / "standin.json").exists()
    command = main["distributed"]["command"]
    assert f"--nnodes 2 --node-rank 0 --master-addr 127.0.0.1 --master-port {port}" in command


# -- the real thing: LoRA SFT on toy, 2 gloo processes vs 1 ---------------------------------------
SFT_SETTINGS = {"dataset": DATA, "method": "lora", "epochs": 3, "learning_rate": 0.005, "seed": 7}


def answers_accuracy(adapter: Path, rows: int = 100) -> float:
    """Greedy yes/no answers of base toy + adapter on the held-out parity questions (exact match)."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from swiftbox.catalog.toy import toy_path

    tok = AutoTokenizer.from_pretrained(adapter if (adapter / "tokenizer_config.json").is_file() else toy_path(0))
    tok.padding_side = "left"
    model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(toy_path(0)), str(adapter)).eval()
    lines = (ROOT / "recipes" / "data" / "parity_eval.jsonl").read_text().splitlines()[:rows]
    items = [json.loads(line)["messages"] for line in lines]
    prompts = [tok.apply_chat_template(m[:-1], tokenize=False, add_generation_prompt=True) for m in items]
    batch = tok(prompts, return_tensors="pt", padding=True)
    with torch.no_grad():
        out = model.generate(**batch, max_new_tokens=3, do_sample=False, pad_token_id=tok.pad_token_id)
    texts = tok.batch_decode(out[:, batch["input_ids"].shape[1]:], skip_special_tokens=True)
    right = [t.strip().strip(".").lower() == m[-1]["content"].strip().lower() for t, m in zip(texts, items)]
    return sum(right) / len(right)


def two_runs(tmp_path) -> dict:
    runs = {}
    for name, settings in {"one": {"batch_size": 8}, "two": {"batch_size": 4, "devices": 2}}.items():
        started = time.time()
        summary = run_recipe({"name": name, "model": "toy", "steps": [{"sft": {**SFT_SETTINGS, **settings}}]},
                             runs_root=tmp_path)  # same global batch (8), same data, same steps
        runs[name] = {"seconds": time.time() - started, "metrics": summary["steps"][0]["metrics"],
                      "out": Path(summary["steps"][0]["output"])}
    return runs


@pytest.mark.slow
def test_lora_sft_on_two_gloo_processes_matches_one(tmp_path, monkeypatch, capfd):
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    import torch

    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # what torchrun gives each worker: compare like with like,
    threads = torch.get_num_threads()          # so the in-process single run gets one thread too
    torch.set_num_threads(1)
    try:
        runs = two_runs(tmp_path)
    finally:
        torch.set_num_threads(threads)
    one, two = runs["one"], runs["two"]
    manifest = json.loads((two["out"] / "swiftbox.json").read_text())
    assert manifest["metrics"]["world_size"] == 2 and manifest["distributed"]["world_size"] == 2
    assert manifest["distributed"]["backend"] == "gloo" and (two["out"] / "adapter_model.safetensors").is_file()
    assert not list(two["out"].glob("checkpoint*")) and "launch.json" in {p.name for p in two["out"].iterdir()}
    assert "-m torch.distributed.run --standalone --nnodes 1 --nproc-per-node 2" in capfd.readouterr().err
    assert two["metrics"]["steps"] == one["metrics"]["steps"]
    assert two["metrics"]["train_loss"] == pytest.approx(one["metrics"]["train_loss"], rel=0.1)
    acc_one, acc_two = answers_accuracy(one["out"]), answers_accuracy(two["out"])
    print(f"\n1 process: step {one['seconds']:.1f}s train {one['metrics'].get('train_seconds')}s loss "
          f"{one['metrics']['train_loss']} acc {acc_one:.2f} | "
          f"2 processes: step {two['seconds']:.1f}s train {two['metrics'].get('train_seconds')}s loss "
          f"{two['metrics']['train_loss']} acc {acc_two:.2f}")
    assert acc_one >= 0.9 and acc_two >= 0.9   # both learn the rule (the pretrained toy: LoRA can learn it)

"""Arriving from a peer, end to end on `toy`: the peers' own example LoRA SFT and DPO configs and command lines
(their shapes: the model swapped for toy, the datasets for small local files in the peer's format, `max_steps: 1`
to keep the run tiny, bf16 left to the device) run unchanged and train; the same job through the peer's key names
and through swiftbox's own gives the same resolved configuration (`compare` exit 0); `export-config` writes a
config that reads back to it. The real model (smollm2-135m-instruct) runs the same shapes in the slow tests."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from swiftbox import cli
from tests.conftest import REAL_MODEL, ROOT

pytestmark = pytest.mark.usefixtures("one_torch_thread")
FIXTURES = ROOT / "tests" / "fixtures" / "peer_configs"


@pytest.fixture
def launch(tmp_path, monkeypatch, capsys):
    """`./launch.sh ARGS` in this process (torch already imported, one thread), from tmp_path: (exit code,
    stdout, stderr)."""
    monkeypatch.chdir(tmp_path)

    def run(*args: str) -> tuple[int, str, str]:
        capsys.readouterr()
        rc = cli.main(list(args))
        out = capsys.readouterr()
        return rc, out.out, out.err
    return run


def lf_workdir(tmp_path: Path, example: str, model: str, **extra) -> Path:
    """A LLaMA-Factory working directory: data/ (dataset_info.json + the demo rows) and the example YAML, as
    shipped but for the model (and its template, toy and SmolLM2 being ChatML models) and `extra`."""
    shutil.copytree(FIXTURES / "llamafactory" / "data", tmp_path / "data")
    text = (FIXTURES / "llamafactory" / example).read_text()
    text = text.replace("meta-llama/Meta-Llama-3-8B-Instruct", model).replace("template: llama3", "template: qwen")
    lines = [line for line in text.splitlines() if line.split(":")[0] not in extra]
    (tmp_path / example).write_text("\n".join(lines) + "\n" + yaml.safe_dump(extra))
    return tmp_path / example


def ok(result: tuple[int, str, str]) -> str:
    rc, out, err = result
    assert rc == 0, out[-2000:] + err[-2000:]
    return err


def manifest(out: Path) -> dict:
    return json.loads((out / "swiftbox.json").read_text())


def test_llamafactory_lora_sft_example_trains_and_equals_the_swiftbox_recipe(tmp_path, launch):
    config = lf_workdir(tmp_path, "llama3_lora_sft.yaml", "toy", max_steps=1, bf16=False)
    err = ok(launch("train", config.name))
    assert "read as LLaMA-Factory's config; ignored" in err and "plot_loss" in err
    peer_out = tmp_path / "saves" / "llama3-8b" / "lora" / "sft"
    assert (peer_out / "adapter_model.safetensors").is_file()
    cfg = manifest(peer_out)["config"]
    assert (cfg["lora"]["alpha"], cfg["lora"]["dropout"], cfg["grad_accum"], cfg["warmup_ratio"]) == (16, 0, 8, 0.1)
    own = {"name": "own", "model": "toy", "steps": [{"sft": {
        "dataset": [str(tmp_path / "data" / "identity.json"), str(tmp_path / "data" / "alpaca_en_demo.json")],
        "trust_remote_code": True, "method": "lora", "lora": {"rank": 8, "alpha": 16, "dropout": 0.0},
        "batch_size": 1, "grad_accum": 8, "learning_rate": 1e-4, "epochs": 3, "max_steps": 1,
        "lr_scheduler": "cosine", "warmup_ratio": 0.1, "weight_decay": 0.0, "max_length": 2048,
        "gradient_checkpointing": True, "output": "own_out"}}]}
    (tmp_path / "own.yaml").write_text(yaml.safe_dump(own))
    ok(launch("run", "own.yaml"))
    rc, out, err = launch("compare", str(peer_out), str(tmp_path / "own_out"), "--json")
    assert rc == 0, out + err
    assert json.loads(out)["differ"] == []
    # and back: the run as LLaMA-Factory's config, which reads back to the same configuration (checked inside)
    ok(launch("export-config", str(peer_out), "--to", "llamafactory", "--output", "back.yaml"))
    back = yaml.safe_load((tmp_path / "back.yaml").read_text())
    assert back["stage"] == "sft" and back["lora_alpha"] == 16 and back["max_steps"] == 1
    assert (tmp_path / "back_data" / "dataset_info.json").is_file()


def test_llamafactory_lora_dpo_example_trains(tmp_path, launch):
    config = lf_workdir(tmp_path, "llama3_lora_dpo.yaml", "toy", max_steps=1, bf16=False)
    ok(launch("train", config.name))
    man = manifest(tmp_path / "saves" / "llama3-8b" / "lora" / "dpo")
    assert man["kind"] == "dpo" and man["config"]["beta"] == 0.1 and man["config"]["learning_rate"] == 5e-6
    assert man["metrics"]["train_loss"] > 0


def parity_rows(path: Path, n: int = 2) -> Path:
    path.write_text("".join(json.dumps({"messages": [{"role": "user", "content": f"Is {k} even?"},
                                                     {"role": "assistant", "content": "yes" if k % 2 == 0 else "no"}]})
                            + "\n" for k in range(n)))
    return path


@pytest.mark.slow   # two runs (about 40 s on a quiet 2-core box)
def test_ms_swift_readme_command_equals_the_swiftbox_flags(tmp_path, launch):
    rows = parity_rows(tmp_path / "sft.jsonl")
    # README's LoRA command, the hub datasets swapped for a local file
    ok(launch("sft", "--model", "toy", "--dataset", str(rows), "--torch_dtype", "float32", "--max_steps", "1",
              "--tuner_type", "lora", "--num_train_epochs", "1", "--per_device_train_batch_size", "1",
              "--per_device_eval_batch_size", "1", "--learning_rate", "1e-4", "--lora_rank", "8", "--lora_alpha", "32",
              "--target_modules", "all-linear", "--gradient_accumulation_steps", "16", "--eval_steps", "50",
              "--save_steps", "50", "--save_total_limit", "2", "--logging_steps", "5", "--max_length", "2048",
              "--output_dir", "swift_out", "--warmup_ratio", "0.05", "--dataloader_num_workers", "4",
              "--model_author", "swift", "--model_name", "swift-robot"))
    ok(launch("sft", "toy", "--dataset", str(rows), "--dtype", "float32", "--max-steps", "1", "--method", "lora",
              "--epochs", "1", "--batch-size", "1", "--learning-rate", "1e-4", "--lora.rank", "8", "--lora.alpha", "32",
              "--lora.dropout", "0.05", "--grad-accum", "16", "--max-length", "2048", "--warmup-ratio", "0.05",
              "--weight-decay", "0.1", "--gradient-checkpointing", "--output", "own_out"))
    rc, out, err = launch("compare", "swift_out", "own_out", "--json")
    assert rc == 0, out + err


def test_ms_swift_dpo_command_trains(tmp_path, launch):
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text("".join(json.dumps({"prompt": f"Is {n} even?", "chosen": "yes" if n % 2 == 0 else "no",
                                         "rejected": "no" if n % 2 == 0 else "yes"}) + "\n" for n in range(2)))
    # examples/train/rlhf/dpo/lora.sh, without the two flags swiftbox refuses (split_dataset_ratio, rpo_alpha)
    err = ok(launch("rlhf", "--rlhf_type", "dpo", "--model", "toy", "--tuner_type", "lora", "--dataset", str(pairs),
                    "--load_from_cache_file", "true", "--torch_dtype", "float32", "--num_train_epochs", "1",
                    "--max_steps", "1", "--per_device_train_batch_size", "1", "--per_device_eval_batch_size", "1",
                    "--learning_rate", "1e-4", "--lora_rank", "8", "--lora_alpha", "32", "--target_modules",
                    "all-linear", "--gradient_accumulation_steps", "16", "--eval_steps", "50", "--save_steps", "50",
                    "--save_total_limit", "2", "--logging_steps", "5", "--max_length", "2048", "--output_dir",
                    "dpo_out", "--warmup_ratio", "0.05", "--dataloader_num_workers", "4", "--dataset_num_proc", "4"))
    assert "read as ms-swift's config" in err and "load_from_cache_file" in err
    man = manifest(tmp_path / "dpo_out")
    assert man["kind"] == "dpo" and man["config"]["lora"]["alpha"] == 32 and man["config"]["beta"] == 0.1
    assert man["config"]["weight_decay"] == 0.1 and man["metrics"]["train_loss"] > 0


def test_axolotl_lora_sft_example_trains(tmp_path, launch):
    rows = parity_rows(tmp_path / "chat.jsonl")
    config = yaml.safe_load((FIXTURES / "axolotl" / "instruct-lora-8b.yml").read_text())
    for refused in ("load_in_8bit", "val_set_size", "optimizer"):    # refused by name (tests/unit/test_migrate.py)
        config.pop(refused)
    config.update(base_model="toy", chat_template="chatml", datasets=[{"path": str(rows), "type": "chat_template"}],
                  max_steps=1, bf16=False, output_dir="ax_out")
    (tmp_path / "ax.yml").write_text(yaml.safe_dump(config))
    err = ok(launch("train", "ax.yml"))
    assert "read as Axolotl's config" in err and "wandb_project" in err
    man = manifest(tmp_path / "ax_out")
    assert (man["config"]["lora"]["rank"], man["config"]["lora"]["alpha"], man["config"]["epochs"]) == (32, 16, 4)
    assert man["config"]["dtype"] == "float32"


@pytest.mark.slow
@pytest.mark.parametrize("example", ["llama3_lora_sft.yaml", "llama3_lora_dpo.yaml"])
def test_llamafactory_examples_train_the_real_model(tmp_path, launch, real_model_dir, example):
    config = lf_workdir(tmp_path, example, REAL_MODEL, max_steps=2, bf16=False, cutoff_len=512)
    err = ok(launch("train", config.name))
    assert "LLaMA-Factory" in err
    out = tmp_path / "saves" / "llama3-8b" / "lora" / ("sft" if "sft" in example else "dpo")
    man = manifest(out)
    assert man["input"] == REAL_MODEL and man["metrics"]["train_loss"] > 0
    assert (out / "adapter_model.safetensors").is_file()


@pytest.mark.slow
def test_ms_swift_readme_command_trains_the_real_model(tmp_path, launch, real_model_dir):
    rows = tmp_path / "sft.jsonl"
    rows.write_text("".join(json.dumps({"instruction": f"Is {n} even?", "input": "",
                                        "output": "yes" if n % 2 == 0 else "no"}) + "\n" for n in range(8)))
    ok(launch("sft", "--model", REAL_MODEL, "--tuner_type", "lora", "--dataset", str(rows), "--torch_dtype", "float32",
           "--num_train_epochs", "1", "--max_steps", "2", "--per_device_train_batch_size", "1", "--learning_rate",
           "1e-4", "--lora_rank", "8", "--lora_alpha", "32", "--target_modules", "all-linear",
           "--gradient_accumulation_steps", "16", "--max_length", "512", "--output_dir", "out"))
    assert manifest(tmp_path / "out")["metrics"]["train_loss"] > 0


def test_axolotl_lora_dpo_example_trains(tmp_path, launch):
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text("".join(json.dumps({"prompt": f"Is {n} even?", "chosen": "yes" if n % 2 == 0 else "no",
                                         "rejected": "no" if n % 2 == 0 else "yes"}) + "\n" for n in range(2)))
    config = yaml.safe_load((FIXTURES / "axolotl" / "instruct-dpo-lora-8b.yml").read_text())
    for refused in ("load_in_8bit", "val_set_size", "optimizer", "special_tokens"):
        config.pop(refused)   # refused by name (tests/unit/test_migrate.py; special_tokens: a new eos_token)
    config.update(base_model="toy", chat_template="chatml", max_steps=1, bf16=False, output_dir="dpo_out",
                  datasets=[{"path": str(pairs), "type": "chatml.prompt_pairs"}])
    (tmp_path / "dpo.yml").write_text(yaml.safe_dump(config))
    ok(launch("train", "dpo.yml"))
    man = manifest(tmp_path / "dpo_out")
    assert man["kind"] == "dpo" and man["config"]["beta"] == 0.1 and man["config"]["lora"]["targets"] == "all-linear"
    assert man["metrics"]["train_loss"] > 0
    config["datasets"][0]["type"] = "llama3.prompt_pairs"     # a pair type of another template family than toy's
    (tmp_path / "dpo.yml").write_text(yaml.safe_dump(config))
    rc, _, err = launch("train", "dpo.yml")
    assert rc == 2 and "contradicts toy's own chat template" in err and len(err.strip().splitlines()) == 1

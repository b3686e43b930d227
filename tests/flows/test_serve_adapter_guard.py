"""Issue 32, class 1: a runtime-loaded adapter can only ever add a delta. Each hostile adapter (an init that
rewrites the base, layer_replication, NaN/inf weights, a rank bomb, a base tensor smuggled into the weights file,
modules_to_save, bias "all", ...) is refused with a 400 naming the field, and the base model's weights hash the same
before and after the attempt (and after unloading, where an attempt got in); the base still answers the same text.
Also: the base-model check is by identity (an adapter for `acme/tiny` is not one for `acme/tiny-Instruct`), and
the number and memory of runtime adapters are capped (429 past the count, 400 for one that can never fit)."""
from __future__ import annotations

import hashlib
import json
import math
import shutil
from pathlib import Path

import httpx
import pytest

from tests.support.serve_fixtures import KEY, make_adapter, start_server

pytestmark = pytest.mark.usefixtures("one_torch_thread")
AUTH = {"Authorization": f"Bearer {KEY}"}
MSG = [{"role": "user", "content": "Is 12 even?"}]


@pytest.fixture(scope="module")
def setup(toy_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("guard")
    good = make_adapter(toy_dir, root / "good", seed=3)
    server, _, stop = start_server("toy", adapter_root=[str(root)], work_dir=root, max_batch_size=2)
    yield server, root, good
    stop()


def post(server, route, **body):
    return httpx.post(server.url + route, json=body, headers=AUTH, timeout=120)


def base_answer(server) -> str:
    r = post(server, "/v1/chat/completions", model="toy", messages=MSG, max_tokens=8, temperature=0)
    assert r.status_code == 200, r.text
    return r.json()["choices"][0]["message"]["content"]


def base_digest(server) -> str:
    """sha256 over the base model's own parameters (names as in the plain model), wherever PEFT has wrapped them."""
    import torch

    model = server.server.config.app.state.backend.engine.model
    digest = hashlib.sha256()
    params = []
    for name, param in model.named_parameters():
        if "lora_" in name or "modules_to_save" in name:
            continue
        plain = name.removeprefix("base_model.model.").replace(".base_layer", "").replace(".original_module", "")
        params.append((plain, param))
    for name, param in sorted(params, key=lambda p: p[0]):
        digest.update(name.encode())
        digest.update(param.detach().cpu().contiguous().view(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def hostile(good: Path, root: Path, name: str, config: dict | None = None, weights=None) -> Path:
    out = root / name
    shutil.rmtree(out, ignore_errors=True)
    shutil.copytree(good, out)
    if config:
        data = json.loads((out / "adapter_config.json").read_text())
        (out / "adapter_config.json").write_text(json.dumps({**data, **config}))
    if weights:
        from safetensors.torch import load_file, save_file

        tensors = load_file(out / "adapter_model.safetensors")
        save_file(weights(tensors), out / "adapter_model.safetensors")
    return out


def _set_all(value: float):
    def change(tensors):
        return {k: v.fill_(value) if "lora_B" in k else v for k, v in tensors.items()}
    return change


def _base_tensor(tensors):
    """A full base weight smuggled in beside the LoRA matrices: PEFT passes keys without `lora_` straight to
    load_state_dict, which would overwrite the served base for every client."""
    import torch

    return {**tensors, "base_model.model.model.layers.0.self_attn.q_proj.bias": torch.full((128,), 7.0)}


def _base_weight(tensors):
    import torch

    return {**tensors, "base_model.model.model.layers.1.mlp.gate_proj.weight": torch.zeros(512, 128)}


HOSTILE = {   # name -> (config change, weights change, the field the 400 names)
    "pissa": ({"init_lora_weights": "pissa"}, None, "init_lora_weights"),
    "pissa_niter_4": ({"init_lora_weights": "pissa_niter_4"}, None, "init_lora_weights"),
    "olora": ({"init_lora_weights": "olora"}, None, "init_lora_weights"),
    "corda": ({"init_lora_weights": "corda"}, None, "init_lora_weights"),
    "loftq": ({"init_lora_weights": "loftq"}, None, "init_lora_weights"),
    "lora_ga": ({"init_lora_weights": "lora_ga"}, None, "init_lora_weights"),
    "an unknown init": ({"init_lora_weights": "magic"}, None, "init_lora_weights"),
    "layer_replication": ({"layer_replication": [[0, 2], [1, 4]]}, None, "layer_replication"),
    "modules_to_save": ({"modules_to_save": ["lm_head"]}, None, "modules_to_save"),
    "trainable_token_indices": ({"trainable_token_indices": [1, 2, 3]}, None, "trainable_token_indices"),
    "target_parameters": ({"target_parameters": ["mlp.up_proj.weight"]}, None, "target_parameters"),
    "bias all": ({"bias": "all"}, None, "bias"),
    "peft_type LOHA": ({"peft_type": "LOHA"}, None, "peft_type"),
    "rank bomb": ({"r": 65536}, None, "65536"),
    "rank_pattern bomb": ({"rank_pattern": {"q_proj": 65536}}, None, "65536"),
    "NaN weights": (None, _set_all(math.nan), "finite"),
    "inf weights": (None, _set_all(math.inf), "finite"),
    "a base bias in the weights": (None, _base_tensor, "q_proj.bias"),
    "a base weight in the weights": (None, _base_weight, "gate_proj.weight"),
    "weights of another rank than r": (None, lambda t: {k: (v[:4] if "lora_A" in k else v[:, :4]).contiguous()
                                                         for k, v in t.items()}, "rank"),
}


@pytest.mark.parametrize("case", list(HOSTILE))
def test_hostile_adapter_is_refused_and_the_base_is_untouched(setup, case):
    server, root, good = setup
    reference, before = base_answer(server), base_digest(server)
    config, weights, word = HOSTILE[case]
    path = hostile(good, root, "h-" + case.replace(" ", "_"), config, weights)
    r = post(server, "/v1/load_lora_adapter", lora_name="evil", lora_path=str(path))
    loaded = r.status_code == 200
    if loaded:     # before issue 32 several of these got in: unload, then check what they left behind
        post(server, "/v1/unload_lora_adapter", lora_name="evil")
    assert base_digest(server) == before, f"{case}: the base weights changed ({r.status_code} {r.text[:200]})"
    assert base_answer(server) == reference
    assert r.status_code == 400, (case, r.status_code, r.text)
    error = r.json()["error"]
    assert error["code"] == "adapter_unsupported" and word in error["message"], error


def test_unconverted_pissa_says_how_to_convert(setup):
    server, root, good = setup
    path = hostile(good, root, "pissa-hint", {"init_lora_weights": "pissa"})
    message = post(server, "/v1/load_lora_adapter", lora_name="p", lora_path=str(path)).json()["error"]["message"]
    assert "path_initial_model_for_weight_conversion" in message, message


def test_a_good_adapter_loads_and_unloads_leaving_the_base_as_it_was(setup):
    server, root, good = setup
    reference, before = base_answer(server), base_digest(server)
    for init in (True, False, "gaussian", "eva", "orthogonal"):    # plain deltas on the untouched base
        path = hostile(good, root, f"init-{init}", {"init_lora_weights": init})
        r = post(server, "/v1/load_lora_adapter", lora_name="fine", lora_path=str(path))
        assert r.status_code == 200, (init, r.text)
        r = post(server, "/v1/chat/completions", model="fine", messages=MSG, max_tokens=8, temperature=0)
        assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"] != reference
        assert base_digest(server) == before
        assert post(server, "/v1/unload_lora_adapter", lora_name="fine").status_code == 200
    assert base_digest(server) == before and base_answer(server) == reference


def test_module_patterns_run_under_a_time_limit(setup):
    """PEFT runs a string target_modules as a regular expression with the standard `re` over every module name on
    the engine's thread: `([\\w.]+)+z` takes `re` longer than 5 s per module name (measured on main; the engine
    stalls for every client). The front door runs patterns itself under a time limit and hands PEFT plain names."""
    server, root, good = setup
    listed = post(server, "/v1/chat/completions", model="toy", messages=MSG, max_tokens=8, temperature=0)
    assert listed.status_code == 200
    before = base_digest(server)
    path = hostile(good, root, "regex-ok", {"target_modules": r".*\.(q_proj|v_proj|up_proj|down_proj)"})
    assert post(server, "/v1/load_lora_adapter", lora_name="rx", lora_path=str(path)).status_code == 200
    assert post(server, "/v1/load_lora_adapter", lora_name="ls", lora_path=str(good)).status_code == 200
    answers = [post(server, "/v1/chat/completions", model=m, messages=MSG, max_tokens=8, temperature=0).json()
               for m in ("rx", "ls")]
    assert answers[0]["choices"][0]["message"] == answers[1]["choices"][0]["message"]   # the same modules
    for name in ("rx", "ls"):
        assert post(server, "/v1/unload_lora_adapter", lora_name=name).status_code == 200
    for field, pattern, word in (("target_modules", r"([\w.]+)+z", "matches no module"),
                                 ("target_modules", r"(?:.*){2000}\d{10}", "too long"),
                                 ("exclude_modules", r"(?:.*){2000}\d{10}", "too long"),
                                 ("rank_pattern", {r"(?:.*){2000}\d{10}": 8}, "too long"),
                                 ("target_modules", "(unclosed", "not a valid pattern"),
                                 ("layers_pattern", "(.*)+", "layers_pattern")):
        path = hostile(good, root, "regex-bad", {field: pattern})
        r = post(server, "/v1/load_lora_adapter", lora_name="bad", lora_path=str(path))
        assert r.status_code == 400 and word in r.json()["error"]["message"], (field, pattern, r.text)
        assert field in r.json()["error"]["message"]
    assert base_digest(server) == before


def test_base_model_by_identity_not_substring(setup):
    """The served toy lives under ~/.cache/swiftbox/toy/...: an adapter naming any substring of that path
    (`swiftbox`, `toy/v2`) is not an adapter for this model."""
    server, root, good = setup
    for name in ("swiftbox", "cache", "toy-Instruct"):
        path = hostile(good, root, f"base-{name}", {"base_model_name_or_path": name})
        r = post(server, "/v1/load_lora_adapter", lora_name="b", lora_path=str(path))
        if r.status_code == 200:
            post(server, "/v1/unload_lora_adapter", lora_name="b")
        assert r.status_code == 400 and r.json()["error"]["code"] == "adapter_base_mismatch", (name, r.text)
    path = hostile(good, root, "base-toy", {"base_model_name_or_path": "toy"})
    assert post(server, "/v1/load_lora_adapter", lora_name="b", lora_path=str(path)).status_code == 200
    assert post(server, "/v1/unload_lora_adapter", lora_name="b").status_code == 200


def test_hub_ids_are_compared_whole(tmp_path):
    """A server of acme/tiny-Instruct (a hub snapshot) takes adapters for acme/tiny-Instruct, never acme/tiny."""
    from swiftbox.serving.adapters import AdapterPolicy

    snapshot = tmp_path / "hub" / "models--acme--tiny-Instruct" / "snapshots" / "0123abcd"
    snapshot.mkdir(parents=True)
    policy = AdapterPolicy(engine="builtin", roots=[tmp_path], base_ref="acme/tiny-Instruct", base_dir=snapshot)
    for named, ok in (("acme/tiny", False), ("acme/tiny-Instruct", True), ("hf:acme/tiny-Instruct", True),
                      ("acme/tiny-instruct-v2", False), ("tiny-Instruct", False), ("acme", False)):
        adapter = tmp_path / f"a-{named.replace('/', '_').replace(':', '_')}"
        adapter.mkdir()
        (adapter / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": named}))
        assert (policy.base_problem(adapter) is None) == ok, named
    by_path = AdapterPolicy(engine="builtin", roots=[tmp_path], base_ref=str(snapshot), base_dir=snapshot)
    adapter = tmp_path / "a-acme_tiny"
    assert by_path.base_problem(adapter) is not None      # served from its path: acme/tiny is still another model
    assert by_path.base_problem(tmp_path / "a-acme_tiny-Instruct") is None   # ... and acme/tiny-Instruct is this one
    for revision, ok in (("0123abcd", True), ("main", True), (None, True), ("fedcba98", False)):
        adapter = tmp_path / f"r-{revision}"
        adapter.mkdir()
        (adapter / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": "acme/tiny-Instruct",
                                                                 "revision": revision}))
        assert (policy.base_problem(adapter) is None) == ok, revision


def test_count_and_memory_caps(toy_dir, tmp_path):
    good = make_adapter(toy_dir, tmp_path / "good", seed=4)
    size = (good / "adapter_model.safetensors").stat().st_size
    server, _, stop = start_server("toy", adapter_root=[str(tmp_path)], work_dir=tmp_path, max_batch_size=1,
                                   max_loaded_adapters=2, max_adapter_memory_mb=1)
    try:
        assert post(server, "/v1/load_lora_adapter", lora_name="a1", lora_path=str(good)).status_code == 200
        assert post(server, "/v1/load_lora_adapter", lora_name="a2", lora_path=str(good)).status_code == 200
        r = post(server, "/v1/load_lora_adapter", lora_name="a3", lora_path=str(good))
        assert r.status_code == 429 and r.json()["error"]["code"] == "adapter_limit", r.text
        assert "max_loaded_adapters" in r.json()["error"]["message"] or "--max-loaded-adapters" in r.text
        assert post(server, "/v1/unload_lora_adapter", lora_name="a1").status_code == 200
        assert post(server, "/v1/load_lora_adapter", lora_name="a3", lora_path=str(good)).status_code == 200
        wide = hostile_rank(good, tmp_path / "wide", 256)     # ~ (128+128)*256*4 bytes * 16 modules > 1 MB
        assert (wide / "adapter_model.safetensors").stat().st_size > 1 << 20 > size
        assert post(server, "/v1/unload_lora_adapter", lora_name="a2").status_code == 200
        r = post(server, "/v1/load_lora_adapter", lora_name="w", lora_path=str(wide))
        assert r.status_code == 400 and r.json()["error"]["code"] == "adapter_limit", r.text
        assert "--max-adapter-memory-mb" in r.json()["error"]["message"]
    finally:
        stop()


def hostile_rank(good: Path, out: Path, rank: int) -> Path:
    """A well-formed adapter of rank `rank` (the good one's targets, random matrices)."""
    import torch
    from safetensors.torch import load_file, save_file

    shutil.copytree(good, out)
    config = json.loads((out / "adapter_config.json").read_text())
    (out / "adapter_config.json").write_text(json.dumps({**config, "r": rank, "lora_alpha": rank}))
    tensors = load_file(good / "adapter_model.safetensors")
    wide = {}
    for key, value in tensors.items():
        shape = (rank, value.shape[1]) if "lora_A" in key else (value.shape[0], rank)
        wide[key] = torch.randn(shape) * 0.01
    save_file(wide, out / "adapter_model.safetensors")
    return out

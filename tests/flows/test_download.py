"""Model download through the real `modelscope` and `huggingface_hub` clients, against a local hub
(tests/fakes/minihub.py on 127.0.0.1) hosting the toy model: fresh download, cache hit, resume after a cut
connection, checksum mismatch, unknown model, hub down; plus the step's output and manifest, and the
model registry. No test contacts a real hub: endpoints and caches point at the local hub and tmp dirs.
"""
from __future__ import annotations

import hashlib
import json
import os
import time

import pytest

from swiftbox.errors import SwiftboxError, UserError
from tests.fakes.minihub import MiniHub, closed_port

REPO = "swiftbox/toy-model"
HUB_REFS = {"modelscope": REPO, "hf": f"hf:{REPO}"}


@pytest.fixture(scope="module")
def hub(toy_dir, tmp_path_factory):
    files = {p.name: p.read_bytes() for p in toy_dir.iterdir() if p.is_file()}
    files["pytorch_model.bin"] = b"not really a pickle" * 500
    files["weights/flax_model.msgpack"] = b"\0" * 100
    server = MiniHub({REPO: files})
    url = server.start()
    home = tmp_path_factory.mktemp("hubhome")
    env = {"MODELSCOPE_ENDPOINT": url, "HF_ENDPOINT": url, "MODELSCOPE_CACHE": str(home / "ms"),
           "MODELSCOPE_HOME": str(home / "mshome"), "HF_HOME": str(home / "hf"), "HF_HUB_CACHE": str(home / "hf/hub"),
           "HF_HUB_DISABLE_TELEMETRY": "1", "MODELSCOPE_DOWNLOAD_INTRA_CLOUD": "false"}
    with pytest.MonkeyPatch.context() as mp:
        for key, value in env.items():
            mp.setenv(key, value)
        for key in ("SWIFTBOX_OFFLINE", "HF_HUB_OFFLINE", "MODELSCOPE_DOMAIN", "HF_TOKEN", "MODELSCOPE_API_TOKEN"):
            mp.delenv(key, raising=False)
        server.env = env
        yield server
    server.stop()


def _download(ref, tmp_path, **kw):
    from swiftbox.hub.snapshot import download_snapshot

    return download_snapshot(ref, cache_dir=str(tmp_path / "cache"), **kw)


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.mark.parametrize("source", ["modelscope", "hf"])
def test_fresh_download_then_cache_hit(hub, tmp_path, source):
    hub.clear()
    started = time.perf_counter()
    snap = _download(HUB_REFS[source], tmp_path)
    fresh_s = time.perf_counter() - started
    names = sorted(f["path"] for f in snap.files)
    assert "model.safetensors" in names and "config.json" in names
    assert "pytorch_model.bin" not in names and not any("msgpack" in n for n in names)  # safetensors only
    assert not (snap.path / "pytorch_model.bin").exists()
    weights = hub.repos[REPO]["model.safetensors"]
    assert (snap.path / "model.safetensors").read_bytes() == weights
    entry = next(f for f in snap.files if f["path"] == "model.safetensors")
    assert entry["size"] == len(weights) and entry["sha256"] == _sha(weights)
    assert snap.source == source and snap.commit == hub.commits[REPO] and not snap.cache_hit
    assert len(hub.file_gets()) == len(names)

    hub.clear()
    started = time.perf_counter()
    again = _download(HUB_REFS[source], tmp_path)
    hit_s = time.perf_counter() - started
    assert again.cache_hit and again.path == snap.path
    assert hub.file_gets() == [] and len(hub.requests) == 1  # one listing request, no file re-fetched
    print(f"\n{source}: fresh {fresh_s:.2f} s, cache hit {hit_s:.3f} s")

    hub.clear()  # allow_pickle adds the .bin only
    more = _download(HUB_REFS[source], tmp_path, allow_pickle=True)
    assert "pytorch_model.bin" in {f["path"] for f in more.files}
    fetched = {r[1] for r in hub.file_gets()}
    assert len(fetched) == 1 and "pytorch_model.bin" in next(iter(fetched))


@pytest.mark.parametrize("source", ["modelscope", "hf"])
def test_resume_after_a_cut_connection(hub, tmp_path, monkeypatch, source):
    if source == "hf":  # it streams 10 MB chunks and resumes from the last whole chunk: make the toy file span several
        from huggingface_hub import constants

        monkeypatch.setattr(constants, "DOWNLOAD_CHUNK_SIZE", 64 << 10)
    hub.clear()
    cut = 600_000
    hub.cut_once[(REPO, "model.safetensors")] = cut
    snap = _download(HUB_REFS[source], tmp_path)
    weights = hub.repos[REPO]["model.safetensors"]
    assert (snap.path / "model.safetensors").read_bytes() == weights
    ranges = [r[2] for r in hub.file_gets() if "model.safetensors" in r[1] and r[2]]
    assert ranges, "the client restarted from zero instead of resuming"
    resumed_at = int(ranges[0].split("=")[1].rstrip("-"))
    assert 0 < resumed_at <= cut


def test_an_interrupted_modelscope_download_resumes_in_the_next_run(hub, tmp_path, monkeypatch):
    """No retries left in the first run: it fails with one line (exit 1); the next run resumes the partial file.
    (huggingface_hub >= 1.0 discards partial files between runs; it resumes only within a run, tested above.)"""
    from modelscope_hub import _download as ms_download

    monkeypatch.setattr(ms_download, "DOWNLOAD_RETRY_TIMES", 0)
    hub.cut_once[(REPO, "model.safetensors")] = 600_000
    with pytest.raises(SwiftboxError) as err:
        _download(REPO, tmp_path)
    assert err.value.exit_code == 1 and "run the same command again" in str(err.value)
    assert "connection dropped mid-file" in str(err.value) and "\n" not in str(err.value)
    assert [p.stat().st_size for p in (tmp_path / "cache").rglob("model.safetensors.incomplete")] == [600_000]
    hub.clear()
    snap = _download(REPO, tmp_path)
    assert (snap.path / "model.safetensors").read_bytes() == hub.repos[REPO]["model.safetensors"]
    assert [r[2] for r in hub.file_gets()] == ["bytes=600000-"]  # only the missing part was fetched


def test_pipelines_resolve_a_downloaded_model_without_the_network(hub, tmp_path, monkeypatch):
    from swiftbox.hub.resolve import resolve_model

    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf"))
    hub.clear()
    first = resolve_model(f"hf:{REPO}")  # not cached yet: downloads into the default cache
    assert (first / "model.safetensors").is_file() and hub.file_gets()
    hub.clear()
    assert resolve_model(f"hf:{REPO}") == first and hub.requests == []


@pytest.mark.parametrize("source", ["modelscope", "hf"])
def test_checksum_mismatch_is_detected_and_the_bad_copy_removed(hub, tmp_path, source):
    hub.corrupt.add((REPO, "model.safetensors"))
    try:
        with pytest.raises(SwiftboxError) as err:
            _download(HUB_REFS[source], tmp_path)
    finally:
        hub.corrupt.clear()
    msg = str(err.value)
    assert "model.safetensors" in msg and ("checksum" in msg or "sha256" in msg) and "\n" not in msg
    assert err.value.exit_code == 1
    assert not list((tmp_path / "cache").rglob("model.safetensors"))
    assert _download(HUB_REFS[source], tmp_path).files  # a clean retry succeeds


@pytest.mark.parametrize("source", ["modelscope", "hf"])
def test_unknown_model_is_one_line_with_close_matches(hub, tmp_path, source):
    ref = "Qwen/Qwen2.5-0.5B-Instrut" if source == "modelscope" else "hf:Qwen/Qwen2.5-0.5B-Instrut"
    with pytest.raises(UserError) as err:
        _download(ref, tmp_path)
    msg = str(err.value)
    assert "has no model 'Qwen/Qwen2.5-0.5B-Instrut'" in msg and "did you mean Qwen/Qwen2.5-0.5B-Instruct" in msg
    assert err.value.exit_code == 2 and "\n" not in msg


def test_unknown_revision_and_malformed_ids(hub, tmp_path):
    with pytest.raises(UserError, match="at revision 'v9'"):
        _download(REPO, tmp_path, revision="v9")
    with pytest.raises(UserError, match="did you mean qwen3-8b"):
        _download("qwen3-8", tmp_path)  # no hub call: not a preset, not ORG/NAME


@pytest.mark.parametrize("source", ["modelscope", "hf"])
def test_hub_down_fails_fast_unless_cached(hub, tmp_path, monkeypatch, source):
    from swiftbox.hub.clients import HubUnreachable
    from swiftbox.hub.snapshot import fetch

    cached = _download(HUB_REFS[source], tmp_path)
    env = "MODELSCOPE_ENDPOINT" if source == "modelscope" else "HF_ENDPOINT"
    monkeypatch.setenv(env, f"http://127.0.0.1:{closed_port()}")
    started = time.perf_counter()
    with pytest.raises(HubUnreachable) as err:
        _download(HUB_REFS[source], tmp_path / "empty")
    assert time.perf_counter() - started < 10
    assert "connection refused" in str(err.value) and err.value.exit_code == 2
    # with a cached copy the step goes on offline, and fetch() never asks the hub
    offline = _download(HUB_REFS[source], tmp_path)
    assert offline.offline and offline.path == cached.path
    monkeypatch.setenv("SWIFTBOX_OFFLINE", "1")
    hub.clear()
    monkeypatch.setenv(env, hub.url)
    assert _download(HUB_REFS[source], tmp_path, refresh=False).path == cached.path and hub.requests == []
    with pytest.raises(UserError, match="offline mode"):
        fetch("hf:other/model" if source == "hf" else "other/model")


@pytest.mark.parametrize("source", ["modelscope", "hf"])
def test_a_hub_that_never_answers_is_a_transient_error(tmp_path, monkeypatch, source):
    import socket

    from swiftbox.hub.clients import HubNoAnswer

    with socket.socket() as silent:  # accepts connections (kernel backlog), never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        monkeypatch.setenv("MODELSCOPE_ENDPOINT" if source == "modelscope" else "HF_ENDPOINT", url)
        monkeypatch.setenv("SWIFTBOX_HUB_TIMEOUT", "1")
        started = time.perf_counter()
        with pytest.raises(HubNoAnswer) as err:
            _download(HUB_REFS[source], tmp_path)
    assert time.perf_counter() - started < 5
    assert err.value.exit_code == 1 and "timed out" in str(err.value) and "SWIFTBOX_HUB_TIMEOUT" in str(err.value)


def test_cli_download_with_no_hub_is_one_line_within_30s(cli, tmp_path):
    port = closed_port()
    env = {"MODELSCOPE_ENDPOINT": f"http://127.0.0.1:{port}", "MODELSCOPE_CACHE": str(tmp_path / "ms"),
           "MODELSCOPE_HOME": str(tmp_path / "mshome")}
    started = time.perf_counter()
    res = cli("download", "Qwen/Qwen2.5-0.5B-Instruct", "--out", str(tmp_path / "o"), env=env, cwd=tmp_path, timeout=60)
    elapsed = time.perf_counter() - started
    last = res.stderr.strip().splitlines()[-1]
    assert res.returncode == 2 and elapsed < 30, (elapsed, res.stderr)
    assert "Traceback" not in res.stderr and last.startswith("swiftbox: cannot reach ModelScope")
    for needle in ("Qwen/Qwen2.5-0.5B-Instruct", "MODELSCOPE_ENDPOINT", "--source hf", "local model directory"):
        assert needle in last
    assert not (tmp_path / "o").exists()
    print(f"\noffline CLI failure: {elapsed:.2f} s: {last}")


def test_download_step_links_the_cache_and_records_the_manifest(hub, tmp_path):
    import swiftbox
    from swiftbox.artifacts import read_manifest

    out = tmp_path / "out"
    entry = swiftbox.download(f"hf:{REPO}", output=str(out), cache_dir=str(tmp_path / "cache"), link="hardlink",
                              runs_root=tmp_path / "runs")
    assert entry["ok"] and entry["metrics"]["files"] == 7
    manifest = read_manifest(out)
    assert manifest["source"] == "hf" and manifest["model_id"] == REPO and manifest["commit"] == hub.commits[REPO]
    weights = next(f for f in manifest["files"] if f["path"] == "model.safetensors")
    assert weights["sha256"] == _sha(hub.repos[REPO]["model.safetensors"])
    cached = os.path.realpath(os.path.join(manifest["cache_path"], "model.safetensors"))
    assert os.stat(out / "model.safetensors").st_ino == os.stat(cached).st_ino  # no second copy on disk
    assert manifest["link"] == {"hardlink": 7}
    # auto: small files copied, and a symlink-only mode points into the cache
    swiftbox.download(REPO, output=str(tmp_path / "sym"), cache_dir=str(tmp_path / "cache2"), link="symlink",
                      runs_root=tmp_path / "runs")
    assert os.path.islink(tmp_path / "sym" / "model.safetensors")
    assert json.loads((tmp_path / "sym" / "config.json").read_text())["model_type"]


def test_references_map_to_hubs_and_ids():
    from swiftbox.hub.snapshot import parse_ref

    assert parse_ref("Qwen/Qwen3-4B") == ("modelscope", "Qwen/Qwen3-4B")
    assert parse_ref("hf:meta-llama/Llama-3.2-1B-Instruct") == ("hf", "meta-llama/Llama-3.2-1B-Instruct")
    assert parse_ref("llama-3.2-1b-instruct") == ("modelscope", "LLM-Research/Llama-3.2-1B-Instruct")
    assert parse_ref("llama-3.2-1b-instruct", "hf") == ("hf", "meta-llama/Llama-3.2-1B-Instruct")
    assert parse_ref("ms:org/any-model") == ("modelscope", "org/any-model")
    with pytest.raises(UserError, match="contradicts source: modelscope"):
        parse_ref("hf:org/x", "modelscope")


def test_local_directory_is_checked_linked_and_recorded(toy_dir, tmp_path):
    import swiftbox
    from swiftbox.artifacts import read_manifest
    from swiftbox.hub.snapshot import _local_files

    entry = swiftbox.download(str(toy_dir), output=str(tmp_path / "local"), runs_root=tmp_path / "runs")
    manifest = read_manifest(tmp_path / "local")
    assert entry["ok"] and manifest["source"] == "local" and manifest["link"] == {"copy": 7}
    tmp_path = tmp_path / "pickled"
    tmp_path.mkdir()

    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "pytorch_model.bin").write_bytes(b"x")
    with pytest.raises(UserError, match="only pickle weights"):
        _local_files(tmp_path, allow_pickle=False)
    assert "pytorch_model.bin" in _local_files(tmp_path, allow_pickle=True)


def test_registry_lookup_and_memory():
    from swiftbox.catalog import presets as models

    assert {p.family for p in models.PRESETS} >= {"Qwen2.5", "Qwen3", "Llama-3", "GLM-4", "InternLM", "Baichuan",
                                                  "DeepSeek-R1-Distill", "Mistral"}
    qwen = models.find("Qwen/Qwen2.5-7B-Instruct")
    assert qwen is models.find("qwen2.5-7b-instruct") is models.find("hf:Qwen/Qwen2.5-7B-Instruct")
    assert models.find("LLM-Research/Meta-Llama-3.1-8B-Instruct").hub_id("hf") == "meta-llama/Llama-3.1-8B-Instruct"
    assert models.find("nope/nope") is None
    full, lora, qlora = (models.memory_gib(qwen, m, "bfloat16") for m in ("full", "lora", "qlora"))
    assert full > lora > qlora > 3
    assert models.memory_gib(qwen, "lora", "float32") > lora
    assert "qwen3-8b" in models.close_matches("qwen3-8")


def test_models_command_prints_the_table(cli):
    res = cli("models", env={"COLUMNS": "220"})
    assert res.returncode == 0, res.stderr
    assert "Qwen/Qwen2.5-0.5B-Instruct" in res.stdout and "meta-llama/Llama-3.1-8B-Instruct" in res.stdout
    assert "qlora" in res.stdout and "GiB" in res.stdout


def test_docs_presets_table_matches_the_registry():
    from swiftbox.catalog import presets as models
    from tests.conftest import ROOT

    rows, header = {}, []
    for line in (ROOT / "docs" / "models.md").read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells and cells[0] == "preset":          # each presets table says its columns in its header
            header = cells
        elif len(cells) >= 7 and models.find(cells[0]) is not None:
            rows[cells[0]] = dict(zip(header, cells))
    assert set(rows) == {p.name for p in models.PRESETS}
    for p in models.PRESETS:
        row = rows[p.name]
        keys = ("ModelScope id", "Hugging Face id", "full", "lora", "qlora")
        ms_id, hf_id, full, lora, qlora = (row[k] for k in keys)
        assert (ms_id, hf_id) == (p.modelscope_id, p.hf_id)
        assert [float(full), float(lora), float(qlora)] == [models.memory_gib(p, m) for m in ("full", "lora", "qlora")]

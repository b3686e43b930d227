"""Runtime-adapter refusals name no server path (issue 43, class 8): the 403 for a path outside the adapter roots
does not list the roots, and the wrong-base 400 names the base by its served name, never the directory it was
loaded from - nor the training machine's directory the adapter's config names."""
from __future__ import annotations

import json
import os
import shutil

import httpx
import pytest

from tests.support.serve_fixtures import KEY, make_adapter, start_server

pytestmark = pytest.mark.usefixtures("one_torch_thread")
AUTH = {"Authorization": f"Bearer {KEY}"}


@pytest.fixture(scope="module")
def served(toy_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("adapter-root")
    good = make_adapter(toy_dir, root / "good", seed=3)
    server, names, stop = start_server(str(toy_dir), adapter_root=[str(root)], work_dir=root, max_batch_size=2)
    yield server, names, root, good
    stop()


def _load(server, path) -> httpx.Response:
    return httpx.post(server.url + "/v1/load_lora_adapter", json={"lora_name": "x", "lora_path": str(path)},
                      headers=AUTH, timeout=120)


def _no_server_paths(text: str, *paths) -> None:
    for path in paths:
        for form in {str(path), os.path.realpath(path)}:
            assert form not in text, (form, text)


def test_the_root_refusal_does_not_list_the_roots(served, tmp_path, toy_dir):
    server, _, root, good = served
    outside = tmp_path / "outside"
    shutil.copytree(good, outside)
    r = _load(server, outside)
    assert r.status_code == 403, r.text
    message = r.json()["error"]["message"]
    assert "outside the adapter roots this server allows (1 directory)" in message
    _no_server_paths(message, root, toy_dir)


def test_the_wrong_base_refusal_names_the_served_base(served, toy_dir):
    server, names, root, good = served
    for trained_on, shown in (("Qwen/Qwen2.5-7B", "Qwen/Qwen2.5-7B"),
                              ("/srv/secret/models/llama-7b", "a local model directory named 'llama-7b'")):
        other = root / f"other-{len(shown)}"
        shutil.copytree(good, other)
        config = json.loads((other / "adapter_config.json").read_text())
        (other / "adapter_config.json").write_text(json.dumps({**config, "base_model_name_or_path": trained_on}))
        r = _load(server, other)
        assert r.status_code == 400 and r.json()["error"]["code"] == "adapter_base_mismatch", r.text
        message = r.json()["error"]["message"]
        assert f"trained on {shown}; this server serves {names.base}" in message, message
        _no_server_paths(message, toy_dir, "/srv/secret")
    plain = root / "plain"
    plain.mkdir()
    (plain / "adapter_config.json").write_text("{")
    r = _load(server, os.path.relpath(plain))
    assert r.status_code == 400 and "adapter_config.json cannot be read" in r.json()["error"]["message"]
    _no_server_paths(r.json()["error"]["message"], root)

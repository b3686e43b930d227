"""serve and chat through the CLI: the smoke step, one-question chat (own engine and --url), and a
foreground server that stops cleanly on SIGTERM."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import httpx
import pytest

from tests.conftest import ROOT
from tests.support.serve_fixtures import KEY, start_server


def _last_json(stdout: str) -> dict:
    return json.loads(stdout.strip().splitlines()[-1])


def test_serve_smoke_step(cli, tmp_path):
    out = cli("serve", "toy", "--smoke", "--port", "0", "--api-key", "k1", "--output", str(tmp_path / "s"))
    assert out.returncode == 0, out.stderr[-2000:]
    metrics = _last_json(out.stdout)["metrics"]
    assert metrics["ok"] is True and metrics["engine"] == "builtin" and metrics["auth_refused"] is True
    assert metrics["completion_tokens"] >= 1 and metrics["ttft_s"] > 0
    manifest = json.loads((tmp_path / "s" / "swiftbox.json").read_text())
    assert manifest["config"]["api_key"] == "***" and manifest["engine"] == "builtin"


def test_chat_prompt_on_own_engine_and_against_url(cli, tmp_path):
    out = cli("chat", "toy", "--prompt", "Is 4 even?", "--max-tokens", "4", "--temperature", "0",
              "--output", str(tmp_path / "c1"))
    assert out.returncode == 0, out.stderr[-2000:]
    own = _last_json(out.stdout)["metrics"]
    assert own["ok"] and own["model"] == "toy"
    # --url: the same pipeline against a running server (in-process here, to keep the suite quick)
    from swiftbox.errors import UserError
    from swiftbox.pipelines.chat import _session
    from swiftbox.steps import ChatStep

    server, names, stop = start_server("toy", api_key=KEY)
    try:
        cfg = ChatStep(url=server.url, prompt="Is 4 even?", max_tokens=4, temperature=0)
        remote = _session(server.url, KEY, None, cfg)
        assert remote["model"] == "toy" and remote["answer"] == own["answer"]
        with pytest.raises(UserError, match="api_key"):
            _session(server.url, "wrong", None, cfg)
    finally:
        stop()


def test_foreground_server_stops_on_sigterm(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(ROOT), SWIFTBOX_API_KEY="envkey")
    proc = subprocess.Popen([sys.executable, "-m", "swiftbox", "serve", "toy", "--port", "0", "--output",
                             str(tmp_path / "fg")], stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                            env=env, cwd=str(ROOT))
    try:
        url = None
        deadline = time.monotonic() + 120
        while url is None and time.monotonic() < deadline:
            line = proc.stderr.readline()
            if "serving on " in line:
                url = line.split("serving on ")[1].split()[0].removesuffix("/v1")
        assert url, "server did not announce its address"
        assert url.startswith("http://127.0.0.1:")
        assert httpx.get(url + "/health", timeout=10).status_code == 200
        assert httpx.get(url + "/v1/models", timeout=10).status_code == 401
        assert httpx.get(url + "/v1/models", headers={"Authorization": "Bearer envkey"}, timeout=10).status_code == 200
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_adapter_artifact_as_input_serves_adapter_and_base(toy_dir, tmp_path):
    """An adapter dir as the model: served under its own name beside its base (from swiftbox.json)."""
    import openai

    from tests.support.serve_fixtures import make_adapter

    adapter = make_adapter(toy_dir, tmp_path / "myadapter", seed=3)
    (adapter / "swiftbox.json").write_text(json.dumps({"artifact": "adapter", "base_model": "toy"}))
    server, names, stop = start_server(str(adapter), api_key=KEY)
    try:
        client = openai.OpenAI(base_url=server.url + "/v1", api_key=KEY, max_retries=0, timeout=60)
        assert [m.id for m in client.models.list()] == ["toy", "myadapter"] and names.primary == "myadapter"
        ask = lambda m: client.chat.completions.create(model=m, messages=[{"role": "user", "content": "Is 8 even?"}],
                                                       max_tokens=8, temperature=0).choices[0].message.content
        assert ask("myadapter") != ask("toy")
    finally:
        stop()

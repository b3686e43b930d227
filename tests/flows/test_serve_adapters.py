"""Runtime LoRA adapters on a live built-in server (toy): load -> the adapter answers -> unload -> 404, with base
traffic running the whole time; path confinement and the other refusals; /metrics parsed by prometheus-client."""
from __future__ import annotations

import json
import os
import shutil
import threading
import time

import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.serve_fixtures import KEY, make_adapter, start_server

pytestmark = pytest.mark.usefixtures("one_torch_thread")
MSG = [{"role": "user", "content": "Is 12 even?"}]
AUTH = {"Authorization": f"Bearer {KEY}"}
LONG = 160    # tokens: long enough that a stream is still running when its adapter is unloaded


@pytest.fixture(scope="module")
def setup(toy_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("allowed")
    outside = tmp_path_factory.mktemp("outside")
    good = make_adapter(toy_dir, root / "good", seed=1)
    shutil.copytree(good, outside / "elsewhere")
    server, names, stop = start_server("toy", adapter_root=[str(root)], work_dir=root, max_batch_size=4)
    yield server, root, outside, good
    stop()


@pytest.fixture
def client(setup):
    return openai.OpenAI(base_url=setup[0].url + "/v1", api_key=KEY, max_retries=0, timeout=120)


def post(server, route, **body):
    return httpx.post(server.url + route, json=body, headers=AUTH, timeout=120)


def answer(client, model, n=12):
    r = client.chat.completions.create(model=model, messages=MSG, max_tokens=n, temperature=0)
    return r.choices[0].message.content


def engine(server):
    return server.server.config.app.state.backend.engine


def test_load_answer_unload_under_base_traffic(setup, client):
    server, root, _, good = setup
    base = answer(client, "toy")
    stop, base_answers, errors = threading.Event(), [], []

    def traffic():  # the base model keeps answering while adapters come and go
        own = openai.OpenAI(base_url=server.url + "/v1", api_key=KEY, max_retries=0, timeout=120)
        while not stop.is_set():
            try:
                base_answers.append(answer(own, "toy"))
            except Exception as exc:  # noqa: BLE001 - any failure is the finding
                errors.append(repr(exc))
            time.sleep(0.05)

    threads = [threading.Thread(target=traffic) for _ in range(2)]
    for t in threads:
        t.start()
    try:
        r = post(server, "/v1/load_lora_adapter", lora_name="tuned", lora_path=str(good))
        assert r.status_code == 200 and r.text == "Success: LoRA adapter 'tuned' added successfully."
        assert [m.id for m in client.models.list()] == ["toy", "tuned"]
        tuned = answer(client, "tuned", LONG)
        assert tuned != base and len(tuned) > 100
        weights = engine(server).adapter_id("tuned")

        # a stream on the adapter is in flight when it is unloaded: it finishes, on the adapter's weights
        body = {"model": "tuned", "messages": MSG, "max_tokens": LONG, "temperature": 0, "stream": True}
        with httpx.stream("POST", server.url + "/v1/chat/completions", json=body, headers=AUTH, timeout=120) as s:
            lines = s.iter_lines()
            first = [next(lines) for _ in range(3)]
            r = post(server, "/v1/unload_lora_adapter", lora_name="tuned")
            assert r.status_code == 200 and "removed successfully" in r.text
            assert engine(server).slots.usable(weights)       # still in the model: the stream runs on it
            with pytest.raises(openai.NotFoundError) as e:   # new requests for it: 404 at once
                answer(client, "tuned")
            assert e.value.body["code"] == "model_not_found"
            rest = list(lines)
        chunks = [json.loads(x[6:]) for x in first + rest if x.startswith("data: {")]
        assert [x for x in rest if x][-1] == "data: [DONE]"
        assert "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks) == tuned
        deadline = time.monotonic() + 30
        while engine(server).slots.usable(weights) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not engine(server).slots.usable(weights)       # deleted once its last sequence ended
        assert [m.id for m in client.models.list()] == ["toy"]
        assert post(server, "/v1/unload_lora_adapter", lora_name="tuned").status_code == 404

        # the same name again: a fresh load, the same answer
        assert post(server, "/v1/load_lora_adapter", lora_name="tuned", lora_path=str(good)).status_code == 200
        assert answer(client, "tuned", LONG) == tuned
        assert post(server, "/v1/unload_lora_adapter", lora_name="tuned").status_code == 200
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=120)
    assert not errors and base_answers and set(base_answers) == {base}
    assert not engine(server).is_peft    # the last adapter gone: back to the plain model
    assert answer(client, "toy") == base


def test_refusals_leave_the_server_unharmed(setup, client):
    server, root, outside, good = setup

    def refused(name, path, status, code):
        r = post(server, "/v1/load_lora_adapter", lora_name=name, lora_path=str(path))
        assert r.status_code == status, (name, r.status_code, r.text)
        error = r.json()["error"]
        assert error["code"] == code and error["message"], error
        return error["message"]

    assert "outside the adapter roots" in refused("x", outside / "elsewhere", 403, "adapter_path_forbidden")
    refused("x", root / ".." / outside.name / "elsewhere", 403, "adapter_path_forbidden")
    os.symlink(outside / "elsewhere", root / "link")                 # a symlink out of the root
    refused("x", root / "link", 403, "adapter_path_forbidden")
    sneaky = root / "sneaky"                                         # a weight file that links out
    sneaky.mkdir()
    shutil.copy(good / "adapter_config.json", sneaky)
    os.symlink(outside / "elsewhere" / "adapter_model.safetensors", sneaky / "adapter_model.safetensors")
    refused("x", sneaky, 403, "adapter_path_forbidden")
    (root / "plain").mkdir()
    assert "not a LoRA adapter" in refused("x", root / "plain", 400, "not_an_adapter")
    refused("x", root / "missing", 404, "adapter_not_found")
    other = root / "other-base"
    shutil.copytree(good, other)
    config = json.loads((other / "adapter_config.json").read_text())
    (other / "adapter_config.json").write_text(json.dumps({**config, "base_model_name_or_path": "Qwen/Qwen2.5-7B"}))
    assert "trained on Qwen/Qwen2.5-7B" in refused("x", other, 400, "adapter_base_mismatch")
    dora = root / "dora"
    shutil.copytree(good, dora)
    (dora / "adapter_config.json").write_text(json.dumps({**config, "use_dora": True}))
    assert "DoRA" in refused("x", dora, 400, "adapter_unsupported")
    from swiftbox.errors import Unsupported

    with pytest.raises(Unsupported, match="DoRA"):   # the same rule at start-up (PEFT would fail every request)
        start_server("toy", adapters={"d": str(dora)}, work_dir=root)
    targets = root / "targets"       # PEFT itself refuses: no such modules in this model
    shutil.copytree(good, targets)
    (targets / "adapter_config.json").write_text(json.dumps({**config, "target_modules": ["no_such_proj"]}))
    assert "PEFT cannot load it" in refused("x", targets, 400, "adapter_unsupported")
    refused("toy", good, 400, "adapter_exists")                     # the base model's name
    assert post(server, "/v1/load_lora_adapter", lora_name="once", lora_path=str(good)).status_code == 200
    refused("once", good, 400, "adapter_exists")                    # a duplicate name
    r = post(server, "/v1/load_lora_adapter", lora_name="has space", lora_path=str(good))
    assert r.status_code == 422
    assert post(server, "/v1/unload_lora_adapter", lora_name="toy").status_code == 400
    assert [m.id for m in client.models.list()] == ["toy", "once"]      # nothing half-loaded is served
    assert answer(client, "once") != answer(client, "toy")
    assert post(server, "/v1/unload_lora_adapter", lora_name="once").status_code == 200
    assert httpx.get(server.url + "/health", timeout=30).json()["status"] == "ok"


def test_chat_url_lists_loads_and_unloads(setup, client, tmp_path, capsys):
    """`chat --url URL --adapters name=path` loads into the running server and talks to it; the session's
    /models, /use, /load, /unload go through the same routes."""
    import swiftbox as sb
    from swiftbox.pipelines.chat import _command
    from swiftbox.serving.remote import Remote

    server, root, outside, good = setup
    summary = sb.chat(url=server.url, api_key=KEY, adapters={"viachat": str(good)}, prompt="Is 12 even?",
                      max_tokens=8, temperature=0, runs_root=str(tmp_path))
    metrics = summary["metrics"]
    assert metrics["model"] == "viachat" and metrics["answer"] == answer(client, "viachat", 8)
    remote = Remote(server.url + "/v1", KEY)
    served: list[str] = []
    assert _command("/models", remote, "viachat", served) == "viachat" and served == ["toy", "viachat"]
    assert _command("/use toy", remote, "viachat", served) == "toy"
    assert _command("/unload viachat", remote, "viachat", served) == "toy"
    assert _command(f"/load far {outside / 'elsewhere'}", remote, "toy", served) == "toy"   # refused: stays
    assert "refused: 403" in capsys.readouterr().err
    assert _command(f"/load again {good}", remote, "toy", served) == "again"
    assert _command("/unload again", remote, "again", served) == "toy"
    assert remote.models() == ["toy"]
    remote.close()


def scrape(server, headers=AUTH) -> dict:
    """{(name, labels...): value} from /metrics, parsed by prometheus-client's own parser."""
    r = httpx.get(server.url + "/metrics", headers=headers, timeout=30)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    out = {}
    for family in text_string_to_metric_families(r.text):
        for sample in family.samples:
            out[(sample.name, *sorted(sample.labels.items()))] = sample.value
    return out


def value(samples: dict, name: str, **labels) -> float:
    return samples.get((name, *sorted(labels.items())), 0.0)


def test_metrics_scrape_parses_and_moves(setup, client):
    server = setup[0]
    before = scrape(server)
    client.chat.completions.create(model="toy", messages=MSG, max_tokens=6, temperature=0)
    list(client.completions.create(model="toy", prompt="Once upon a time", max_tokens=6, temperature=0, stream=True))
    httpx.post(server.url + "/v1/chat/completions", json={"model": "toy"}, headers=AUTH, timeout=30)   # 422
    after = scrape(server)
    route = "/v1/chat/completions"
    ok = value(after, "swiftbox_http_requests_total", route=route, method="POST", status="200")
    assert ok - value(before, "swiftbox_http_requests_total", route=route, method="POST", status="200") == 1
    assert value(after, "swiftbox_http_requests_total", route="/v1/completions", method="POST", status="200") >= 1
    assert value(after, "swiftbox_http_requests_total", route=route, method="POST", status="422") >= 1
    for name in ("swiftbox_prompt_tokens_total", "swiftbox_generation_tokens_total",
                 "swiftbox_time_to_first_token_seconds_count", "swiftbox_e2e_request_latency_seconds_count"):
        assert value(after, name, model="toy") > value(before, name, model="toy"), name
    assert value(after, "swiftbox_inter_token_latency_seconds_count", model="toy") > 0
    assert value(after, "swiftbox_time_to_first_token_seconds_sum", model="toy") > 0
    assert ("swiftbox_num_requests_running",) in after and ("swiftbox_num_requests_waiting",) in after
    assert value(after, "swiftbox_engine_requests_total") >= 2
    loads = value(after, "swiftbox_lora_adapter_operations_total", op="load", result="ok")
    assert loads >= 1 and value(after, "swiftbox_lora_adapter_operations_total", op="load", result="refused") >= 1


def test_auth_on_metrics_and_adapter_routes(setup):
    server = setup[0]
    assert httpx.get(server.url + "/metrics", timeout=30).status_code == 401
    for route in ("/v1/load_lora_adapter", "/v1/unload_lora_adapter"):
        r = httpx.post(server.url + route, json={"lora_name": "x", "lora_path": "/"}, timeout=30)
        assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"
    assert value(scrape(server), "swiftbox_http_requests_total", route="/metrics", method="GET", status="401") >= 1


def test_metrics_public_and_runtime_adapters_off(toy_dir, tmp_path):
    """A second server in the same process: its own registry, /metrics open, the adapter routes off."""
    server, _, stop = start_server("toy", metrics_public=True, runtime_adapters=False, max_batch_size=1,
                                   work_dir=tmp_path)
    try:
        samples = scrape(server, headers={})
        assert ("swiftbox_num_requests_running",) in samples
        assert not any(k[0] == "swiftbox_prompt_tokens_total" for k in samples)   # nothing from the other server
        assert httpx.get(server.url + "/v1/models", timeout=30).status_code == 401
        r = post(server, "/v1/load_lora_adapter", lora_name="x", lora_path=str(tmp_path))
        assert r.status_code == 403 and r.json()["error"]["code"] == "runtime_adapters_disabled"
    finally:
        stop()


def test_vllm_runtime_adapters_through_the_front_door(setup, toy_dir, tmp_path):
    """vLLM's runtime LoRA updating mode (a stand-in child): swiftbox checks the load, vLLM loads it."""
    import sys
    from pathlib import Path

    from swiftbox.device.cpu import CpuPlatform
    from swiftbox.modeling.loading import resolve_spec
    from swiftbox.serving.adapters import make_policy
    from swiftbox.serving.app import build_app
    from swiftbox.serving.server import ServerThread, bind
    from swiftbox.serving.vllm.child import VllmBackend, VllmProcess
    from swiftbox.serving.vllm.plan import plan
    from swiftbox.steps import ServeStep

    _, root, outside, good = setup
    probe = bind("127.0.0.1", 0)
    port = probe.getsockname()[1]
    probe.close()
    cfg = ServeStep(engine="vllm", runtime_adapters=True, adapter_root=[str(root)])
    fake = [sys.executable, str(Path(__file__).parents[1] / "fakes" / "fake_vllm.py")]
    p = plan(cfg, CpuPlatform(), model_path=str(toy_dir), base_name="toy", loras={}, dtype="float32", port=port,
             executable=fake)
    proc = VllmProcess(p, tmp_path / "vllm.log")
    proc.start(timeout=120)
    backend = VllmBackend(proc)
    backend.runtime_adapters = make_policy(cfg, "vllm", resolve_spec("toy"), max_rank=backend.max_lora_rank)
    server = ServerThread(build_app(backend, api_key=KEY)).start()
    try:
        client = openai.OpenAI(base_url=server.url + "/v1", api_key=KEY, max_retries=0, timeout=60)
        r = post(server, "/v1/load_lora_adapter", lora_name="tuned", lora_path=str(good))
        assert r.status_code == 200 and "added successfully" in r.text
        assert [m.id for m in client.models.list()] == ["toy", "tuned"]
        assert answer(client, "tuned") == "fake answer from tuned"
        wide = root / "wide"
        shutil.copytree(good, wide)
        config = json.loads((wide / "adapter_config.json").read_text())
        (wide / "adapter_config.json").write_text(json.dumps({**config, "r": 128}))
        r = post(server, "/v1/load_lora_adapter", lora_name="wide", lora_path=str(wide))
        assert r.status_code == 400 and "max_lora_rank 64" in r.json()["error"]["message"]
        for name, change in (("pissa", {"init_lora_weights": "pissa"}),
                             ("replicated", {"layer_replication": [[0, 2]]})):
            hostile = root / f"vllm-{name}"        # the same checks as the built-in engine, before vLLM sees it
            shutil.copytree(good, hostile)
            (hostile / "adapter_config.json").write_text(json.dumps({**config, **change}))
            r = post(server, "/v1/load_lora_adapter", lora_name=name, lora_path=str(hostile))
            assert r.status_code == 400 and next(iter(change)) in r.json()["error"]["message"], r.text
        nan = root / "vllm-nan"
        shutil.copytree(good, nan)
        from safetensors.torch import load_file, save_file

        save_file({k: v.fill_(float("nan")) for k, v in load_file(good / "adapter_model.safetensors").items()},
                  nan / "adapter_model.safetensors")
        r = post(server, "/v1/load_lora_adapter", lora_name="nan", lora_path=str(nan))
        assert r.status_code == 400 and "finite" in r.json()["error"]["message"], r.text
        r = post(server, "/v1/load_lora_adapter", lora_name="far", lora_path=str(outside / "elsewhere"))
        assert r.status_code == 403
        assert post(server, "/v1/load_lora_adapter", lora_name="tuned", lora_path=str(good)).status_code == 400
        assert post(server, "/v1/unload_lora_adapter", lora_name="tuned").status_code == 200
        with pytest.raises(openai.NotFoundError):
            answer(client, "tuned")
        assert post(server, "/v1/unload_lora_adapter", lora_name="tuned").status_code == 404
        text = httpx.get(server.url + "/metrics", headers=AUTH, timeout=30).text
        names = {f.name for f in text_string_to_metric_families(text)}
        assert {"vllm:num_requests_running", "swiftbox_http_requests", "swiftbox_lora_adapter_operations"} <= names
    finally:
        server.stop()
        proc.stop()


def test_menu_running_server_lists_loads_and_unloads(setup, client, tmp_path, monkeypatch):
    from menus.server_adapters import DEFAULT_URL, manage
    from tests.fakes.menu_keys import BACKSPACE, DOWN, ENTER, ESC, keys, make_session

    server, root, outside, good = setup
    monkeypatch.delenv("SWIFTBOX_API_KEY", raising=False)
    session = make_session(tmp_path)
    chunks = [BACKSPACE * len(DEFAULT_URL) + server.url + ENTER, KEY + ENTER,
              ENTER, ENTER, str(good) + ENTER, BACKSPACE * 40 + "frommenu" + ENTER,     # load: Other, path, name
              ENTER, ENTER, str(outside / "elsewhere") + ENTER, ENTER,                 # load from outside: refused
              DOWN + ENTER, ENTER,                                                       # unload frommenu
              ESC]
    with keys(monkeypatch, chunks):
        manage(session)
    said = "\n".join(session.echoed)
    assert "serves: toy, frommenu" in said and "added successfully" in said and "removed successfully" in said
    assert "refused: 403" in said
    assert [m.id for m in client.models.list()] == ["toy"]

"""lm-evaluation-harness as a client of swiftbox's server (the real model, SmolLM2-135M-Instruct, float32 on both
sides): its `local-completions` model (token-id prompts, batches of 4) gives every multiple-choice answer the same
log-likelihood as its own `hf` model on the same weights, to 1e-3; its `local-chat-completions` model generates
what the `hf` model generates (gsm8k, greedy); `swiftbox eval --url` prints the table that
`swiftbox eval MODEL` prints, reading the key from SWIFTBOX_API_KEY; a server that returns no prompt logprobs is
refused (exit 2, one line) instead of scored 0.

The shipped slices are the data (swiftbox/benchmarks/slices: arc_challenge, hellaswag), offline."""
from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.conftest import run_cli
from tests.support.serve_fixtures import KEY

pytestmark = pytest.mark.usefixtures("one_torch_thread")
TASKS = ["arc", "hellaswag"]
LIMIT = 4


@pytest.fixture(scope="module")
def real_server(shared_real_server):
    """The session's real-model server (conftest: fp32, max_model_len 2048, batches of 8)."""
    pytest.importorskip("lm_eval")
    server, names = shared_real_server
    return server, names.primary


def loglikelihoods(samples: dict) -> dict:
    """(task, doc_id) -> [(log-likelihood, is_greedy) per choice], from the harness's per-row records."""
    out = {}
    for task, records in samples.items():
        for rec in records:
            out[(task, rec["doc_id"])] = [tuple(r[0]) if isinstance(r[0], (list, tuple)) else tuple(r)
                                          for r in rec["resps"]]
    return out


@pytest.mark.slow     # the harness twice on 2 tasks x 4 rows with the real model: ~60 s on a loaded 2-core box
def test_lm_eval_completions_client_matches_its_hf_model(real_server, real_model_dir, monkeypatch):
    import torch
    from lm_eval.models.huggingface import HFLM
    from lm_eval.models.openai_completions import LocalCompletionsAPI
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from swiftbox.benchmarks import catalog, data, harness

    server, name = real_server
    datas = [td for bench in catalog.resolve(TASKS) for td in data.locate(bench, None)]
    client = LocalCompletionsAPI(model=name, base_url=server.url + "/v1/completions", tokenizer_backend="huggingface",
                                 tokenizer=str(real_model_dir), tokenized_requests=True, batch_size=4,
                                 num_concurrent=1, max_retries=1)
    monkeypatch.setenv("OPENAI_API_KEY", KEY)     # how the harness's API models send a key
    served = harness.evaluate(client, datas, limit=LIMIT, shots=0, chat_template=False)
    model = AutoModelForCausalLM.from_pretrained(real_model_dir, dtype=torch.float32).eval()
    local = harness.evaluate(HFLM(pretrained=model, tokenizer=AutoTokenizer.from_pretrained(real_model_dir),
                                  batch_size=4), datas, limit=LIMIT, shots=0, chat_template=False)
    got, want = loglikelihoods(served["samples"]), loglikelihoods(local["samples"])
    assert set(got) == set(want) and len(got) == LIMIT * len(TASKS)
    worst = 0.0
    for key, choices in want.items():
        assert len(got[key]) == len(choices) >= 2
        for (ll, greedy), (ll_served, greedy_served) in zip(choices, got[key], strict=True):
            assert ll < 0 and ll_served < 0          # a real log-likelihood, not the 0.0 of a missing logprob
            worst = max(worst, abs(ll - ll_served))
            assert greedy == greedy_served, key
    print(f"lm-eval local-completions vs hf: {sum(map(len, want.values()))} choices, worst |diff| {worst:.2e}")
    assert worst < 1e-3, worst
    assert served["results"] == local["results"]


@pytest.mark.slow     # the harness twice on 2 gsm8k rows, 32 greedy tokens each: ~70 s on a loaded 2-core box
def test_lm_eval_chat_client_generates_what_its_hf_model_generates(real_server, real_model_dir, monkeypatch):
    """`local-chat-completions` on a generation task (gsm8k, zero-shot, the chat template on both sides): the
    server's greedy answers are lm-eval's `hf` model's, word for word."""
    import torch
    from lm_eval.models.huggingface import HFLM
    from lm_eval.models.openai_completions import LocalChatCompletion
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from swiftbox.benchmarks import catalog, data, harness

    server, name = real_server
    datas = [td for bench in catalog.resolve(["gsm8k"]) for td in data.locate(bench, None)]
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    chat = LocalChatCompletion(model=name, base_url=server.url + "/v1/chat/completions", tokenizer_backend=None,
                               num_concurrent=1, max_retries=1)
    common = dict(limit=2, shots=0, chat_template=True, max_gen_tokens=32)
    served = harness.evaluate(chat, datas, **common)
    model = AutoModelForCausalLM.from_pretrained(real_model_dir, dtype=torch.float32).eval()
    local = harness.evaluate(HFLM(pretrained=model, tokenizer=AutoTokenizer.from_pretrained(real_model_dir),
                                  batch_size=1), datas, **common)
    answers = [[rec["resps"] for rec in run["samples"]["gsm8k"]] for run in (served, local)]
    assert answers[0] == answers[1] and all(str(a).strip("[]' ") for a in answers[0])


@pytest.mark.slow     # two eval runs through the CLI with the real model: ~90 s on a loaded 2-core box
def test_eval_url_prints_the_table_eval_model_prints(real_server, real_model_dir, tmp_path):
    server, name = real_server
    args = ["--benchmark", "arc", "--limit", str(LIMIT), "--batch-size", "4", "--dtype", "float32"]
    direct = run_cli("eval", str(real_model_dir), *args, "--output", str(tmp_path / "direct"))
    served = run_cli("eval", str(real_model_dir), "--url", server.url, "--api", "completions", *args,
                     "--output", str(tmp_path / "served"), env={"SWIFTBOX_API_KEY": KEY})
    assert direct.returncode == 0 and served.returncode == 0, served.stderr[-2000:]
    figures = [json.loads(r.stdout.strip().splitlines()[-1])["metrics"] for r in (direct, served)]
    assert figures[0] == figures[1] and 0 < figures[0]["arc_challenge"] <= 1


# -- a server without prompt logprobs is refused, not scored 0 --------------------------------------------------

class OldServer(BaseHTTPRequestHandler):
    """Answers completions the way swiftbox did before issue 39: the echoed text, logprobs of the generated token
    only."""

    def do_GET(self):
        self._send({"object": "list", "data": [{"id": "toy", "object": "model"}]})

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        assert self.headers.get("Authorization") == f"Bearer {KEY}"
        lp = {"tokens": ["x"], "token_logprobs": [-0.5], "top_logprobs": [{"x": -0.5}], "text_offset": [0]}
        self._send({"id": "c", "object": "text_completion", "created": 0, "model": body["model"],
                    "choices": [{"index": 0, "text": "x", "logprobs": lp, "finish_reason": "length"}]})

    def _send(self, answer):
        raw = json.dumps(answer).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def log_message(self, *args):
        pass


@pytest.fixture
def old_server():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), OldServer)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_port}"
    httpd.shutdown()


def test_the_probe_refuses_a_server_without_prompt_logprobs(old_server, toy_dir):
    from swiftbox.benchmarks.harness import check_prompt_logprobs
    from swiftbox.errors import UserError

    with pytest.raises(UserError, match="returns no log-probabilities for the prompt") as err:
        check_prompt_logprobs(old_server, "toy", KEY, str(toy_dir), ["hellaswag"])
    assert "1 values for a" in str(err.value) and "hellaswag" in str(err.value)


@pytest.mark.slow     # the CLI in a child process, importing the harness: ~30 s on a loaded 2-core box
def test_eval_url_refuses_a_server_without_prompt_logprobs(tmp_path):
    pytest.importorskip("lm_eval")
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), OldServer)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    key_file = tmp_path / "key"
    key_file.write_text(KEY + "\n")
    try:
        r = run_cli("eval", "toy", "--url", f"http://127.0.0.1:{httpd.server_port}", "--api", "completions",
                    "--benchmark", "hellaswag", "--api-key-file", str(key_file), "--output", str(tmp_path / "out"))
    finally:
        httpd.shutdown()
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr[-2000:]
    assert "returns no log-probabilities for the prompt" in lines[-1] and "hellaswag" in lines[-1]
    assert not Path(tmp_path / "out").exists()


def test_eval_url_takes_the_key_like_chat_url(tmp_path, monkeypatch):
    from swiftbox.errors import UserError
    from swiftbox.pipelines.eval_benchmarks import check_benchmarks, server_key
    from swiftbox.steps import EvalStep

    monkeypatch.setenv("SWIFTBOX_API_KEY", "from-env")
    url = "http://127.0.0.1:9"
    assert server_key(EvalStep(benchmark="gsm8k", url=url)) == "from-env"
    (tmp_path / "key").write_text("from-file\nrest\n")
    assert server_key(EvalStep(benchmark="gsm8k", url=url, api_key_file=str(tmp_path / "key"))) == "from-file"
    assert server_key(EvalStep(benchmark="gsm8k", url=url, api_key="flag", api_key_file=str(tmp_path / "k"))) == "flag"
    (tmp_path / "empty").write_text("\n")
    with pytest.raises(UserError, match="empty"):
        check_benchmarks(EvalStep(benchmark="gsm8k", url=url, api_key_file=str(tmp_path / "empty")))
    monkeypatch.delenv("SWIFTBOX_API_KEY")
    assert server_key(EvalStep(benchmark="gsm8k", url=url)) is None
    with pytest.raises(UserError, match="tokenizer"):     # log-likelihood needs the model's tokenizer on this side
        check_benchmarks(EvalStep(benchmark="arc", url=url, api="completions"))

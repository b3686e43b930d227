"""Anthropic prefill on the real model (SmolLM2-135M-Instruct), through the official `anthropic` client: a last
assistant turn is continued from inside it (the documented way to steer an answer), so the answer is the
continuation of the prefilled words - where a finished turn would start a new answer instead."""
from __future__ import annotations

import pytest

from tests.support.serve_fixtures import KEY

anthropic = pytest.importorskip("anthropic")
pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_torch_thread")]


def test_prefill_is_continued_on_the_real_model(shared_real_server):
    server, names = shared_real_server      # the session's real-model server (conftest)
    client = anthropic.Anthropic(base_url=server.url, api_key=KEY, max_retries=0, timeout=300)
    ask = {"role": "user", "content": "What is the capital of France? Answer in one sentence."}
    prefill = "The capital of France is"
    msg = client.messages.create(model=names.base, max_tokens=8, extra_body={"temperature": 0},
                                 messages=[ask, {"role": "assistant", "content": prefill}])
    text = msg.content[0].text
    assert "Paris" in text.split(".")[0], text            # the sentence goes on: "... is Paris."
    assert not text.lstrip().startswith(prefill), text    # continued, not started again
    stopped = client.messages.create(model=names.base, max_tokens=8, extra_body={"temperature": 0},
                                     messages=[ask, {"role": "assistant", "content": prefill}],
                                     stop_sequences=["Paris"])
    assert stopped.stop_reason == "stop_sequence" and stopped.stop_sequence == "Paris"
    assert stopped.content == [] or "Paris" not in stopped.content[0].text

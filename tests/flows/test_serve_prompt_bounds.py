"""Issue 32, class 2: the prompt path is bounded before work. A client's own chat template is refused unless the
server trusts request templates (--trust-request-chat-template, off by default); `chat_template_kwargs` takes only
the template switches of the preset families (an allow-list of keys and types: 400 naming the key, never 500);
the rendered prompt is capped while it is rendered, so neither a template that expands hugely nor a request whose
tools expand the prompt makes the server render or tokenize more than its context can take."""
from __future__ import annotations

import tracemalloc

import httpx
import pytest

from tests.support.serve_fixtures import KEY, start_server

pytestmark = pytest.mark.usefixtures("one_torch_thread")
AUTH = {"Authorization": f"Bearer {KEY}"}
MSG = [{"role": "user", "content": "Is 12 even?"}]
BOMB = "{% for i in range(100000) %}{{ 'x' * 1000 }}{% endfor %}"      # 100 MB of text from 60 bytes
PLAIN = "{% for m in messages %}{{ m['content'] }}{% endfor %}"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    srv, _, stop = start_server("toy", work_dir=tmp_path_factory.mktemp("bounds"), max_batch_size=2)
    yield srv
    stop()


def chat(server, **extra):
    body = {"model": "toy", "messages": MSG, "max_tokens": 4, "temperature": 0, **extra}
    return httpx.post(server.url + "/v1/chat/completions", json=body, headers=AUTH, timeout=120)


@pytest.mark.parametrize("where", ["chat_template_kwargs", "top level"])
def test_a_client_chat_template_is_refused_by_default(server, where):
    extra = {"chat_template_kwargs": {"chat_template": PLAIN}} if where != "top level" else {"chat_template": PLAIN}
    r = chat(server, **extra)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["code"] == "chat_template_not_allowed" and "--trust-request-chat-template" in error["message"]
    assert chat(server).status_code == 200


BAD_KWARGS = {   # chat_template_kwargs -> the key the 400 names
    "messages": {"messages": []},
    "tools": {"tools": "x"},
    "tokenize": {"tokenize": True},
    "add_generation_prompt": {"add_generation_prompt": False},
    "continue_final_message": {"continue_final_message": True},
    "return_dict": {"return_dict": True},
    "documents": {"documents": [{"title": "t", "text": "x"}]},
    "custom_tools": {"custom_tools": [{"type": "function", "function": {"name": "f"}}]},
    "xml_tools": {"xml_tools": []},
    "bos_token": {"bos_token": "<s>"},
    "unknown": {"nope": 1},
    "enable_thinking not a bool": {"enable_thinking": "no"},
    "enable_thinking a number": {"enable_thinking": 1},
    "reasoning_effort not a level": {"reasoning_effort": "x" * 50},
    "reasoning_effort a number": {"reasoning_effort": 5},
    "date_string too long": {"date_string": "x" * 10_000},
    "builtin_tools not a list of names": {"builtin_tools": [{"a": 1}]},
}


@pytest.mark.parametrize("case", list(BAD_KWARGS))
def test_chat_template_kwargs_outside_the_allow_list_are_400_naming_the_key(server, case):
    kwargs = BAD_KWARGS[case]
    r = chat(server, chat_template_kwargs=kwargs)
    assert r.status_code == 400, (case, r.status_code, r.text)
    error = r.json()["error"]
    key = next(iter(kwargs))
    assert error["param"] == f"chat_template_kwargs.{key}" and key in error["message"], error
    assert error["code"] == "invalid_chat_template_kwargs"


@pytest.mark.parametrize("kwargs", [{}, {"enable_thinking": False}, {"enable_thinking": True},
                                    {"reasoning_effort": "low"}, {"thinking": False}, {"date_string": "1 Jan 2026"},
                                    {"tools_in_user_message": False}, {"preserve_thinking": True}])
def test_allowed_chat_template_kwargs_are_taken(server, kwargs):
    r = chat(server, chat_template_kwargs=kwargs)
    assert r.status_code == 200, r.text


def test_the_rendered_prompt_is_capped_before_it_is_tokenized(server, monkeypatch):
    """Tools are rendered into the prompt (the default tool format): 300 KB of them on a 256-token server is
    refused once the rendering passes the server's prompt bound, and the tokenizer never sees it."""
    backend = server.server.config.app.state.backend
    seen: list[int] = []
    encode = backend.encode
    monkeypatch.setattr(backend, "encode", lambda text, *a, **k: seen.append(len(text)) or encode(text, *a, **k))
    tools = [{"type": "function", "function": {"name": f"f{i}", "description": "d" * 1000,
                                               "parameters": {"type": "object", "properties": {}}}}
             for i in range(300)]
    r = chat(server, tools=tools)
    assert r.status_code == 400 and r.json()["error"]["code"] == "context_length_exceeded", r.text
    assert all(n <= backend.max_prompt_chars for n in seen), seen
    assert chat(server).status_code == 200


@pytest.fixture(scope="module")
def trusting(tmp_path_factory):
    srv, _, stop = start_server("toy", work_dir=tmp_path_factory.mktemp("trusting"), max_batch_size=1,
                                trust_request_chat_template=True)
    yield srv
    stop()


def test_a_trusted_client_template_is_used(trusting):
    r = chat(trusting, chat_template=PLAIN)
    assert r.status_code == 200, r.text
    tokenizer = trusting.server.config.app.state.backend.tokenizer
    assert r.json()["usage"]["prompt_tokens"] == len(tokenizer("Is 12 even?", add_special_tokens=False)["input_ids"])
    r = chat(trusting, chat_template_kwargs={"chat_template": PLAIN, "enable_thinking": False})
    assert r.status_code == 200, r.text


@pytest.mark.parametrize("where", ["chat_template_kwargs", "top level"])
def test_a_template_bomb_is_stopped_while_it_renders(trusting, where):
    """100 MB from a 60-byte template: refused once the rendering passes the bound, never built whole."""
    extra = {"chat_template_kwargs": {"chat_template": BOMB}} if where != "top level" else {"chat_template": BOMB}
    tracemalloc.start()
    try:
        r = chat(trusting, **extra)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert r.status_code == 400 and r.json()["error"]["code"] == "context_length_exceeded", r.text
    assert peak < 16 << 20, f"peak {peak >> 20} MB while refusing a template bomb"
    assert chat(trusting).status_code == 200


def test_one_expression_that_would_build_a_gigabyte_is_refused_before_it_exists(trusting):
    """`'x' * 10**9` is one jinja expression: no loop for the output cap to stop; the sized sandbox the templates
    compile in (compat._sized_sandbox) refuses it under the request's bound before the string exists."""
    tracemalloc.start()
    try:
        r = chat(trusting, chat_template="{{ 'x' * 10**9 }}")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert r.status_code == 400 and r.json()["error"]["code"] == "context_length_exceeded", r.text
    assert peak < 16 << 20, f"peak {peak >> 20} MB while refusing a one-expression bomb"
    assert chat(trusting).status_code == 200

"""The request bodies the real coding-agent CLIs send (Claude Code 2.1.x to /v1/messages, Codex 0.16x to
/v1/responses; recorded from their traffic: tests/fixtures/agent_cli_requests.json, README beside it), posted as
recorded to the built-in server on the toy: each is answered with a well-formed event stream in the order the
official API sends it, never a 5xx. Each body is sent twice: answered by the toy's own text, and answered with a
call to the CLI's shell tool (the answer parser replaced, as in test_serve_agent_apis.py), so both the text and
the tool-call event sequences are checked on what the CLIs really send.

Fast (default suite) but for most of Claude Code's default-config bodies (slow: ~20k toy tokens each) and
Codex's default-config bodies answered with text (slow: their tool-call answers and the trimmed bodies' text
answers stay in the default suite); the toy
answers within the recorded max_tokens (512, or the server's default when Codex sets none). The slow proof with
the CLIs themselves is tests/flows/test_agent_clis.py; the recording is re-made by tests/support/agent_cli_capture.py.
"""
from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from swiftbox.serving.builtin.backend import DEFAULT_CHAT_MAX_TOKENS
from swiftbox.serving.toolformats import Parsed
from tests.support.serve_fixtures import KEY, start_server

pytestmark = pytest.mark.usefixtures("one_torch_thread")

FIXTURE = Path(__file__).parents[1] / "fixtures" / "agent_cli_requests.json"
RECORDED = json.loads(FIXTURE.read_text())["requests"]
NAME = "local"          # the model name the CLIs were pointed at
SHELL = {"Bash": '{"command": "echo hi"}', "exec_command": '{"cmd": "echo hi"}'}
STOP_REASONS = {"end_turn", "max_tokens", "tool_use", "stop_sequence"}


def _label(rec: dict) -> str:
    body = rec["body"]
    turns = len(body.get("messages") or body.get("input") or [])
    kind = "title" if "format" in (body.get("output_config") or {}) else f"{turns}turns"
    return f"{rec['cli'].split()[0]}-{rec['config']}-{kind}"


def _cases() -> list:
    """(request, answered with a tool call?) pairs. Claude Code's default bodies are ~20k toy tokens each (its 25
    tools): of those only the last turn answered with a tool call is in the default suite, the rest are slow."""
    out = []
    for r in RECORDED:
        big = r["path"] == "/v1/messages" and r["config"] == "default" and r["body"].get("tools")
        last = big and r is [x for x in RECORDED if x["path"] == r["path"] and x["config"] == "default"][-1]
        has_shell = any(t.get("name") in SHELL for t in r["body"].get("tools") or [])
        # Codex's default bodies answered with text: 512 sampled toy tokens on ~4k of context (~10 s each quiet);
        # the same bodies stay in the default suite answered with a tool call, the text stream on the trimmed ones
        codex_default = r["path"] == "/v1/responses" and r["config"] == "default"
        for tool_turn in (False, True) if has_shell else (False,):   # a tool-call answer needs a shell tool
            slow = (big and not (last and tool_turn)) or (codex_default and not tool_turn)
            marks = [pytest.mark.slow] if slow else []
            out.append(pytest.param(r, tool_turn, id=f"{_label(r)}-{'toolcall' if tool_turn else 'text'}",
                                    marks=marks))
    return out


CASES = _cases()


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    server, _names, stop = start_server("toy", max_model_len=32768, served_model_name=NAME, max_batch_size=2,
                                        work_dir=tmp_path_factory.mktemp("agent-cli-shapes"))
    backend = server.server.config.app.state.backend
    real_parser, real_params = backend.answer_parser, backend.params
    backend.tool_turn = False      # the test's switch: answer with a call to the CLI's shell tool

    def parser(req):
        names = [t["function"]["name"] for t in req.tools or []]
        shell = next((n for n in SHELL if n in names), None)
        if backend.tool_turn and shell:
            call = {"id": "call_shape", "type": "function", "function": {"name": shell, "arguments": SHELL[shell]}}
            return lambda text: Parsed(None, "Run it.", [call])
        return real_parser(req)

    def params(req, *args):
        found = real_params(req, *args)
        if backend.tool_turn:          # ...and that answer ends at its first character, as a finished call does
            found.stop = [chr(c) for c in range(32, 127)] + ["\n"]
        return found

    backend.answer_parser, backend.params = parser, params
    yield server, backend
    stop()


def sse(text: str) -> list[tuple[str, dict]]:
    """(event name, data) of each server-sent event; the name line and the data's type must agree."""
    out = []
    for block in text.strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line)
        assert set(lines) == {"event", "data"}, block[:300]
        data = json.loads(lines["data"])
        assert data["type"] == lines["event"], block[:300]
        out.append((lines["event"], data))
    return out


def post(server, rec: dict) -> httpx.Response:
    return httpx.post(server.url + rec["path"], json=rec["body"], timeout=600,
                      headers={"x-api-key" if rec["path"] == "/v1/messages" else "Authorization":
                               KEY if rec["path"] == "/v1/messages" else f"Bearer {KEY}"})


def check_messages_stream(events: list[tuple[str, dict]], tools: list[dict]) -> dict:
    """Anthropic's order: message_start, ping*, then per block content_block_start, its deltas (of the block's
    kind), content_block_stop; message_delta (stop_reason, usage); message_stop. Returns the rebuilt message."""
    names = [n for n, _ in events]
    assert names[0] == "message_start" and names[-2:] == ["message_delta", "message_stop"], names[:5]
    assert "error" not in names
    msg = events[0][1]["message"]
    assert msg["type"] == "message" and msg["role"] == "assistant" and msg["content"] == [] and msg["model"] == NAME
    assert msg["stop_reason"] is None and msg["id"].startswith("msg")
    blocks: list[dict] = []
    open_at = None
    for name, data in events[1:-2]:
        if name == "ping":
            continue
        if name == "content_block_start":
            assert open_at is None and data["index"] == len(blocks)
            blocks.append(dict(data["content_block"], _json=""))
            open_at = data["index"]
        elif name == "content_block_delta":
            assert data["index"] == open_at
            block, delta = blocks[open_at], data["delta"]
            want = {"text": "text_delta", "thinking": "thinking_delta", "tool_use": "input_json_delta"}
            assert delta["type"] == want[block["type"]], (block["type"], delta)
            if delta["type"] == "text_delta":
                block["text"] += delta["text"]
            elif delta["type"] == "thinking_delta":
                block["thinking"] += delta["thinking"]
            else:
                block["_json"] += delta["partial_json"]
        else:
            assert name == "content_block_stop" and data["index"] == open_at, (name, data)
            open_at = None
    assert open_at is None and blocks, "no content block"
    final = events[-2][1]
    assert final["delta"]["stop_reason"] in STOP_REASONS and final["usage"]["output_tokens"] > 0
    assert final["usage"]["input_tokens"] > 0
    for b in blocks:
        if b["type"] == "tool_use":
            assert b["name"] in {t["name"] for t in tools} and b["id"]
            b["input"] = json.loads(b["_json"])
    return {"content": blocks, "stop_reason": final["delta"]["stop_reason"]}


def check_responses_stream(events: list[tuple[str, dict]], body: dict) -> dict:
    """The Responses API's order: response.created, response.in_progress, then per output item
    output_item.added, its parts and deltas, output_item.done; response.completed or .incomplete last;
    sequence_number 0, 1, 2, ... Returns the final Response."""
    names = [n for n, _ in events]
    assert names[:2] == ["response.created", "response.in_progress"], names[:4]
    assert names[-1] in ("response.completed", "response.incomplete") and "error" not in names
    assert [d["sequence_number"] for _, d in events] == list(range(len(events)))
    first = events[0][1]["response"]
    assert first["status"] == "in_progress" and first["model"] == NAME and first["output"] == []
    items: list[dict] = []
    open_item = None
    for name, data in events[2:-1]:
        if name == "response.output_item.added":
            assert open_item is None and data["output_index"] == len(items)
            open_item = data["item"]
            items.append(open_item)
            text = ""
        elif name == "response.output_item.done":
            assert open_item is not None and data["output_index"] == len(items) - 1
            assert data["item"]["id"] == open_item["id"] and data["item"]["type"] == open_item["type"]
            items[-1] = data["item"]
            open_item = None
        else:
            assert open_item is not None and data["item_id"] == open_item["id"], (name, data)
            kind = open_item["type"]
            allowed = {"message": ("response.content_part.added", "response.output_text.delta",
                                   "response.output_text.done", "response.content_part.done"),
                       "function_call": ("response.function_call_arguments.delta",
                                         "response.function_call_arguments.done"),
                       "reasoning": ("response.reasoning_summary_part.added", "response.reasoning_summary_text.delta",
                                     "response.reasoning_summary_text.done", "response.reasoning_summary_part.done")}
            assert name in allowed[kind], (kind, name)
            if name.endswith(".delta"):
                text += data["delta"]
            elif name in ("response.output_text.done", "response.reasoning_summary_text.done"):
                assert data["text"] == text
            elif name == "response.function_call_arguments.done":
                assert data["arguments"] == text
    assert open_item is None
    final = events[-1][1]["response"]
    assert final["output"] == items and items, "no output item"
    assert final["id"] == first["id"] and final["usage"]["input_tokens"] > 0 and final["usage"]["output_tokens"] > 0
    assert final["store"] is body.get("store", True) and final["tool_choice"] == body.get("tool_choice", "auto")
    for item in items:
        assert item.get("status", "completed") == "completed"
        if item["type"] == "function_call":
            assert item["name"] in {t.get("name") for t in body["tools"]} and json.loads(item["arguments"])
    return final


def test_the_fixture_is_what_the_clis_send():
    """Guards the recording itself: both CLIs, both configurations, a tool round trip each, and the fields the
    issue names (so a re-recording that lost them fails here, not silently)."""
    by = {(r["path"], r["config"]) for r in RECORDED}
    assert by == {(p, c) for p in ("/v1/messages", "/v1/responses") for c in ("trimmed", "default")}
    claude = [r["body"] for r in RECORDED if r["path"] == "/v1/messages"]
    codex = [r["body"] for r in RECORDED if r["path"] == "/v1/responses"]
    assert all(b["stream"] is True for b in claude + codex)
    main = [b for b in claude if b.get("tools")]
    assert main and all(isinstance(b["system"], list) and "thinking" in b and "metadata" in b for b in main)
    assert any("cache_control" in blk for b in main for blk in b["system"])
    assert all("input_schema" in t for b in main for t in b["tools"])
    assert any(blk["type"] == "tool_result" for b in main for m in b["messages"] if isinstance(m["content"], list)
               for blk in m["content"])
    assert any(m["role"] == "system" for b in main for m in b["messages"])     # Claude Code 2.1.154+
    assert all(b["store"] is False and b["include"] and "reasoning" in b for b in codex)
    assert all(t["type"] in ("function", "namespace", "web_search") for b in codex for t in b["tools"])
    kinds = {i.get("type") for b in codex for i in b["input"]}
    assert {"message", "function_call", "function_call_output"} <= kinds


@pytest.mark.parametrize(("rec", "tool_turn"), CASES)
def test_recorded_cli_request_streams_a_well_formed_answer(live, rec, tool_turn):
    server, backend = live
    body = rec["body"]
    backend.tool_turn = tool_turn
    r = post(server, rec)
    assert r.status_code < 500, r.text[:500]
    if rec["path"] == "/v1/messages" and "format" in (body.get("output_config") or {}):
        # Claude Code's session-title request asks for structured output: answered under its schema, {"title": ...}
        # (the toy samples; cut at max_tokens, the text is still the start of that object)
        assert r.status_code == 200, r.text[:500]
        message = check_messages_stream(sse(r.text), [])
        assert [b["type"] for b in message["content"]] == ["text"]
        text = message["content"][0]["text"]
        assert text.startswith('{"title": "'), text[:200]
        if message["stop_reason"] == "end_turn":
            assert list(json.loads(text)) == ["title"]
        return
    assert r.status_code == 200, r.text[:500]
    assert r.headers["content-type"].startswith("text/event-stream")
    events = sse(r.text)
    if rec["path"] == "/v1/messages":
        message = check_messages_stream(events, body["tools"])
        kinds = [b["type"] for b in message["content"]]
        if tool_turn:
            assert kinds == ["thinking", "tool_use"] and message["stop_reason"] == "tool_use"
            assert message["content"][1]["input"] == json.loads(SHELL["Bash"])
        else:
            assert kinds == ["text"] and message["content"][0]["text"]
            # sampled (Claude Code sends no temperature): cut at max_tokens, or the toy's end token past its 2048
            # positions
            cut = events[-2][1]["usage"]["output_tokens"] == body["max_tokens"]
            assert message["stop_reason"] == ("max_tokens" if cut else "end_turn")
    else:
        final = check_responses_stream(events, body)
        kinds = [o["type"] for o in final["output"]]
        if tool_turn:
            assert kinds == ["reasoning", "function_call"] and final["status"] == "completed"
            assert final["output"][1]["arguments"] == SHELL["exec_command"]
        else:
            assert kinds == ["message"] and final["output"][0]["content"][0]["text"]
            # Codex sends no temperature (1.0: sampled) and no max_output_tokens (the server's default, 512): the
            # toy is cut there, or (past its 2048 positions) may sample its end token first
            cut = final["usage"]["output_tokens"] == DEFAULT_CHAT_MAX_TOKENS
            assert final["status"] == ("incomplete" if cut else "completed"), final["usage"]
            assert (final["incomplete_details"] == {"reason": "max_output_tokens"}) is cut
        # store: false, as Codex sends it: nothing kept, so the id cannot be continued from
        again = httpx.post(server.url + "/v1/responses", headers={"Authorization": f"Bearer {KEY}"}, timeout=60,
                           json={"model": NAME, "input": "hi", "previous_response_id": final["id"]})
        assert again.status_code == 404, again.text


@pytest.mark.parametrize("path", ["/v1/messages", "/v1/responses"])
def test_an_unknown_top_level_field_is_ignored_and_logged_once(live, path, caplog):
    """A field in neither the SDK's request type nor swiftbox's known extras (swiftbox/serving/fields.py) is a
    vendor's own: ignored, as vLLM does, and logged once per field name (not per request), never a 5xx. The fields
    the SDKs declare that this server cannot honour are refused by name (tests/unit/test_serve_fields.py)."""
    import logging

    from swiftbox.serving import fields

    server, backend = live
    name = f"not_a_field_{path.rsplit('/', 1)[-1]}"
    fields._logged.discard((path.rsplit("/", 1)[-1], name))
    rec = next(r for r in RECORDED if r["path"] == path and r["body"].get("tools"))
    body = {**rec["body"], name: 1, "max_tokens" if path == "/v1/messages" else "max_output_tokens": 2}
    body.pop("output_config", None)
    with caplog.at_level(logging.WARNING, logger="swiftbox.serve"):
        for _ in range(2):
            r = post(server, {**rec, "body": body})
            assert r.status_code == 200, r.text[:300]
    assert sum(name in m.getMessage() for m in caplog.records) == 1


def test_system_messages_inside_messages_join_the_system_prompt(live):
    """Claude Code 2.1.154+ puts role: system messages in `messages`: the prompt is the one with their text after
    `system` (one leading system message), and a role outside user/assistant/system is still a 400."""
    server, _backend = live

    def count(body: dict) -> httpx.Response:
        return httpx.post(server.url + "/v1/messages/count_tokens", headers={"x-api-key": KEY}, timeout=60,
                          json={"model": NAME, **body})

    inside = count({"system": [{"type": "text", "text": "Be brief."}], "messages": [
        {"role": "user", "content": "hi"}, {"role": "system", "content": [{"type": "text", "text": "Agents: none."}]},
        {"role": "user", "content": "again"}]})
    joined = count({"system": "Be brief.\n\nAgents: none.", "messages": [{"role": "user", "content": "hi"},
                                                                        {"role": "user", "content": "again"}]})
    apart = count({"system": "Be brief.", "messages": [{"role": "user", "content": "hi"},
                                                      {"role": "user", "content": "again"}]})
    assert inside.status_code == joined.status_code == 200, inside.text
    assert inside.json()["input_tokens"] == joined.json()["input_tokens"] > apart.json()["input_tokens"]
    bad = count({"messages": [{"role": "tool", "content": "x"}]})
    assert bad.status_code == 400 and "messages.0.role" in bad.json()["error"]["message"]

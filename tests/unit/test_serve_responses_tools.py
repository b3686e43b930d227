"""The Responses API's tool kinds on the chat path (responses/translate.py): a `namespace` tool's
functions are offered under flat names (`ns__name`) and their calls go back as {name, namespace}, whole and
streamed, and as history; hosted tools (web_search ...) are accepted and not offered unless a tool_choice
requires one; unknown kinds are a 400 naming the field. The tool list is the one Codex 0.169 sends."""
from __future__ import annotations

import json

import pytest

from swiftbox.serving.answer import Output
from swiftbox.serving.errors import ApiError
from swiftbox.serving.events import Finish, ToolCallDelta
from swiftbox.serving.protocol import usage
from swiftbox.serving.responses import translate
from swiftbox.serving.responses.protocol import ResponsesRequest
from swiftbox.serving.responses.render import ResponsesBuilder

FN = {"type": "function", "name": "exec_command", "description": "run", "strict": False,
      "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}}}
SPACE = {"type": "namespace", "name": "multi_agent_v1", "description": "sub-agents",
         "tools": [{"type": "function", "name": "spawn_agent", "parameters": {"type": "object"}},
                   {"type": "function", "name": "wait_agent", "description": "wait", "parameters": {"type": "object"}}]}
CODEX_TOOLS = [FN, SPACE, {"type": "web_search", "external_web_access": False}]


def request(**fields) -> ResponsesRequest:
    return ResponsesRequest.model_validate({"model": "toy", "input": "hi", **fields})


def test_namespace_functions_offered_flat_and_hosted_tools_not_offered():
    chat, _, names = translate.to_chat(request(tools=CODEX_TOOLS, tool_choice="auto"), [])
    offered = [t["function"]["name"] for t in chat.tools]
    assert offered == ["exec_command", "multi_agent_v1__spawn_agent", "multi_agent_v1__wait_agent"]
    assert names == {"multi_agent_v1__spawn_agent": ("multi_agent_v1", "spawn_agent"),
                     "multi_agent_v1__wait_agent": ("multi_agent_v1", "wait_agent")}
    assert chat.tools[2]["function"]["description"] == "wait"
    only_hosted, _, _ = translate.to_chat(request(tools=[{"type": "web_search"}]), [])
    assert only_hosted.tools is None


@pytest.mark.parametrize("fields, param", [
    ({"tools": CODEX_TOOLS, "tool_choice": {"type": "web_search"}}, "tool_choice.type"),
    ({"tools": [{"type": "web_search"}], "tool_choice": "required"}, "tool_choice"),
    ({"tools": [{"type": "custom", "name": "apply_patch"}]}, "tools.0.type"),
    ({"tools": [{"type": "namespace", "name": "ns", "tools": [{"type": "web_search"}]}]}, "tools.0.tools.0.type"),
    ({"tools": [{"type": "namespace", "tools": []}]}, "tools.0.name"),
    ({"tools": [{"type": "function", "name": "a__b"}, {"type": "namespace", "name": "a",
                                                       "tools": [{"type": "function", "name": "b"}]}]}, "tools"),
])
def test_refusals_name_the_field(fields, param):
    with pytest.raises(ApiError) as err:
        translate.to_chat(request(**fields), [])
    assert err.value.status == 400 and err.value.param == param


def test_named_choice_of_a_namespaced_function_is_its_flat_name():
    chat, _, _ = translate.to_chat(
        request(tools=CODEX_TOOLS, tool_choice={"type": "function", "name": "spawn_agent",
                                                "namespace": "multi_agent_v1"}), [])
    assert chat.tool_choice == {"type": "function", "function": {"name": "multi_agent_v1__spawn_agent"}}


def test_calls_go_back_with_their_namespace_whole_streamed_and_as_history():
    _, convo, names = translate.to_chat(request(tools=CODEX_TOOLS), [])
    call = {"id": "call_1", "type": "function", "function": {"name": "multi_agent_v1__wait_agent", "arguments": "{}"}}
    plain = {"id": "call_2", "type": "function", "function": {"name": "exec_command", "arguments": '{"cmd":"ls"}'}}
    whole = ResponsesBuilder("toy", {}, names).whole(Output(0, None, "tool_calls", None, [call, plain]),
                                                     usage(3, 4))
    first, second = whole["output"]
    assert (first["name"], first["namespace"], first["call_id"]) == ("wait_agent", "multi_agent_v1", "call_1")
    assert second["name"] == "exec_command" and "namespace" not in second

    stream = ResponsesBuilder("toy", {}, names)
    events = stream.start() + stream.feed(ToolCallDelta(0, 0, "call_1", "multi_agent_v1__wait_agent"))
    events += stream.feed(ToolCallDelta(0, 0, arguments="{}")) + stream.feed(Finish(0, "tool_calls"))
    events += stream.end(usage(3, 4))
    bodies = [json.loads(e.split("data: ", 1)[1]) for e in events]
    added = next(b for b in bodies if b["type"] == "response.output_item.added")["item"]
    done = next(b for b in bodies if b["type"] == "response.function_call_arguments.done")
    assert (added["name"], added["namespace"]) == ("wait_agent", "multi_agent_v1") and done["name"] == "wait_agent"

    history = convo + translate.items_to_messages(whole["output"])        # previous_response_id
    assert history[-1]["tool_calls"][0]["function"]["name"] == "multi_agent_v1__wait_agent"
    resent, _, _ = translate.to_chat(request(tools=CODEX_TOOLS, input=[   # or the items sent back
        {"type": "message", "role": "user", "content": "hi"},
        {**first, "status": "completed"},
        {"type": "function_call_output", "call_id": "call_1", "output": "done"}]), [])
    assert resent.messages[1].tool_calls[0].function.name == "multi_agent_v1__wait_agent"

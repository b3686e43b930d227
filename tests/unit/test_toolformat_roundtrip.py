"""Issue 39: a tool call written the way each family's real template writes it comes back from the built-in engine
as that call. For every template fixture (tests/fixtures/templates, provenance in its README): the assistant's
get_weather turn rendered through the template (data.render: apply_chat_template with the tools, swiftbox's default
format where the template has none), past the generation prompt, read back - whole and a character at a time - by
the ToolFormat the server detects from that template. Every preset's vLLM tool parser is a built-in format, the same
one the engine reads (or the family says why not), and a preset without one says why."""
from __future__ import annotations

import pytest

from swiftbox.catalog import presets as registry
from swiftbox.serving import toolformats
from tests.support import family_table as ft


@pytest.fixture(scope="module")
def tok(toy_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(toy_dir)


@pytest.mark.parametrize("name", ft.NAMES)
def test_the_templates_tool_call_parses_back_to_the_call(tok, name):
    fmt, (got, want) = ft.served_tool_case(tok, name)
    assert got == want, (name, fmt, ft.tool_call_written(tok, name)[1])
    template = (ft.TEMPLATES / f"{name}.jinja").read_text(encoding="utf-8")
    native = ft.FAMILIES[name].tool_call is not None
    assert (fmt != "hermes") or not native or "<tool_call>\n{" in ft.FAMILIES[name].tool_call, name
    assert toolformats.detect(template).name == fmt


def test_a_format_read_with_the_wrong_parser_is_not_a_call(tok):
    """What the issue saw: Qwen3.5's XML read as hermes JSON, gpt-oss's channels read without their special tokens,
    Mistral v11 calls read as the v3 list - plain text, not tool calls."""
    prompt, qwen35 = ft.tool_call_written(tok, "Qwen-Qwen3.5-4B")
    assert toolformats.parse(qwen35, "hermes", think=True, tool_names={"get_weather"}).tool_calls == []
    _, harmony = ft.tool_call_written(tok, "openai-gpt-oss-120b")
    stripped = harmony.replace("<|channel|>", "").replace("<|message|>", "").replace("<|call|>", "")
    assert toolformats.parse(stripped, "harmony", tool_names={"get_weather"}).tool_calls == []
    assert toolformats.parse(qwen35, "qwen3_xml", think=True, tool_names={"get_weather"}).tool_calls


def fixture_of(preset) -> str:
    return ft.PRESET_FIXTURE.get(preset.name, ft.FIXTURE_OF.get(preset.family, ""))


def test_every_presets_vllm_parser_is_a_builtin_format():
    for p in registry.PRESETS:
        template = (ft.TEMPLATES / f"{fixture_of(p)}.jinja").read_text(encoding="utf-8")
        served = toolformats.detect(template)
        if not p.tool_parser:
            assert p.family in ft.NO_VLLM_PARSER, (f"{p.name}: no vLLM tool parser; name one in the registry or say "
                                                   "why not in tests/support/family_table.py NO_VLLM_PARSER")
            continue
        assert p.family not in ft.NO_VLLM_PARSER, p.name
        vllm = toolformats.by_name(p.tool_parser)
        assert vllm is not None, f"{p.name}: vLLM's {p.tool_parser} parser has no built-in ToolFormat"
        assert (vllm is served) != (p.family in ft.VLLM_PARSER_DIFFERS), (p.name, p.tool_parser, served.name)

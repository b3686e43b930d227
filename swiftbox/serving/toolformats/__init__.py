"""Tool calls and reasoning in a model's answer, for the built-in engine: one `ToolFormat` record per way models
write calls (after vLLM's `tool_parsers`; vLLM itself parses with the `--tool-call-parser` / `--reasoning-parser`
the preset names, see catalog/presets.py), and a stream parser that reads any of them token by token.

    module        format (swiftbox name: vLLM parser names)
    hermes        hermes: hermes (JSON in <tool_call>; swiftbox's default tool format, data/dialect.py)
                  internlm: internlm (<|action_start|><|plugin|>{...}<|action_end|>)
    qwen3_xml     qwen3_xml: qwen3_xml, qwen3_coder (<tool_call><function=..><parameter=..>); seed_oss: seed_oss
                  (the same in <seed:tool_call>)
    invoke        minimax_m2: minimax_m2 (<minimax:tool_call><invoke name=..>); deepseek_dsml: deepseek_v32,
                  deepseek_v4 (<｜DSML｜tool_calls><｜DSML｜invoke name=..>)
    apertus       apertus: apertus (<|tools_prefix|>[{name: args}]<|tools_suffix|>)
    mistral       mistral: mistral ([TOOL_CALLS][{...}] and [TOOL_CALLS]name[ARGS]{...})
    llama_json    llama_json: llama3_json, llama4_json (the answer is {"name", "parameters"})
    glm           glm4 (old GLM-4: name\\n{...}; no vLLM parser), glm45: glm45, glm47 (<arg_key>/<arg_value>),
                  hy_v3: hy_v3 (the same with :opensource tags)
    deepseek      deepseek: deepseek_v31, deepseek_v3 (<｜tool▁calls▁begin｜>...)
    kimi_k2       kimi_k2: kimi_k2 (<|tool_calls_section_begin|>...)
    harmony       harmony: openai (gpt-oss channels; also its reasoning)
    gemma4        gemma4: gemma4 (<|tool_call>call:name{k:<|"|>v<|"|>}<tool_call|>)
    pythonic      pythonic: pythonic, llama4_pythonic; lfm2: lfm2; olmo3: olmo3 (Python call syntax)
    reasoning.py  <think> / [THINK] / Gemma 4's thought channel;  stream.py  the streaming reader and its rules
    sections.py   how calls sit in an answer, read once: in `open ... close` blocks (hermes, internlm, apertus,
                  qwen3_xml, glm45, hy_v3, invoke) or one section of delimited calls (deepseek, kimi_k2); a format
                  brings only how one call reads

The format is read off the chat template the model was trained with (`detect`): the template renders tool calls the
way the model learned to write them. Templates without tool calls of their own train swiftbox's default format,
hermes, and every format falls back to it when its own finds no call. transformers 5.24's
`tokenizer.parse_response` reads a tokenizer's `response_template` when the checkpoint ships one; none of the preset
families' checkpoints does (their tokenizer configs carry no response schema), so these parsers are what serves them.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Iterable, Optional, Union

from swiftbox.serving.toolformats.apertus import APERTUS
from swiftbox.serving.toolformats.base import Parsed, ToolFormat, Tools
from swiftbox.serving.toolformats.deepseek import DEEPSEEK
from swiftbox.serving.toolformats.gemma4 import GEMMA4
from swiftbox.serving.toolformats.glm import GLM4, GLM45, HY_V3
from swiftbox.serving.toolformats.harmony import HARMONY, HarmonyParser
from swiftbox.serving.toolformats.hermes import HERMES, INTERNLM
from swiftbox.serving.toolformats.invoke import DEEPSEEK_DSML, MINIMAX_M2
from swiftbox.serving.toolformats.kimi_k2 import KIMI_K2
from swiftbox.serving.toolformats.llama_json import LLAMA_JSON
from swiftbox.serving.toolformats.mistral import MISTRAL
from swiftbox.serving.toolformats.pythonic import LFM2, OLMO3, PYTHONIC
from swiftbox.serving.toolformats.qwen3_xml import QWEN3_XML, SEED_OSS
from swiftbox.serving.toolformats.reasoning import THINK, Reasoning, opened_by, reasoning_of
from swiftbox.serving.toolformats.stream import Event, StreamParser

# detection order: the most specific template markers first (Qwen3.5 and GLM-4.5 also write <tool_call>)
FORMATS: tuple[ToolFormat, ...] = (HARMONY, DEEPSEEK_DSML, SEED_OSS, MINIMAX_M2, HY_V3, APERTUS, QWEN3_XML, GLM45,
                                   GEMMA4, DEEPSEEK, KIMI_K2, LFM2, OLMO3, INTERNLM, MISTRAL, LLAMA_JSON, GLM4, HERMES,
                                   PYTHONIC)


def detect(chat_template: Optional[str]) -> ToolFormat:
    """The format a chat template writes tool calls in (hermes, swiftbox's default, for templates without one)."""
    t = chat_template or ""
    return next((f for f in FORMATS if f.detect(t)), HERMES)


def by_name(name: str) -> Optional[ToolFormat]:
    """A format by swiftbox's name or by a vLLM --tool-call-parser name it corresponds to."""
    return next((f for f in FORMATS if name == f.name or name in f.vllm), None)


def tool_format(chat_template: Optional[str]) -> str:
    """The name of the format `detect` finds (kept for callers of the old serving/toolcalls.py)."""
    return detect(chat_template).name


def thinks(chat_template: Optional[str]) -> bool:
    """Whether a template writes reasoning the parser splits off (think blocks, [THINK], thought channel, harmony)."""
    return reasoning_of(chat_template) is not None or HARMONY.detect(chat_template or "")


def reader(fmt: Optional[ToolFormat], reasoning: Optional[Reasoning], *, tools: Optional[Tools] = None,
           opened: bool = False, hidden: Iterable[str] = (), harmony: bool = False) -> Union[StreamParser,
                                                                                           HarmonyParser]:
    """A fresh stream reader for one answer."""
    if harmony or fmt is HARMONY:
        return HarmonyParser(tools=tools, hidden=hidden, calls=fmt is not None)
    return StreamParser(fmt, reasoning, tools=tools, opened=opened, hidden=hidden)


def collect(events: list[Event]) -> Parsed:
    """The events of one answer as a Parsed (an empty reasoning block is no reasoning)."""
    text = "".join(str(v) for k, v in events if k == "text")
    thought = "".join(str(v) for k, v in events if k == "reasoning")
    calls = [v for k, v in events if k == "call" and isinstance(v, dict)]
    return Parsed(text if text or not calls else None, thought or None, calls)


def _resolve(fmt: Union[str, ToolFormat, None]) -> Optional[ToolFormat]:
    if fmt is None or isinstance(fmt, ToolFormat):
        return fmt
    return by_name(fmt) if fmt else None


def parse(text: str, fmt: Union[str, ToolFormat, None], *, think: Union[bool, Reasoning, None] = False,
          tool_names: Optional[Iterable[str]] = None, tools: Optional[Tools] = None, opened: Optional[bool] = None,
          hidden: Iterable[str] = ()) -> Parsed:
    """A whole answer read back (the stream reader fed it at once). `fmt`: a ToolFormat or its name ('' / None: the
    request has no tools); `think`: True for <think> blocks, or the family's Reasoning; `opened`: whether the
    generation prompt opened the reasoning block (None: inferred, a close without an open before it)."""
    form = _resolve(fmt)
    reasoning = THINK if think is True else (think or None)
    tools = dict(tools or {})
    for name in tool_names or ():
        tools.setdefault(name, {})
    if opened is None:
        opened = reasoning is not None and reasoning.close in text and not text.lstrip().startswith(reasoning.open)
    r = reader(form, reasoning, tools=tools, opened=opened, hidden=hidden)
    events = r.feed(text) + r.finish()
    return collect(events)


@dataclass
class AnswerParser:
    """How one request's answers are read: callable on a whole answer (-> Parsed), `stream()` for a fresh reader."""

    fmt: Optional[ToolFormat]
    reasoning: Optional[Reasoning]
    tools: Tools = field(default_factory=dict)
    opened: bool = False
    hidden: tuple[str, ...] = ()
    harmony: bool = False

    def after(self, prompt_tail: str) -> AnswerParser:
        """This parser for answers that follow a prompt ending in `prompt_tail` (did it open a reasoning block?)."""
        return replace(self, opened=opened_by(prompt_tail, self.reasoning))

    def stream(self) -> Union[StreamParser, HarmonyParser]:
        return reader(self.fmt, self.reasoning, tools=self.tools, opened=self.opened, hidden=self.hidden,
                      harmony=self.harmony)

    def __call__(self, text: str) -> Parsed:
        r = self.stream()
        return collect(r.feed(text) + r.finish())


def answer_parser(chat_template: Optional[str], tools: Optional[list[dict]], *, prompt_tail: str = "",
                  hidden: Iterable[str] = ()) -> Optional[AnswerParser]:
    """The reader of a chat request's answers on a model with this template (None: plain text, nothing to split).
    `tools`: the request's OpenAI tools when it may call them; `prompt_tail`: the end of the rendered prompt (does it
    open a reasoning block?); `hidden`: the tokenizer's special tokens, kept out of reasoning and content."""
    fmt = detect(chat_template) if tools else None
    reasoning = reasoning_of(chat_template)
    harmony = HARMONY.detect(chat_template or "")
    if fmt is None and reasoning is None and not harmony:
        return None
    schemas: Tools = {}
    for tool in tools or []:
        fn = tool.get("function") or {}
        if isinstance(fn.get("name"), str):
            params = fn.get("parameters")
            schemas[fn["name"]] = params if isinstance(params, dict) else {}
    return AnswerParser(fmt, reasoning, schemas, hidden=tuple(hidden), harmony=harmony).after(prompt_tail)


__all__ = ["FORMATS", "AnswerParser", "Parsed", "Reasoning", "StreamParser", "ToolFormat", "answer_parser", "by_name",
           "detect", "parse", "reasoning_of", "thinks", "tool_format"]

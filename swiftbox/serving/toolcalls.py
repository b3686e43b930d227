"""The old import path of the answer parsers: tool calls and reasoning now live in serving/toolformats/ (one record
per format, and the stream reader); this module re-exports what its callers use."""
from __future__ import annotations

from swiftbox.serving.toolformats import Parsed, answer_parser, detect, parse, thinks, tool_format

__all__ = ["Parsed", "answer_parser", "detect", "parse", "thinks", "tool_format"]

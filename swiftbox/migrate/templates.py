"""A peer's chat-template name (LLaMA-Factory `template:`, ms-swift `--template`, Axolotl `chat_template:`) against
the model's own chat template, which is what swiftbox renders with.

A name maps to the text its template prints around a user turn; the model's own template must print it too,
else the name contradicts the model and the import is refused (remove the key, or train with a .jinja file
through swiftbox's `chat_template`). Names that mean "the tokenizer's own" pass; names of a peer's own generic
formats (LLaMA-Factory `default`, `alpaca`, `vicuna`, ...) are refused deliberately: they are not the model's
template, and swiftbox renders only templates it can label exactly.
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional

from swiftbox.migrate.table import Refused

# family marker: a string the family's template prints around a turn (read from each family's template)
CHATML = "<|im_start|>"
MARKERS: dict[str, str] = {
    "chatml": CHATML, "qwen": CHATML, "qwen2": CHATML, "qwen2_5": CHATML, "qwen3": CHATML, "qwen3_nothink": CHATML,
    "qwen2_vl": CHATML, "qwen2_5_vl": CHATML, "yi": CHATML, "smollm": CHATML, "smollm2": CHATML, "chatml_de": CHATML,
    "llama3": "<|start_header_id|>", "llama3_2": "<|start_header_id|>", "llama3_1": "<|start_header_id|>",
    "llama2": "[INST]", "mistral": "[INST]", "gemma": "<start_of_turn>", "gemma2": "<start_of_turn>",
    "gemma3": "<start_of_turn>", "phi": "<|user|>", "phi3": "<|user|>", "phi4": "<|im_start|>",
    "glm4": "<|user|>", "chatglm3": "<|user|>", "deepseek3": "<｜User｜>", "deepseekr1": "<｜User｜>",
}
OWN = ("tokenizer_default", "tokenizer", "auto")          # "the tokenizer's own template"
GENERIC = ("default", "empty", "alpaca", "vicuna", "cpm", "intern", "ziya", "belle", "baichuan", "xverse",
           "aquila", "atom", "openchat")                   # a peer's own prompt formats, not the model's template


def check(peer: str, key: str, name: str, model: str, text_only: bool = False, fetch: bool = True) -> None:
    """Refuse `name` where it is not the model's own template. `text_only`: the step renders no chat (pt), where a
    peer ignores the template too. `fetch`: resolve (download) a hub model to read its template - a run does, as
    its step would; a dry translation (export-config's check, the table tests) reads only local models."""
    name = str(name).strip()
    if name in OWN or text_only:
        return
    if name in GENERIC:
        raise Refused(f"{peer} {key} {name!r}: a {peer} prompt format of its own, not {model}'s chat template; "
                      f"swiftbox renders with the model's own template: remove {key} (or give swiftbox a .jinja "
                      "file with chat_template)")
    marker = MARKERS.get(name)
    if marker is None:
        raise Refused(f"{peer} {key} {name!r}: not a template swiftbox knows how to compare with the model's own "
                      f"({', '.join(sorted(MARKERS))}); remove {key} to train with {model}'s own chat template")
    own = model_template(model, fetch)
    if own is not None and marker not in own:
        raise Refused(f"{peer} {key} {name!r} contradicts {model}'s own chat template (it never prints {marker!r}); "
                      f"remove {key} to train with the model's template, or pick the model its template belongs to")


def model_template(model: str, fetch: bool = True) -> Optional[str]:
    """The model's own chat template text; None where `fetch` is off and the model is not local."""
    from swiftbox.hub.resolve import resolve_model, resolves_without_network

    if not fetch and not resolves_without_network(model):
        return None
    path = Path(resolve_model(model))
    jinja = path / "chat_template.jinja"
    if jinja.is_file():
        return jinja.read_text(encoding="utf-8")
    import json

    config = path / "tokenizer_config.json"
    if config.is_file():
        template = json.loads(config.read_text(encoding="utf-8")).get("chat_template")
        if isinstance(template, str):
            return template
        if isinstance(template, list):
            return "\n".join(str(t.get("template", "")) for t in template if isinstance(t, dict))
    return ""


def model_config(model: str, fetch: bool = True) -> dict:
    """The model's config.json as a dict ({} where `fetch` is off and the model is not local)."""
    import json

    from swiftbox.hub.resolve import resolve_model, resolves_without_network

    if not fetch and not resolves_without_network(model):
        return {}
    path = Path(resolve_model(model)) / "config.json"
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}

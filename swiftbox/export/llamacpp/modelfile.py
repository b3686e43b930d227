"""Ollama's Modelfile for a GGUF export: FROM, the chat template as Ollama's TEMPLATE (a Go template), the stop
tokens, and PARAMETERs from the model's generation config.

A Jinja chat template is a program; it cannot be translated to Go in general. What is translated is what the
template *renders*: it is rendered with marker contents to find, per role, the text before and after a message
(`Pieces`), the generation prompt, and the block it writes when no system message is given (a default system
prompt, or Llama 3.1's dated header). The Go template is one fixed skeleton filled with those pieces, and
`simulate` is that skeleton's meaning in Python: before a TEMPLATE is written, `simulate` must reproduce the
Jinja rendering exactly on a set of conversations (with and without a system message, several turns). A
template that does not decompose this way (Mistral's, which moves the system prompt into the last user turn)
gets no TEMPLATE line and the reason in the Modelfile; Ollama then falls back to its own detection from the
GGUF's `tokenizer.chat_template`. Tool calls and reasoning blocks are not translated.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

S, U, A = "\x01SYS\x01", "\x01USER{}\x01", "\x01ASSISTANT{}\x01"


class NotDecomposable(ValueError):
    """The chat template does not render as fixed text around each message."""


@dataclass(frozen=True)
class Pieces:
    default_block: str          # written when the conversation has no system message ("" = nothing)
    system: tuple[str, str] | None  # text before / after a system message's content (None: no system role)
    user: tuple[str, str]
    assistant: tuple[str, str]
    generation: str             # the generation prompt after the last user message
    bos: str = ""               # a BOS text the template starts with, left to the runtime (a GGUF that adds BOS)


def _render(template: str, messages: list[dict], gen: bool, special: dict) -> str:
    from transformers.utils.chat_template_utils import render_jinja_template

    rendered, _ = render_jinja_template(conversations=[messages], chat_template=template, add_generation_prompt=gen,
                                        **special)
    return rendered[0]


def _split_once(text: str, marker: str) -> tuple[str, str]:
    if text.count(marker) != 1:
        role = {S: "a system message"}.get(marker, "a user message" if "USER" in marker else "an assistant message")
        raise NotDecomposable(f"the template does not render the content of {role} once, in place")
    before, after = text.split(marker)
    return before, after


def _strip_prefix(text: str, prefix: str, what: str) -> str:
    if not text.startswith(prefix):
        raise NotDecomposable(f"the text around {what} differs between turns")
    return text[len(prefix):]


def _strip_suffix(text: str, suffix: str, what: str) -> str:
    if suffix and not text.endswith(suffix):
        raise NotDecomposable(f"the text around {what} differs between turns")
    return text[: len(text) - len(suffix)] if suffix else text


def _without_final_eos(text: str, follows: str, eos: str) -> str:
    """A template may end a conversation rendered without a generation prompt with eos_token (Phi-3.5): the text
    after a message is what also `follows` it mid-conversation."""
    if not follows.startswith(text) and eos and text.endswith(eos):
        return text[: -len(eos)]
    return text


def pieces(template: str, special: dict | None = None, strip_bos: bool = True) -> Pieces:
    """Decompose `template` by rendering marker conversations. Raises NotDecomposable. `strip_bos`: the runtime
    adds the BOS token itself (the GGUF's tokenizer.ggml.add_bos_token), so a template's leading bos_token text is
    left out of the TEMPLATE; where it does not (SmolLM2: add_bos_token false, and its bos_token `<|im_start|>` is
    the first turn's opener), the text stays."""
    special = dict(special or {})
    bos, eos = special.get("bos_token") or "", special.get("eos_token") or ""
    u1, u2, a1, a2 = U.format(1), U.format(2), A.format(1), A.format(2)
    turns = [{"role": "user", "content": u1}, {"role": "assistant", "content": a1},
             {"role": "user", "content": u2}, {"role": "assistant", "content": a2}]
    try:
        lone = _render(template, turns[:1], False, special)
        asked = _render(template, turns[:1], True, special)
        try:
            full, has_system = _render(template, [{"role": "system", "content": S}, *turns], False, special), True
        except Exception:  # noqa: BLE001 - templates without a system role raise (Gemma)
            full, has_system = _render(template, turns, False, special), False
    except Exception as exc:  # noqa: BLE001 - a template may raise anything (raise_exception, undefined names)
        why = " ".join(str(exc).split())[:120]
        raise NotDecomposable(f"the template fails on a plain conversation ({why})") from None
    lead = bos if strip_bos and bos and full.startswith(bos) and lone.startswith(bos) and asked.startswith(bos) else ""
    full, lone, asked = full[len(lead):], lone[len(lead):], asked[len(lead):]
    rest = full
    if has_system:
        sys_pre, rest = _split_once(rest, S)
    first, rest = _split_once(rest, u1)
    mid2, rest = _split_once(rest, a1)
    mid3, rest = _split_once(rest, u2)
    mid4, tail = _split_once(rest, a2)
    asst_suf = _without_final_eos(tail, mid3, eos)
    user_pre = _strip_prefix(mid3, asst_suf, "an assistant message")
    default_block, user_suf = _split_once(lone, u1)
    user_suf = _without_final_eos(user_suf, mid2, eos)
    default_block = _strip_suffix(default_block, user_pre, "the first user message")
    system = (sys_pre, _strip_suffix(first, user_pre, "a system message")) if has_system else None
    if not has_system and first != default_block + user_pre:
        raise NotDecomposable("the text before the first user message differs between conversations")
    asst_pre = _strip_prefix(mid2, user_suf, "a user message")
    if mid4 != mid2:
        raise NotDecomposable("the text between a user message and the assistant's reply differs between turns")
    before_gen, after_u = _split_once(asked, u1)
    generation = _strip_prefix(after_u, user_suf, "the generation prompt")
    if before_gen != default_block + user_pre:
        raise NotDecomposable("the generation prompt changes the text before the user message")
    for piece in (default_block, *(system or ()), user_pre, user_suf, asst_pre, asst_suf, generation):
        if "{{" in piece or "}}" in piece or '"""' in piece:
            raise NotDecomposable("the template's text contains '{{', '}}' or '\"\"\"', which a Modelfile TEMPLATE "
                                  "cannot hold literally")
    return Pieces(default_block, system, (user_pre, user_suf), (asst_pre, asst_suf), generation, lead)


def simulate(p: Pieces, messages: list[dict]) -> str:
    """What `go_template(p)` renders for `messages` in Ollama (a chat request: the reply is generated after the
    last message): the skeleton's meaning, used to prove the decomposition."""
    has_system = p.system is not None and any(m["role"] == "system" for m in messages)
    out = "" if has_system else p.default_block
    for i, m in enumerate(messages):
        last = i == len(messages) - 1
        if m["role"] == "system" and p.system is not None:
            out += p.system[0] + m["content"] + p.system[1]
        elif m["role"] == "user":
            out += p.user[0] + m["content"] + p.user[1] + (p.generation if last else "")
        elif m["role"] == "assistant":
            out += p.assistant[0] + m["content"] + ("" if last else p.assistant[1])
    return out


def go_template(p: Pieces) -> str:
    """Ollama's TEMPLATE: `.System` is set when the request (or the Modelfile's SYSTEM) has a system message,
    which Ollama also keeps in `.Messages`."""
    head = ("{{ if not .System }}" + p.default_block + "{{ end }}") if p.system is not None else p.default_block
    system = ('{{ if eq .Role "system" }}' + p.system[0] + "{{ .Content }}" + p.system[1] + "{{ else if "
              if p.system is not None else "{{ if ")
    return (head + "{{ range $i, $_ := .Messages }}{{ $last := eq (len (slice $.Messages $i)) 1 }}" + system +
            'eq .Role "user" }}' + p.user[0] + "{{ .Content }}" + p.user[1] +
            "{{ if $last }}" + p.generation + "{{ end }}"
            '{{ else if eq .Role "assistant" }}' + p.assistant[0] + "{{ .Content }}"
            "{{ if not $last }}" + p.assistant[1] + "{{ end }}{{ end }}{{ end }}")


CHECK_CONVERSATIONS = [
    [{"role": "user", "content": "What is 2+2?"}],
    [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Hello there"}],
    [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello! How can I help?"},
     {"role": "user", "content": "Name a colour."}],
    [{"role": "system", "content": "Answer in French."}, {"role": "user", "content": "One"},
     {"role": "assistant", "content": "Un"}, {"role": "user", "content": "Two"}],
]


def translate(template: str, special: dict | None = None, strip_bos: bool = True) -> tuple[Pieces, str]:
    """(pieces, Go template), proven against the Jinja rendering on CHECK_CONVERSATIONS. Raises NotDecomposable."""
    p = pieces(template, special, strip_bos)
    for conv in CHECK_CONVERSATIONS:
        if p.system is None and any(m["role"] == "system" for m in conv):
            continue
        want = _render(template, conv, True, dict(special or {}))
        want = want[len(p.bos):] if p.bos and want.startswith(p.bos) else want
        if simulate(p, conv) != want:
            raise NotDecomposable(f"the translated template renders a {len(conv)}-message conversation differently")
    return p, go_template(p)


# generation_config.json key -> Ollama PARAMETER
SAMPLING = {"temperature": "temperature", "top_p": "top_p", "top_k": "top_k", "min_p": "min_p",
            "repetition_penalty": "repeat_penalty"}


def parameters(generation_config: dict) -> list[tuple[str, object]]:
    """Ollama PARAMETERs with the model's own generation settings. transformers samples only with do_sample
    true (otherwise it decodes greedily), so without it the Modelfile asks for temperature 0."""
    if not generation_config.get("do_sample"):
        return [("temperature", 0)]
    return [(SAMPLING[k], generation_config[k]) for k in SAMPLING if generation_config.get(k) is not None]


@dataclass
class Modelfile:
    gguf_name: str
    template: str | None = None
    stops: list[str] = field(default_factory=list)
    params: list[tuple[str, object]] = field(default_factory=list)
    note: str | None = None
    adapter_name: str | None = None     # a GGUF LoRA: FROM names the base, ADAPTER this file

    def text(self) -> str:
        lines = ["# Ollama Modelfile written by swiftbox: ollama create NAME -f Modelfile"]
        if self.note:
            lines.append(f"# {self.note}")
        if self.adapter_name:
            lines += [f"FROM ./{self.gguf_name}", f"ADAPTER ./{self.adapter_name}"]
        else:
            lines.append(f"FROM ./{self.gguf_name}")
        if self.template is not None:
            lines.append(f'TEMPLATE """{self.template}"""')
        lines += [f"PARAMETER stop {json.dumps(s)}" for s in self.stops]
        lines += [f"PARAMETER {k} {v}" for k, v in self.params]
        return "\n".join(lines) + "\n"


def special_tokens(tokenizer) -> dict:
    """The special-token strings chat templates read (bos_token, eos_token, ...)."""
    out = {}
    for name in ("bos_token", "eos_token", "unk_token", "pad_token"):
        value = getattr(tokenizer, name, None)
        if isinstance(value, str):
            out[name] = value
    return out


def stop_strings(p: Pieces | None, tokenizer, eos_ids: list[int]) -> list[str]:
    """The end-of-turn text after an assistant message, then every eos token (generation_config's list)."""
    stops: list[str] = []
    if p is not None and p.assistant[1].strip():
        stops.append(p.assistant[1].strip())
    for token_id in eos_ids:
        text = tokenizer.convert_ids_to_tokens(int(token_id))
        if isinstance(text, str) and text and text not in stops:
            stops.append(text)
    return stops


def build(gguf_name: str, tokenizer, model_dir: Path, adapter_name: str | None = None,
          adds_bos: bool | None = None) -> tuple[Modelfile, dict]:
    """The Modelfile for a GGUF written from `model_dir` (its tokenizer and generation config), and the facts
    the manifest records (template translated or why not, stops, parameters). `adds_bos`: the GGUF's
    tokenizer.ggml.add_bos_token (None: not recorded; llama.cpp's usual default, adding BOS, is assumed)."""
    try:
        gen = json.loads((Path(model_dir) / "generation_config.json").read_text())
    except (OSError, ValueError):
        gen = {}
    eos = gen.get("eos_token_id", getattr(tokenizer, "eos_token_id", None))
    eos_ids = [e for e in (eos if isinstance(eos, list) else [eos]) if isinstance(e, int)]
    template = getattr(tokenizer, "chat_template", None)
    p, go, note = None, None, None
    if isinstance(template, str) and template:
        try:
            p, go = translate(template, special_tokens(tokenizer), strip_bos=adds_bos is not False)
        except NotDecomposable as exc:
            note = f"no TEMPLATE: {exc}; Ollama reads the chat template stored in the GGUF instead"
    else:
        note = "no TEMPLATE: the model has no chat template"
    mf = Modelfile(gguf_name, go, stop_strings(p, tokenizer, eos_ids), parameters(gen), note, adapter_name)
    return mf, {"template": "translated" if go else note, "stops": mf.stops, "parameters": dict(mf.params)}

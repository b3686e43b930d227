"""One flow per main-menu item: the questions it asks and the recipe it builds from the answers.

A flow never runs anything itself: `run_flow` asks its questions, builds the recipe dict and hands it
to the review screen (show YAML, run / save and run / save only / edit / back).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional

from menus import grpo_flow, widgets
from menus import questions as q
from menus import review as review_screen
from menus.session import MenuSession
from menus.widgets import BACK
from menus.wizard import Auto, run_wizard
from swiftbox import quant_methods


@dataclass
class Flow:
    kind: str                                          # the step kind it builds (= its pipeline)
    title: str                                         # main-menu title
    questions: Callable[[MenuSession], list]           # [(key, ask(state)), ...]
    step: Callable[[dict], dict]                       # answers -> the step's settings
    needs: tuple[str, ...] = ()                        # device features without which the task cannot run


def refusal(session: MenuSession, flow: Flow, carry: Optional[str] = None) -> Optional[str]:
    """Why `flow` cannot run here at all (a device capability, or a carried input it cannot take), before
    any question is asked; None when it can."""
    from menus import artifacts

    if flow.needs:
        facts = session.probe.facts()
        for feature in flow.needs:
            why = facts.why_not(feature) if facts else None
            if why:
                return f"{feature} is not available on this {facts.name}: {why}"
    if carry:
        found = artifacts.describe(carry)
        why = artifacts.refusal(found, flow.kind) if found else None
        if why:
            return f"{carry}: {why}"
    return None


def build_recipe(session: MenuSession, flow: Flow, state: dict) -> dict:
    settings = flow.step(state)
    name = state.get("name") or q.recipe_name(flow.kind, state.get("model") or flow.kind)
    out = state.get("output")
    if out and out.rstrip("/") != q.default_output(session, name, flow.kind):
        settings["output"] = out.rstrip("/")
    recipe: dict[str, Any] = {"name": name}
    if state.get("model"):
        recipe["model"] = state["model"]
    recipe["steps"] = [{flow.kind: settings}]
    return recipe


def run_flow(session: MenuSession, flow: Flow, carry: Optional[str] = None):
    """Ask, build, review. The review Outcome, or BACK when the user leaves the first question."""
    state: dict = {"carry": carry}
    if carry:
        state["model"] = carry
    questions = flow.questions(session) + [
        ("outcome", lambda s: review_screen.review(session, build_recipe(session, flow, s))),
    ]
    result = run_wizard(questions, state)
    return BACK if result is BACK else result["outcome"]


def _clean(settings: dict) -> dict:
    return {k: v for k, v in settings.items() if v is not None}


# -- training -----------------------------------------------------------------------------------

def _train_settings(kind: str, state: dict, extra: dict) -> dict:
    settings: dict[str, Any] = {"dataset": state["dataset"], "method": state["method"]}
    if state["method"] != "full":
        settings["lora"] = {"rank": state["rank"], "alpha": 2 * state["rank"]}
    settings.update(extra)
    settings["epochs"] = state["epochs"]
    return _clean(settings)


SFT = Flow(
    "sft", "Fine-tune (SFT: LoRA / QLoRA / DoRA / full)",
    lambda s: [("model", q.model(s, "Model to fine-tune:", types=("model",), task="sft")),
               ("dataset", q.dataset(s, "sft")),
               ("method", q.method(s, "sft")),
               ("rank", q.lora_rank("sft")),
               ("epochs", q.number("epochs", "Epochs:", "sft", "epochs", float, 0.01, 1000)),
               ("output", q.output(s, "sft"))],
    lambda st: _train_settings("sft", st, {}),
)

PT = Flow(
    "pt", "Continue pre-training (raw text)",
    lambda s: [("model", q.model(s, "Model to continue pre-training:", types=("model",), task="pt")),
               ("dataset", q.dataset(s, "pt", "Raw text (.txt, .jsonl with a text column, or a directory):")),
               ("method", q.method(s, "pt")),
               ("rank", q.lora_rank("pt")),
               ("epochs", q.number("epochs", "Epochs:", "pt", "epochs", float, 0.01, 1000)),
               ("output", q.output(s, "pt"))],
    lambda st: _train_settings("pt", st, {}),
)

DPO = Flow(
    "dpo", "Align (DPO)",
    lambda s: [("model", q.model(s, "Model or SFT adapter to align:", task="dpo")),
               ("dataset", q.dataset(s, "dpo", "Preference data (prompt / chosen / rejected):")),
               ("method", q.method(s, "dpo")),
               ("rank", q.lora_rank("dpo")),
               ("beta", q.number("beta", "beta (DPO temperature):", "dpo", "beta", float, 0.0001, 100)),
               ("epochs", q.number("epochs", "Epochs:", "dpo", "epochs", float, 0.01, 1000)),
               ("output", q.output(s, "dpo"))],
    lambda st: _train_settings("dpo", st, {"beta": st["beta"]}),
)


def _preference_flow(kind: str, title: str, data: str, extra: list, settings: Callable[[dict], dict]) -> Flow:
    """An alignment flow: model, data, method, rank, the method's own few questions (`extra`: (key, session ->
    ask)), epochs, output."""
    return Flow(
        kind, title,
        lambda s: [("model", q.model(s, "Model or SFT adapter to align:", task=kind)),
                   ("dataset", q.dataset(s, "kto" if kind == "kto" else "dpo", data)),
                   ("method", q.method(s, kind)),
                   ("rank", q.lora_rank(kind)),
                   *[(key, make(s)) for key, make in extra],
                   ("epochs", q.number("epochs", "Epochs:", kind, "epochs", float, 0.01, 1000)),
                   ("output", q.output(s, kind))],
        lambda st: _train_settings(kind, st, settings(st)),
    )


PAIRS = "Preference data (prompt / chosen / rejected):"
KTO = _preference_flow(
    "kto", "Align with KTO", "Unpaired data (prompt / completion / label true or false):",
    [("beta", lambda s: q.number("beta", "beta (KTO temperature):", "kto", "beta", float, 0.0001, 100))],
    lambda st: {"beta": st["beta"]})
ORPO = _preference_flow(
    "orpo", "Align with ORPO", PAIRS,
    [("beta", lambda s: q.number("beta", "lambda (weight of the odds-ratio term):", "orpo", "beta", float, 0.0001,
                                 100))],
    lambda st: {"beta": st["beta"]})
SIMPO = _preference_flow(
    "simpo", "Align with SimPO", PAIRS,
    [("beta", lambda s: q.number("beta", "beta (reward scale):", "simpo", "beta", float, 0.0001, 100)),
     ("gamma", lambda s: q.number("gamma", "gamma (target reward margin):", "simpo", "gamma", float, 0, 100))],
    lambda st: {"beta": st["beta"], "gamma": st["gamma"]})
RM = _preference_flow(
    "rm", "Train a reward model", PAIRS,
    [("eval_dataset", lambda s: q.dataset(s, "dpo", "Held-out pairs (pairwise accuracy after training):",
                                          optional="none", key="eval_dataset"))],
    lambda st: {"eval_dataset": st.get("eval_dataset")})

# -- using a model ------------------------------------------------------------------------------

def _eval_what(state: dict):
    from swiftbox.benchmarks import missing_extra

    return q.pick("Evaluate with:", "what", [
        ("my own file  (questions with reference answers)", "own"),
        ("standard benchmarks  (MMLU, GSM8K, ARC, HellaSwag, IFEval through lm-evaluation-harness, offline)",
         "bench", missing_extra())], "own")(state)


def _only(what: str, ask):
    """Ask `ask` only on the `what` branch of the Evaluate screen."""
    return lambda state: ask(state) if state.get("what") == what else Auto(None)


def _benchmarks(state: dict):
    from swiftbox.benchmarks import resolve
    from swiftbox.errors import UserError

    def check(raw: str):
        try:
            return bool(resolve([n for n in raw.split(",") if n.strip()])) or "name at least one benchmark"
        except UserError as exc:
            return str(exc)

    return widgets.text("Benchmarks (comma-separated; the shipped slices are used offline):",
                        default=state.get("benchmark") or "gsm8k,mmlu,arc,hellaswag,ifeval", validate=check)


def _eval_step(state: dict) -> dict:
    if state.get("what") == "bench":
        return {"benchmark": [n.strip() for n in state["benchmark"].split(",") if n.strip()], "limit": state["limit"]}
    return _clean({"dataset": state["dataset"], "match": state["match"]})


EVAL = Flow(
    "eval", "Evaluate",
    lambda s: [("model", q.model(s, "Model or adapter to evaluate:")),
               ("what", _eval_what),
               ("dataset", _only("own", q.dataset(s, "eval", "Questions with reference answers:"))),
               ("match", _only("own", q.pick("Count an answer right when it", "match",
                                             [("matches exactly", "exact"), ("contains the reference", "contains")],
                                             "exact"))),
               ("benchmark", _only("bench", _benchmarks)),
               ("limit", _only("bench", lambda st: widgets.number("Rows per benchmark:", st.get("limit") or 20, int,
                                                                  1, 10**9))),
               ("output", q.output(s, "eval"))],
    _eval_step,
)


def _chat_prompt(state: dict):
    if state.get("mode") != "one":
        return Auto(None)
    return widgets.text("Your question:", default=state.get("prompt") or "Is 12345 odd?",
                        validate=lambda t: bool(t.strip()) or "type a question")


CHAT = Flow(
    "chat", "Chat with a model",
    lambda s: [("model", q.model(s, "Model or adapter to chat with:")),
               ("mode", q.pick("How?", "mode", [("Chat here, interactively", "repl"),
                                                ("Ask one question and show the answer", "one")], "repl")),
               ("prompt", _chat_prompt),
               ("output", q.output(s, "chat"))],
    lambda st: _clean({"prompt": st.get("prompt")}),
)


def engine_refusal(facts, model: Optional[str], engine: str) -> Optional[str]:
    """Why `engine` cannot serve `model` here (None: it can): the platform first, then the model's own files, by
    the engine-fit rules serve and verify apply (swiftbox/serving/fit.py)."""
    why = facts.why_not(engine) if facts and engine == "vllm" else None
    if why or not model or facts is None or facts.platform is None:
        return why
    from swiftbox.serving import artifact_problems

    problems = artifact_problems(model, engine, facts.platform)
    return f"cannot serve this model: {problems[0]}" if problems else None


def _serve_questions(s: MenuSession) -> list:
    def engine(state: dict):
        facts = s.probe.facts()
        model = state.get("model")
        return q.pick("Engine:", "engine", [
            ("auto  (vLLM where it runs, else built-in)", "auto"),
            ("built-in  (transformers + continuous batching, any device)", "builtin",
             engine_refusal(facts, model, "builtin")),
            ("vLLM", "vllm", engine_refusal(facts, model, "vllm"))], "auto")(state)

    return [("model", q.model(s, "Model or adapter to serve:")),
            ("engine", engine),
            ("host", q.pick("Who may connect?", "host", [
                ("only this machine (127.0.0.1)", "127.0.0.1"),
                ("the network (0.0.0.0; needs an API key)", "0.0.0.0")], "127.0.0.1")),
            ("port", q.number("port", "Port:", "serve", "port", int, 0, 65535)),
            ("api_key", lambda st: _api_key(st)),
            ("runtime_adapters", q.pick("Let clients load LoRA adapters while it runs (/v1/load_lora_adapter)?",
                                        "runtime_adapters", [
                                            ("yes, from runs/ (default; on vLLM only when it serves adapters)", "auto"),
                                            ("yes, also on vLLM (starts it with LoRA enabled)", True),
                                            ("no", False)], "auto")),
            ("smoke", q.pick("Then:", "smoke", [("keep serving until Ctrl-C", False),
                                                 ("smoke test: start, ask one question, stop", True)], False)),
            ("output", q.output(s, "serve"))]


def _runtime(state: dict):
    value = state.get("runtime_adapters", "auto")
    return None if value == "auto" else value


def _api_key(state: dict):
    answer = widgets.text("API key (empty: none, or SWIFTBOX_API_KEY from the environment):",
                          default=state.get("api_key") or "", password=True)
    return answer if answer is BACK else (answer or None)


SERVE = Flow(
    "serve", "Serve (OpenAI API)", _serve_questions,
    lambda st: _clean({"engine": st["engine"], "host": st["host"], "port": st["port"], "api_key": st.get("api_key"),
                       "runtime_adapters": _runtime(st), "smoke": st["smoke"] or None}),
)

# -- export ---------------------------------------------------------------------------------------


def _merge_base(state: dict):
    """Only asked when the adapter's manifest does not name its base model."""
    from menus import artifacts

    found = artifacts.describe(state["model"])
    if found and found.base_model:
        return Auto(None)
    return widgets.text("Base model of this adapter:", default=state.get("base") or "", validate=q.check_model_ref)


MERGE = Flow(
    "merge", "Merge adapter",
    lambda s: [("model", q.model(s, "Adapter to merge:", types=("adapter",), presets=False, task="merge")),
               ("base", _merge_base),
               ("output", q.output(s, "merge"))],
    lambda st: _clean({"base": st.get("base")}),
)


def _quantize_method(s: MenuSession):
    """The methods and their labels are the records' (swiftbox/quant_methods.py); one the device lacks the
    capability for is shown, disabled, with why."""
    def ask(state: dict):
        facts = s.probe.facts()
        options = [(m.menu, m.name, facts.why_not(m.feature) if facts else None)
                   for m in quant_methods.METHODS.values()]
        return q.pick("Method:", "method", [*options, ("Back", BACK)], quant_methods.DEFAULT)(state)

    return ask


def _quantize_bits(state: dict):
    method = quant_methods.METHODS.get(state.get("method") or "")
    if method is not None and method.types:  # GGUF: llama.cpp's type names carry the bits (answer kept under "bits")
        return q.pick(f"{method.title} type:", "bits", [(f"{t} ({b}-bit)", t) for t, b in method.types.items()],
                      "q8_0")(state)
    allowed = method.bits if method is not None else (4, 8)
    return q.pick("Bits:", "bits", [(f"{b}-bit", b) for b in allowed], allowed[0])(state)


def _quantize_step(st: dict) -> dict:
    typed = bool(quant_methods.get(st["method"]).types)
    return _clean({"method": st["method"], "dataset": st.get("dataset"),
                   **({"type": st["bits"]} if typed else {"bits": st["bits"]})})


QUANTIZE = Flow(
    "quantize", "Quantize",
    lambda s: [("model", q.model(s, "Model to quantize:", types=("model",), task="quantize")),
               ("method", _quantize_method(s)),
               ("bits", _quantize_bits),
               ("dataset", q.dataset(s, "sft", "Calibration data:",
                                     optional="the data this model was trained on (from its manifest)")),
               ("output", q.output(s, "quantize"))],
    _quantize_step,
    needs=(quant_methods.get(quant_methods.DEFAULT).feature,),   # greyed out where the default method cannot run
)

DOWNLOAD = Flow(
    "download", "Download a model",
    lambda s: [("model", q.model(s, "Model to download:", types=())),
               ("output", q.output(s, "download"))],
    lambda st: {},
)

GRPO = Flow(
    "grpo", "Align with GRPO (rewards: rules or your Python function)",
    lambda s: [("model", q.model(s, "Model or SFT adapter to align:", task="grpo")),
               ("dataset", q.dataset(s, "eval", "Questions with reference answers:")),
               ("method", q.method(s, "grpo")),
               ("rank", q.lora_rank("grpo")),
               ("reward", grpo_flow.reward(s)),
               ("num_generations", q.number("num_generations", "Answers sampled per question:", "grpo",
                                            "num_generations", int, 2, 64)),
               ("epochs", q.number("epochs", "Epochs:", "grpo", "epochs", float, 0.01, 1000)),
               ("output", q.output(s, "grpo"))],
    lambda st: _train_settings("grpo", st, {"rewards": [st["reward"]], "num_generations": st["num_generations"]}),
)



def _teacher(session: MenuSession):
    """The teacher: the model list again (never the carried input: that is the student), its own answer key."""
    ask_model = q.model(session, "Teacher model (it must share the student's tokenizer):", task="gkd")
    return lambda state: ask_model({"model": state.get("teacher")})


GKD = Flow(
    "gkd", "Distil a teacher model into this one (GKD)",
    lambda s: [("model", q.model(s, "Model or SFT adapter to distil into (the student):", task="gkd")),
               ("teacher", _teacher(s)),
               ("dataset", q.dataset(s, "sft", "Conversations (the prompts and replies to distil on):")),
               ("method", q.method(s, "gkd")),
               ("rank", q.lora_rank("gkd")),
               ("lmbda", q.number("lmbda", "lmbda (share of steps on the student's own answers, 0-1):", "gkd",
                                  "lmbda", float, 0, 1)),
               ("epochs", q.number("epochs", "Epochs:", "gkd", "epochs", float, 0.01, 1000)),
               ("output", q.output(s, "gkd"))],
    lambda st: _train_settings("gkd", st, {"teacher": st["teacher"], "lmbda": st["lmbda"]}),
)

FLOWS = {f.kind: f for f in (DOWNLOAD, SFT, PT, DPO, KTO, ORPO, SIMPO, RM, GRPO, GKD, CHAT, EVAL, MERGE, QUANTIZE,
                             SERVE)}
# step kinds (swiftbox.steps.STEP_TYPES) with no flow of their own, and why: a new step kind gets a Flow above (and
# an entry in menus/main.py ITEMS or menus/align.py ALIGN) or a line here (tests/unit/test_menu_steps.py)
NOT_IN_MENU = {
    "verify": "the pre-deploy gate runs inside every Serve flow (serve's startup gate) and as `swiftbox verify`",
}

"""The benchmarks `eval --benchmark` offers: which lm-eval task runs each, where its data lives (the Hugging Face
dataset's own layout under a data directory) and which of the harness's metrics the comparison table shows."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from swiftbox.errors import UserError

EACH_SUBJECT = "*"          # a config that stands for "every subject folder present" (MMLU's 57 subjects)


@dataclass(frozen=True)
class Benchmark:
    name: str                          # what --benchmark takes
    task: str                          # the lm-eval task (for MMLU the group; its subtasks are mmlu_<subject>)
    dataset: str                       # the Hugging Face dataset id = the folder under --data-dir
    config: Optional[str]              # the dataset config = a subfolder (None: files at the dataset's top)
    eval_split: str                    # the split the harness scores
    fewshot_split: Optional[str]       # where --shots examples come from (absent: the scored split, minus the doc)
    headline: str                      # the harness's "metric,filter" key shown in the comparison table
    source: str                        # where the full data comes from, for the missing-data message
    loglikelihood: bool                # scored by answer log-likelihoods (a chat endpoint cannot give them)
    folder: str = ""                   # the task's folder in lm_eval/tasks/ (only these are indexed: fast start)
    aliases: tuple[str, ...] = ()
    extra_names: dict[str, tuple[str, ...]] = field(default_factory=dict)   # other file stems a split may have

    def subtask(self, config: Optional[str]) -> str:
        return f"{self.task}_{config}" if self.config == EACH_SUBJECT else self.task


BENCHMARKS: dict[str, Benchmark] = {b.name: b for b in (
    Benchmark("mmlu", "mmlu", "cais/mmlu", EACH_SUBJECT, "test", "dev", "acc,none",
              "https://github.com/hendrycks/test (MIT); Hugging Face dataset cais/mmlu", True, folder="mmlu/default"),
    Benchmark("gsm8k", "gsm8k", "openai/gsm8k", "main", "test", "train", "exact_match,strict-match",
              "https://github.com/openai/grade-school-math (MIT); Hugging Face dataset openai/gsm8k", False,
              folder="gsm8k"),
    Benchmark("arc_challenge", "arc_challenge", "allenai/ai2_arc", "ARC-Challenge", "test", "train", "acc_norm,none",
              "https://allenai.org/data/arc (CC BY-SA 4.0); Hugging Face dataset allenai/ai2_arc", True,
              aliases=("arc",), folder="arc"),
    Benchmark("arc_easy", "arc_easy", "allenai/ai2_arc", "ARC-Easy", "test", "train", "acc_norm,none",
              "https://allenai.org/data/arc (CC BY-SA 4.0); Hugging Face dataset allenai/ai2_arc", True, folder="arc"),
    Benchmark("hellaswag", "hellaswag", "Rowan/hellaswag", None, "validation", "train", "acc_norm,none",
              "https://github.com/rowanz/hellaswag (MIT); Hugging Face dataset Rowan/hellaswag", True,
              folder="hellaswag"),
    Benchmark("ifeval", "ifeval", "google/IFEval", None, "train", None, "prompt_level_strict_acc,none",
              "https://github.com/google-research/google-research/tree/master/instruction_following_eval "
              "(Apache-2.0); Hugging Face dataset google/IFEval", False,
              extra_names={"train": ("ifeval_input_data",)}, folder="ifeval"),
)}
ALIASES = {alias: b.name for b in BENCHMARKS.values() for alias in b.aliases}


def resolve(names: list[str]) -> list[Benchmark]:
    """Benchmarks by name (aliases allowed, duplicates dropped, order kept); an unknown name is exit 2."""
    out: list[Benchmark] = []
    for raw in names:
        name = ALIASES.get(raw.strip().lower(), raw.strip().lower())
        if name not in BENCHMARKS:
            known = ", ".join([*BENCHMARKS, *ALIASES])
            raise UserError(f"benchmark: unknown benchmark {raw!r}; available: {known}")
        if BENCHMARKS[name] not in out:
            out.append(BENCHMARKS[name])
    return out

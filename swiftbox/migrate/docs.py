"""docs/migrating.md, rendered from the peers' tables (the tables are the source of truth; tests/unit/test_migrate.py
fails when the page is stale). Regenerate: `.venv/bin/python -m swiftbox.migrate.docs > docs/migrating.md`."""
from __future__ import annotations

from swiftbox.migrate.table import IGNORE, MAP, READ, REFUSE, Key

HOW = {MAP: "mapped", READ: "mapped (see note)", IGNORE: "ignored", REFUSE: "refused"}

INTRO = """# Migrating from LLaMA-Factory, ms-swift or Axolotl

Bring what you already have; swiftbox reads it as it is.

| you have | you type |
|---|---|
| a LLaMA-Factory YAML + its `data/dataset_info.json` | `./launch.sh train x.yaml` (or `run`), where LLaMA-Factory ran |
| an Axolotl YAML (`axolotl train x.yml`) | `./launch.sh train x.yml` |
| an ms-swift command line (`swift sft ...`, `swift rlhf ...`) | the same words, `./launch.sh` instead of `swift` |
| an ms-swift argument file (JSON/YAML of its flag names) | `./launch.sh train args.yaml` |
| a swiftbox run, to try in a peer | `./launch.sh export-config RUN --to PEER --output FILE` |

The menu offers the same ("Import a config from LLaMA-Factory / ms-swift / Axolotl"). A file is recognised by
its content (LLaMA-Factory: `model_name_or_path`; Axolotl: `base_model` + `datasets`; ms-swift: `model` + its
training flags); a command line is read as ms-swift's when it uses a flag of ms-swift's table that is not one of
swiftbox's own (`--tuner_type`, `--lora_rank`, `--num_train_epochs`, ...) or a command swiftbox has no step of its
own for (`rlhf`, `export`, `infer`, `deploy`). Such a command line is read entirely in ms-swift's words and
defaults; swiftbox's own flags (`--lora.rank`, `--epochs`) are not mixed in.

**Exactly, or one clear line.** Each key becomes the swiftbox setting with the same meaning, and a key the file
omits takes the *peer's* default, not swiftbox's (LLaMA-Factory's `lora_alpha` is 2 x `lora_rank`, its
`lr_scheduler_type` linear; ms-swift's `lora_alpha` 32 and `weight_decay` 0.1; Axolotl's `num_epochs` 1). The
result is an ordinary swiftbox recipe that validates through swiftbox's own schema, so `./launch.sh compare`
between a run from the peer's file and the same job written as a swiftbox recipe shows no difference. A key
swiftbox cannot honour (a stage or option it lacks, a value that would change the result) stops the run before
anything starts, with one line naming it and what to use instead (exit 2); a key that is not in the table is
refused the same way. Keys that only tune logging, speed or checkpoint housekeeping are *ignored* and listed in
the run's first line.

**Chat templates.** swiftbox renders with the model's own chat template. A peer's template name
(LLaMA-Factory `template: llama3`, ms-swift `--template`, Axolotl `chat_template:`) is checked against it: a
name of the same family passes, one that contradicts the model is refused, and a peer's generic formats
(`default`, `empty`, `alpaca`, `vicuna`, ...) are refused by name (remove the key to use the model's own).

**`export-config`** (`--to llamafactory|axolotl|ms-swift`) writes the peer's config for a swiftbox training
run from its `swiftbox.json`; the file is read back through the importer before it is written and must give the
run's own configuration, else the setting the peer cannot express is named (exit 2). For LLaMA-Factory it also
writes `dataset_info.json` (in `FILE_data/`, with absolute `file_name`s).
"""


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def table(rows: list[Key]) -> str:
    lines = ["| key | swiftbox setting | peer default | handling | notes |", "|---|---|---|---|---|"]
    for key in rows:
        name = f"`{key.name}`" + "".join(f" / `{a}`" for a in key.aliases)
        target = f"`{key.to}`" if key.to else "-"
        if key.kinds:
            target += f" ({', '.join(key.kinds)})"
        how = HOW[key.how]
        if key.how == REFUSE:
            accepted = [a for a in key.accept if a is not None]
            if accepted:
                how += " unless " + " / ".join(str(a).lower() if isinstance(a, bool) else str(a) for a in accepted)
        lines.append(f"| {name} | {_cell(target)} | {_cell(key.shown_default())} | {how} | {_cell(key.note)} |")
    return "\n".join(lines)


def render() -> str:
    from swiftbox.migrate import axolotl, llamafactory, ms_swift, templates

    parts = [INTRO]
    parts.append("## LLaMA-Factory\n\nStages: " + ", ".join(f"`{k}` -> {v}" for k, v in llamafactory.STAGES.items())
                 + "; `pref_loss` " + ", ".join(f"`{k}` -> {v}" for k, v in llamafactory.PREF_LOSSES.items())
                 + ". Anything else (`ppo`, ...) is refused.\n\n" + table(llamafactory.TABLE))
    alpaca = ", ".join(f"`{k}`: {' / '.join(v)}" for k, v in llamafactory.ALPACA_COLUMNS.items())
    sharegpt = ", ".join(f"`{k}`: {' / '.join(v)}" for k, v in llamafactory.SHAREGPT_COLUMNS.items())
    tags = ", ".join(f"`{k}`: {' / '.join(v)}" for k, v in llamafactory.SHAREGPT_TAGS.items())
    parts.append(
        "### dataset_info.json\n\n`dataset: a,b` names entries of `<dataset_dir>/dataset_info.json` (read relative to "
        "the working directory, as LLaMA-Factory does); each becomes the file swiftbox reads, `path#N` for "
        "`num_samples: N` (a random sample, repeated past the file's size, as LLaMA-Factory samples). An entry is "
        "refused where swiftbox would read the file differently: a hub dataset (`hf_hub_url`, `ms_hub_url`, ...) "
        "with no local `file_name`, a `.txt` file (LLaMA-Factory reads it line by line), images/videos/audios "
        "columns, `ranking` that does not fit the stage, and column or tag names swiftbox's readers do not take as "
        "they are. Accepted, per role:\n\n"
        f"- alpaca columns: {alpaca}\n- sharegpt columns: {sharegpt}\n- sharegpt tags: {tags}\n"
        "- pt: `prompt`: text (a jsonl with a `text` column)\n\nDataset entry keys read: "
        + ", ".join(f"`{k}`" for k in sorted(llamafactory.DATASET_KEYS)) + ".")
    parts.append("## ms-swift\n\nCommands: `sft`, `pt`, `rlhf` (`--rlhf_type` " + " | ".join(ms_swift.RLHF)
                 + "), `export` (`--merge_lora true` -> merge, `--quant_method` -> quantize), `infer` -> chat, "
                 "`deploy` -> serve. An argument file is read as `rlhf` when it has `rlhf_type`, else as `sft`.\n\n"
                 + table(ms_swift.TABLE))
    parts.append("## Axolotl\n\n`rl` " + ", ".join(f"`{k}` -> {v}" for k, v in axolotl.RL.items())
                 + "; no `rl`: sft (pt when every dataset is `type: completion`).\n\n" + table(axolotl.TABLE)
                 + "\n\nDataset entry keys read: " + ", ".join(f"`{k}`" for k in sorted(axolotl.DATASET_KEYS))
                 + ". `type: chat_template` reads `messages` (role/content) or `conversations` (from/value) files; "
                 "`roles`, `roles_to_train` (assistant) and `train_on_eos` (turn) are accepted where they mean what "
                 "swiftbox does.")
    families: dict[str, list[str]] = {}
    for name, marker in templates.MARKERS.items():
        families.setdefault(marker, []).append(f"`{name}`")
    parts.append("## Template names\n\n| names | the model's own template must print |\n|---|---|\n"
                 + "\n".join(f"| {', '.join(names)} | `{_cell(marker)}` |" for marker, names in families.items())
                 + "\n\nPass as they are: " + ", ".join(f"`{n}`" for n in templates.OWN) + ". Refused by name: "
                 + ", ".join(f"`{n}`" for n in templates.GENERIC) + ".")
    return "\n\n".join(parts) + "\n"


if __name__ == "__main__":
    print(render(), end="")

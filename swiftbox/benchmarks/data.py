"""Finding a benchmark's files offline, in the Hugging Face dataset's own layout.

A data directory holds datasets as `hf download DATASET --repo-type dataset --local-dir DIR/DATASET` leaves them:
`DIR/openai/gsm8k/main/test-00000-of-00001.parquet`, `DIR/cais/mmlu/anatomy/dev-....parquet`,
`DIR/google/IFEval/ifeval_input_data.jsonl`. A split is `<split>.jsonl|.json|.parquet` or `<split>-*.<ext>`, in
the config's folder or its `data/` folder. Without a data directory the small slices shipped beside this module
are used (`slices/README.md`: which rows, from where, under which license). Nothing is ever downloaded: a
missing split is one line, exit 2, naming the folder, the file names it looks for and where the data comes from.

Every file found is read here before lm-eval sees it (`check_rows`): UTF-8 JSON lines (or a JSON list) of objects
- or a parquet table - with the fields the benchmark's lm-eval task reads, of the types it reads them as, nested
no deeper than `MAX_DEPTH`, with at least one row to score and, with `shots`, enough rows to draw the few-shot
examples from. Anything else is one line, exit 2, naming the file, the row and the field - never a traceback
from deep inside `datasets` or the harness.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from swiftbox.benchmarks.catalog import EACH_SUBJECT, Benchmark
from swiftbox.errors import UserError

SHIPPED = Path(__file__).resolve().parent / "slices"
FORMATS = {".jsonl": "json", ".json": "json", ".parquet": "parquet"}
MAX_DEPTH = 16                  # the benchmarks' rows nest 3 deep; deeper is not a benchmark file
MAX_JSON_BYTES = 256 << 20      # a .json (one document, parsed whole); .jsonl is read a line at a time

# the fields each benchmark's lm-eval task reads from a row, and the JSON types it reads them as
FIELDS: dict[str, dict[str, tuple[type, ...]]] = {
    "mmlu": {"question": (str,), "choices": (list,), "answer": (int,)},
    "gsm8k": {"question": (str,), "answer": (str,)},
    "arc_challenge": {"question": (str,), "choices": (dict,), "answerKey": (str,)},
    "arc_easy": {"question": (str,), "choices": (dict,), "answerKey": (str,)},
    "hellaswag": {"activity_label": (str,), "ctx_a": (str,), "ctx_b": (str,), "endings": (list,),
                  "label": (str, int)},
    "ifeval": {"key": (int,), "prompt": (str,), "instruction_id_list": (list,), "kwargs": (list,)},
}
TYPE_NAMES = {str: "a string", int: "an integer", list: "a list", dict: "an object"}


@dataclass(frozen=True)
class TaskData:
    """One lm-eval task's local files: the split name -> files, and the `datasets` builder that reads them."""

    benchmark: Benchmark
    config: Optional[str]                 # the subject for MMLU, else the benchmark's config
    builder: str                          # "json" | "parquet"
    files: dict[str, list[str]]
    fewshot_split: str                    # the benchmark's own, or the scored split when that one is absent

    @property
    def task(self) -> str:
        return self.benchmark.subtask(self.config)

    @property
    def rows(self) -> int:
        """Rows in the scored split (counted for jsonl; -1 where a count needs a parquet reader)."""
        files = self.files[self.benchmark.eval_split]
        if self.builder != "json" or any(not f.endswith(".jsonl") for f in files):
            return -1
        return sum(1 for f in files for line in open(f, encoding="utf-8") if line.strip())


def split_files(folder: Path, split: str, stems: tuple[str, ...] = ()) -> list[Path]:
    """The files of `split` in `folder` (or its data/ folder), one format only (the first found)."""
    for place in (folder, folder / "data"):
        for stem in (split, *stems):
            for ext in FORMATS:
                found = [p for p in (place / f"{stem}{ext}",) if p.is_file()]
                found += sorted(p for p in place.glob(f"{stem}-*{ext}") if p.is_file())
                if found:
                    return found
    return []


def locate(bench: Benchmark, data_dir: Optional[Path], own_path: Optional[Path] = None) -> list[TaskData]:
    """The task(s) of `bench` with their local files; exit 2 naming what is missing and where it comes from. The
    rows are read by `check_rows` (eval_benchmarks.locate_all runs both)."""
    shipped = data_dir is None and own_path is None
    root = own_path if own_path is not None else (data_dir or SHIPPED) / bench.dataset
    if own_path is not None and own_path.is_file():          # one file: the scored split itself
        if own_path.suffix not in FORMATS:
            raise UserError(f"benchmark {bench.name}: {own_path}: expected a .jsonl, .json or .parquet file")
        files = {bench.eval_split: [str(own_path)]}
        return [TaskData(bench, None if bench.config == EACH_SUBJECT else bench.config, FORMATS[own_path.suffix],
                         files, bench.eval_split)]
    if own_path is not None and not own_path.is_dir():
        raise UserError(f"benchmark {bench.name}: {own_path}: expected a .jsonl, .json or .parquet file or a folder")
    if bench.config == EACH_SUBJECT:
        subjects = sorted(p.name for p in root.iterdir() if p.is_dir() and split_files(p, bench.eval_split)) \
            if root.is_dir() else []
        if not subjects:
            raise _missing(bench, root / "<subject>", shipped)
        return [_task(bench, root / s, s, shipped) for s in subjects]
    return [_task(bench, root / bench.config if bench.config else root, bench.config, shipped)]


def _task(bench: Benchmark, folder: Path, config: Optional[str], shipped: bool) -> TaskData:
    scored = split_files(folder, bench.eval_split, bench.extra_names.get(bench.eval_split, ()))
    if not scored:
        raise _missing(bench, folder, shipped)
    builder = FORMATS[scored[0].suffix]
    files = {bench.eval_split: [str(p) for p in scored]}
    fewshot = bench.eval_split
    if bench.fewshot_split:
        extra = [p for p in split_files(folder, bench.fewshot_split) if FORMATS[p.suffix] == builder]
        if extra:
            files[bench.fewshot_split] = [str(p) for p in extra]
            fewshot = bench.fewshot_split
    return TaskData(bench, config, builder, files, fewshot)


def _missing(bench: Benchmark, folder: Path, shipped: bool) -> UserError:
    split = bench.eval_split
    stems = " | ".join(f"{s}.jsonl | {s}.parquet | {s}-*.parquet" for s in (split, *bench.extra_names.get(split, ())))
    where = "the shipped slices lack it" if shipped else f"expected {stems} in {folder}"
    return UserError(f"benchmark {bench.name}: no {split} split offline ({where}); on a machine with a network: "
                     f"hf download {bench.dataset} --repo-type dataset --local-dir <data-dir>/{bench.dataset}, then "
                     f"--data-dir <data-dir> (source: {bench.source})")


# -- reading the rows before lm-eval does ----------------------------------------------------------------------
def check_rows(task: TaskData, shots: Optional[int] = None) -> dict[str, int]:
    """Rows per split of `task`, every row checked (see the module docstring); exit 2 on the first bad one."""
    bench = task.benchmark
    counts = {split: sum(_check_file(Path(f), bench) for f in files) for split, files in task.files.items()}
    scored = counts.get(bench.eval_split, 0)
    if scored == 0:
        raise UserError(f"benchmark {bench.name}: {_shown(task.files[bench.eval_split])}: no rows to score "
                        f"(the {bench.eval_split} split is empty)")
    if shots:
        pool = counts.get(task.fewshot_split, 0) - (1 if task.fewshot_split == bench.eval_split else 0)
        if pool < shots:
            raise UserError(f"benchmark {bench.name}: --shots {shots} needs {shots} example rows, but "
                            f"{_shown(task.files[task.fewshot_split])} ({task.fewshot_split} split) has "
                            f"{counts.get(task.fewshot_split, 0)} row(s)"
                            + (" and a row is never its own example" if task.fewshot_split == bench.eval_split
                               else "") + f"; pass --shots {max(pool, 0)} or fewer, or more rows")
    return counts


def _shown(files: list[str]) -> str:
    return files[0] + (f" (+{len(files) - 1} more)" if len(files) > 1 else "")


def _check_file(file: Path, bench: Benchmark) -> int:
    """The rows in `file`, each checked against the benchmark's fields."""
    where = f"benchmark {bench.name}: {file}"
    if file.suffix == ".parquet":
        return _check_parquet(file, bench, where)
    try:
        if file.suffix == ".json":
            if file.stat().st_size > MAX_JSON_BYTES:
                raise UserError(f"{where}: {file.stat().st_size >> 20} MB is more than a .json file may hold here "
                                f"({MAX_JSON_BYTES >> 20} MB); write it as JSON lines (.jsonl)")
            doc = _parse(file.read_bytes(), where)
            if not isinstance(doc, list):
                raise UserError(f"{where}: expected a JSON list of row objects (or a .jsonl file), got "
                                f"{_kind(doc)}")
            for i, row in enumerate(doc):
                _check_row(row, bench, f"{where}: row {i + 1}")
            return len(doc)
        rows = 0
        with open(file, "rb") as fh:
            for number, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                _check_row(_parse(line, f"{where}: line {number}"), bench, f"{where}: line {number}")
                rows += 1
        return rows
    except OSError as exc:
        raise UserError(f"{where}: cannot be read ({exc.strerror or type(exc).__name__})") from None


def _parse(raw: bytes, where: str) -> Any:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise UserError(f"{where}: not UTF-8 text (a binary file?); expected JSON lines") from None
    try:
        value = json.loads(text)
    except RecursionError:
        raise UserError(f"{where}: nested too deeply (more than {MAX_DEPTH} levels)") from None
    except ValueError as exc:
        raise UserError(f"{where}: not valid JSON ({' '.join(str(exc).split())[:120]})") from None
    return value


def _depth(value: Any) -> int:
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, (list, dict)):
            deepest = max(deepest, level)
            if level <= MAX_DEPTH:
                stack.extend((v, level + 1) for v in (item.values() if isinstance(item, dict) else item))
    return deepest


def _check_row(row: Any, bench: Benchmark, where: str) -> None:
    if not isinstance(row, dict):
        raise UserError(f"{where}: expected a JSON object (one row), got {_kind(row)}")
    if _depth(row) > MAX_DEPTH:
        raise UserError(f"{where}: nested too deeply (more than {MAX_DEPTH} levels)")
    for name, types in FIELDS.get(bench.name, {}).items():
        if name not in row:
            raise UserError(f"{where}: no field {name!r} (a {bench.name} row has "
                            f"{', '.join(FIELDS[bench.name])})")
        value = row[name]
        if isinstance(value, bool) or not isinstance(value, types):
            raise UserError(f"{where}: field {name!r} is {_kind(value)}; expected "
                            f"{' or '.join(TYPE_NAMES[t] for t in types)}")
    _check_values(row, bench, where)


def _check_values(row: dict, bench: Benchmark, where: str) -> None:
    """What the task indexes with: a gold answer that points at one of the choices."""
    if bench.name == "mmlu":
        if not row["choices"] or not 0 <= row["answer"] < len(row["choices"]):
            raise UserError(f"{where}: field 'answer' is {row['answer']}; expected an index into the "
                            f"{len(row['choices'])} choices")
    elif bench.name.startswith("arc"):
        choices = row["choices"]
        labels, texts = choices.get("label"), choices.get("text")
        if not (isinstance(labels, list) and isinstance(texts, list) and labels and len(labels) == len(texts)):
            raise UserError(f"{where}: field 'choices' must hold lists 'text' and 'label' of the same length")
        if row["answerKey"] not in labels:
            raise UserError(f"{where}: field 'answerKey' {row['answerKey'][:20]!r} is not one of the choice labels")
    elif bench.name == "hellaswag":
        try:
            gold = int(row["label"])
        except ValueError:
            gold = -1
        if not row["endings"] or not 0 <= gold < len(row["endings"]):
            raise UserError(f"{where}: field 'label' is {str(row['label'])[:20]!r}; expected an index into the "
                            f"{len(row['endings'])} endings")


def _check_parquet(file: Path, bench: Benchmark, where: str) -> int:
    """A parquet file's schema against the benchmark's fields (its rows are typed by the schema) and its row count
    from the footer; no data is read."""
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq

        meta = pq.ParquetFile(str(file))
        schema, rows = meta.schema_arrow, meta.metadata.num_rows
    except ImportError:
        raise UserError(f"{where}: reading parquet needs pyarrow (pip install pyarrow)") from None
    except Exception as exc:  # noqa: BLE001 - pyarrow's own error types: a file that is not parquet
        raise UserError(f"{where}: not a readable parquet file ({' '.join(str(exc).split())[:120]})") from None
    kinds = {str: pa.types.is_string, int: pa.types.is_integer, list: pa.types.is_list, dict: pa.types.is_struct}
    for name, types in FIELDS.get(bench.name, {}).items():
        index = schema.get_field_index(name)
        if index < 0:
            raise UserError(f"{where}: no column {name!r} (a {bench.name} row has {', '.join(FIELDS[bench.name])})")
        kind = schema.field(index).type
        if not any(kinds[t](kind) or (t is str and pa.types.is_large_string(kind)) for t in types):
            raise UserError(f"{where}: column {name!r} is {kind}; expected "
                            f"{' or '.join(TYPE_NAMES[t] for t in types)}")
    return int(rows)


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if value is None:
        return "null"
    return TYPE_NAMES.get(type(value), f"a {type(value).__name__}")

"""Finding a benchmark's files offline, in the Hugging Face dataset's own layout.

A data directory holds datasets as `hf download DATASET --repo-type dataset --local-dir DIR/DATASET` leaves them:
`DIR/openai/gsm8k/main/test-00000-of-00001.parquet`, `DIR/cais/mmlu/anatomy/dev-....parquet`,
`DIR/google/IFEval/ifeval_input_data.jsonl`. A split is `<split>.jsonl|.json|.parquet` or `<split>-*.<ext>`, in
the config's folder or its `data/` folder. Without a data directory the small slices shipped beside this module
are used (`slices/README.md`: which rows, from where, under which license). Nothing is ever downloaded: a
missing split is one line, exit 2, naming the folder, the file names it looks for and where the data comes from.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from swiftbox.benchmarks.catalog import EACH_SUBJECT, Benchmark
from swiftbox.errors import UserError

SHIPPED = Path(__file__).resolve().parent / "slices"
FORMATS = {".jsonl": "json", ".json": "json", ".parquet": "parquet"}


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
    """The task(s) of `bench` with their local files; exit 2 naming what is missing and where it comes from."""
    shipped = data_dir is None and own_path is None
    root = own_path if own_path is not None else (data_dir or SHIPPED) / bench.dataset
    if own_path is not None and own_path.is_file():          # one file: the scored split itself
        if own_path.suffix not in FORMATS:
            raise UserError(f"benchmark {bench.name}: {own_path}: expected a .jsonl, .json or .parquet file")
        files = {bench.eval_split: [str(own_path)]}
        return [TaskData(bench, None if bench.config == EACH_SUBJECT else bench.config, FORMATS[own_path.suffix],
                         files, bench.eval_split)]
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

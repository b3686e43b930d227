"""Standard benchmarks (MMLU, GSM8K, ARC, HellaSwag, IFEval) run through lm-evaluation-harness on local files.

`catalog` names what swiftbox offers and where each benchmark's data comes from; `data` finds those files
offline (a --data-dir, a path per benchmark, or the small slices shipped in `slices/`); `harness` hands the
harness a model swiftbox loaded (or a running server) and the tasks re-pointed at the local files, and keeps
its metrics as it reports them; `table` prints one comparison table for several models. Nothing here imports
lm-eval until a run starts: it is the `[eval]` extra (docs/evaluation.md says why lm-eval, not EvalScope).
"""

"""A stand-in training pipeline for the launch tests: declared `distributed` like sft/dpo, so the runner launches
its workers, but the "training" is one real gloo all_reduce across the ranks. Workers import it as
`tests.fakes.dist_standin` (the module that declared the pipeline) and run its `execute`; nothing here relaunches.

STANDIN_FAIL_RANK=N makes rank N raise after the all_reduce, while the others wait in a barrier.
STANDIN_FAIL_KIND=user makes that failure a UserError (exit 2), =kill a SIGKILL, else a RuntimeError.
"""
from __future__ import annotations

import json
import os

from swiftbox.contract import StepResult, declare
from swiftbox.errors import UserError
from swiftbox.steps import SftStep
from swiftbox.training.distributed.ranks import is_main_process, rank, world_size
from swiftbox.training.model import check_training


def run(cfg: SftStep, ctx) -> StepResult:
    import torch
    import torch.distributed as dist

    dist.init_process_group(backend=ctx.platform.dist_backend)
    total = torch.tensor([float(rank() + 1)])
    dist.all_reduce(total)
    if os.environ.get("STANDIN_FAIL_RANK") == str(rank()):
        if os.environ.get("STANDIN_FAIL_KIND") == "kill":  # like the OOM killer: no last words
            import signal

            os.kill(os.getpid(), signal.SIGKILL)
        if os.environ.get("STANDIN_FAIL_KIND") == "user":
            raise UserError(f"dataset: bad row seen on rank {rank()}")
        raise RuntimeError(f"simulated crash on rank {rank()}")
    if is_main_process():
        (ctx.work_dir / "standin.json").write_text(json.dumps({"world_size": world_size(), "sum": total.item(),
                                                               "input": ctx.input, "lr": cfg.learning_rate}))
    dist.barrier()
    return StepResult(metrics={"allreduce_sum": total.item()}, info={"artifact": "standin"})


PIPELINE = declare("sft", SftStep, produces_model=True, check=check_training, run=run, distributed=True)

"""Shared pieces of the training pipelines (sft, dpo): model setup, trainer arguments, callbacks
(rich progress, TensorBoard), checkpoints/resume and the loss-curve plot. Thin wrappers over
transformers / PEFT / bitsandbytes; the flow itself reads top to bottom in pipelines/sft.py and dpo.py.

The public surface (`__all__`, what bench/ and menus/ may import; tests/unit/test_layers.py holds them to it) is
loaded lazily: `import swiftbox.training.x` must not pull torch in through this file."""
from __future__ import annotations

from typing import TYPE_CHECKING

from swiftbox.lazy import lazy_exports

if TYPE_CHECKING:
    from swiftbox.compat import peft_lora_fused, trl_lm_head_folded, trl_lm_head_tiles, trl_scores_label_positions_only
    from swiftbox.training.arguments import describe_batching
    from swiftbox.training.lm_head import FoldedLogProb
    from swiftbox.training.lora_fused import lora_linear
    from swiftbox.training.memory_policy import memory_callbacks
    from swiftbox.training.model import load_for_training, lora_config
    from swiftbox.training.profile_window import profile_callbacks
    from swiftbox.training.rewards import check_spec, parse_spec
    from swiftbox.training.thread_policy import thread_callbacks

# name -> the module that defines it (the memory levers' patches live in compat, the one home of library patches)
_EXPORTS = {
    "load_for_training": "swiftbox.training.model", "lora_config": "swiftbox.training.model",
    "describe_batching": "swiftbox.training.arguments", "lora_linear": "swiftbox.training.lora_fused",
    "profile_callbacks": "swiftbox.training.profile_window",
    "check_spec": "swiftbox.training.rewards", "parse_spec": "swiftbox.training.rewards",
    "peft_lora_fused": "swiftbox.compat", "trl_lm_head_tiles": "swiftbox.compat",
    "trl_lm_head_folded": "swiftbox.compat", "FoldedLogProb": "swiftbox.training.lm_head",
    "trl_scores_label_positions_only": "swiftbox.compat", "thread_callbacks": "swiftbox.training.thread_policy",
    "memory_callbacks": "swiftbox.training.memory_policy",
}


__getattr__ = lazy_exports(__name__, _EXPORTS)


__all__ = ["FoldedLogProb", "check_spec", "describe_batching", "load_for_training", "lora_config", "lora_linear",
           "memory_callbacks", "parse_spec", "peft_lora_fused", "profile_callbacks", "thread_callbacks",
           "trl_lm_head_folded", "trl_lm_head_tiles", "trl_scores_label_positions_only"]

"""The DPO speed lever: TRL's fused LM head scoring only the replies' positions gives the same loss and gradients
as scoring every position (what TRL does off Triton devices), on the toy model with a non-trivial adapter."""
from __future__ import annotations

import pytest

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_dpo_loss_and_grads_unchanged_by_scoring_reply_positions_only(tmp_path):
    import torch
    from datasets import Dataset
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import DPOConfig, DPOTrainer

    from swiftbox.catalog.toy import toy_path
    from swiftbox.compat import trl_scores_label_positions_only

    path = toy_path()
    tokenizer = AutoTokenizer.from_pretrained(path)
    torch.manual_seed(0)
    model = get_peft_model(AutoModelForCausalLM.from_pretrained(path),
                           LoraConfig(r=4, lora_alpha=8, target_modules="all-linear", task_type="CAUSAL_LM"))
    pairs = [{"prompt": f"Is {n} even? Answer:", "chosen": " yes" if n % 2 == 0 else " no",
              "rejected": " no" if n % 2 == 0 else " yes, it is"} for n in range(4)]
    args = DPOConfig(output_dir=str(tmp_path), per_device_train_batch_size=4, report_to="none", use_cpu=True,
                     max_length=64)
    trainer = DPOTrainer(model=model, args=args, processing_class=tokenizer, train_dataset=Dataset.from_list(pairs))
    batch = next(iter(trainer.get_train_dataloader()))
    with torch.no_grad():           # move the trained adapter only, so the policy differs from the reference
        for name, p in trainer.model.named_parameters():
            if "lora_B" in name and ".default." in name:
                p.normal_(0, 0.05)

    def loss_and_grads():
        trainer.model.zero_grad()
        loss = trainer.compute_loss(trainer.model, batch)
        loss.backward()
        grads = [p.grad.clone() for p in trainer.model.parameters() if p.requires_grad]
        return loss.detach(), grads

    every, every_grads = loss_and_grads()
    with trl_scores_label_positions_only():
        replies, reply_grads = loss_and_grads()
    assert abs(every.item() - 0.6931) > 1e-4          # the adapter moved the policy away from the reference
    assert torch.allclose(every, replies, atol=1e-5)
    assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(every_grads, reply_grads))

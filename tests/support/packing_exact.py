"""Is packing exact for a model family? The check behind tests/unit/test_packing_exact.py.

A tiny random model of the family (2 layers, hidden 64, vocabulary 128, nothing downloaded) sees three rows of
different lengths twice: packed the way swiftbox's SFT packs them (TRL's padding-free collator: one flattened row,
position_ids restarting per sample, cu_seq_lens / seq_idx for varlen and linear-attention kernels, the first label
of every sample masked) and each row alone. Packing is exact when every row's per-token loss and the summed
parameter gradients match (tolerance by dtype) and no row's loss has a gradient through another row's inputs.

Outcomes: "exact"; "leaks" (a packed sample's loss depends on another sample); "refused" (transformers raises on a
packed batch, e.g. a linear-attention layer without its varlen kernel). Only "exact" may pack.
"""
from __future__ import annotations

import contextlib
import io
import warnings
from dataclasses import dataclass

import torch

VOCAB = 128
ROW_LENGTHS = (11, 7, 9)
PROMPT = 3           # the first tokens of each row carry no label (a prompt)
BASE = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, head_dim=16, max_position_embeddings=256, pad_token_id=0, bos_token_id=1,
            eos_token_id=2, tie_word_embeddings=False)
_MOE = dict(num_experts=4, num_local_experts=4, n_routed_experts=4, num_experts_per_tok=2, moe_intermediate_size=32)
_MAMBA = dict(mamba_n_heads=4, mamba_d_head=32, mamba_d_state=16, mamba_n_groups=1, mamba_chunk_size=8)

# model_type -> config overrides that keep it tiny and make every hybrid hold at least one non-attention layer
FAMILIES: dict[str, dict] = {
    "llama": {}, "mistral": {}, "qwen2": {}, "qwen3": {}, "qwen3_moe": _MOE, "phi3": {}, "glm": {}, "glm4": {},
    "glm4_moe": dict(_MOE, first_k_dense_replace=0, n_group=1, topk_group=1),
    "gemma2": dict(sliding_window=4), "gemma3_text": dict(sliding_window=4, layer_types=["sliding_attention",
                                                                                         "full_attention"]),
    "gemma4_text": dict(sliding_window=4), "smollm3": {}, "olmo3": {},
    "llama4_text": dict(_MOE, intermediate_size_mlp=64),
    "gpt_oss": dict(_MOE, sliding_window=4),
    "deepseek_v3": dict(_MOE, first_k_dense_replace=0, n_group=1, topk_group=1, q_lora_rank=None, kv_lora_rank=16,
                        qk_rope_head_dim=8, qk_nope_head_dim=8, v_head_dim=16, head_dim=None,
                        num_key_value_heads=None),
    # issue 42: attention-only families of this year (DeepSeek-V4's hash-routed MoE layers need input_ids: top-k MoE)
    "seed_oss": {}, "apertus": {}, "minimax_m2": _MOE, "hy_v3": dict(_MOE, first_k_dense_replace=0),
    "deepseek_v4": dict(_MOE, first_k_dense_replace=0, mlp_layer_types=["moe", "moe"]),
    # GLM-5's DeepSeek Sparse Attention: an indexer top-k (4) shorter than the rows, as real rows exceed 2048 keys
    "glm_moe_dsa": dict(_MOE, first_k_dense_replace=0, q_lora_rank=16, kv_lora_rank=16, qk_rope_head_dim=8,
                        qk_nope_head_dim=8, v_head_dim=16, num_key_value_heads=4, index_topk=4, index_head_dim=16,
                        index_n_heads=2),
    "ernie4_5": {}, "ernie4_5_moe": dict(_MOE, moe_num_experts=4, moe_k=2, moe_layer_start_index=0),
    # hybrid linear attention / state space / convolution
    "qwen3_next": dict(_MOE, layer_types=["linear_attention", "full_attention"], linear_num_key_heads=2,
                       linear_num_value_heads=4, linear_key_head_dim=16, linear_value_head_dim=16),
    "qwen3_5_text": dict(layer_types=["linear_attention", "full_attention"], linear_num_key_heads=2,
                         linear_num_value_heads=4, linear_key_head_dim=16, linear_value_head_dim=16),
    "qwen3_5_moe_text": dict(_MOE, layer_types=["linear_attention", "full_attention"], linear_num_key_heads=2,
                             linear_num_value_heads=4, linear_key_head_dim=16, linear_value_head_dim=16),
    "lfm2": dict(layer_types=["conv", "full_attention"]),
    "lfm2_moe": dict(_MOE, layer_types=["conv", "full_attention"], num_dense_layers=1),
    "granitemoehybrid": dict(_MOE, **_MAMBA, layer_types=["mamba", "attention"]),
    "falcon_h1": dict(_MAMBA, mamba_d_ssm=128, layers_block_type=None),
    "bamba": dict(_MAMBA, attn_layer_indices=[1]),
    "nemotron_h": dict(_MOE, layers_block_type=["mamba", "attention"], mamba_num_heads=4, mamba_head_dim=32,
                       ssm_state_size=16, n_groups=1, chunk_size=8),
    "jamba": dict(_MOE, attn_layer_period=2, attn_layer_offset=1, expert_layer_period=2, expert_layer_offset=1),
    "zamba2": dict(_MAMBA, layers_block_type=["mamba", "hybrid"], mamba_headdim=16, n_mamba_heads=8),
    "kimi_linear": dict(_MOE, linear_attn_config={"kda_layers": [1], "full_attn_layers": [2], "num_heads": 4,
                                                   "head_dim": 16, "short_conv_kernel_size": 4}),
    "olmo_hybrid": dict(layer_types=["linear_attention", "full_attention"]),
    "recurrent_gemma": dict(block_types=["recurrent", "attention"], lru_width=64, attention_window_size=16),
    "mamba": {}, "mamba2": dict(num_heads=4, head_dim=32, n_groups=1, state_size=16, chunk_size=8),
    "falcon_mamba": {},
}

# registry model types whose text model the harness builds (their checkpoints wrap it with a vision tower)
TEXT_MODEL_OF = {"qwen3_5": "qwen3_5_text", "qwen3_5_moe": "qwen3_5_moe_text", "gemma4": "gemma4_text",
                 "llama4": "llama4_text"}

TOLERANCE = {torch.float32: 2e-5, torch.bfloat16: 6e-2}   # per-token loss, absolute (a loss is ~ln 128 = 4.85)


@dataclass
class Verdict:
    outcome: str            # "exact" | "leaks" | "refused"
    loss_diff: float        # max |per-token loss packed - alone|
    grad_diff: float        # max |summed parameter gradient packed - alone|, relative to its largest entry
    cross_grad: float       # max |d loss(last row) / d inputs of the other rows|
    detail: str = ""


def tiny_model(model_type: str, dtype: torch.dtype = torch.float32, attn: str = "sdpa"):
    """A random 2-layer model of the family, on the attention kernel swiftbox trains with (SDPA; eager where
    transformers has no SDPA path for the family). `attn="sdpa_varlen"`: swiftbox's per-sample SDPA for packed
    rows (swiftbox/device/attention.py), registered here."""
    from transformers import AutoConfig, AutoModelForCausalLM

    if attn == "sdpa_varlen":
        from swiftbox.device.attention import register

        register()
    kwargs = {**BASE, **FAMILIES[model_type]}
    kwargs = {k: v for k, v in kwargs.items() if v is not None}
    config = AutoConfig.for_model(model_type, **kwargs)
    config.use_cache = False
    torch.manual_seed(0)
    with _quiet():
        try:
            model = AutoModelForCausalLM.from_config(config, attn_implementation=attn, dtype=dtype)
        except ValueError as exc:
            if "scaled_dot_product_attention" not in str(exc) or attn != "sdpa":
                raise
            model = AutoModelForCausalLM.from_config(config, attn_implementation="eager", dtype=dtype)
    return model.eval()


def rows() -> list[dict]:
    g = torch.Generator().manual_seed(1)
    out = []
    for length in ROW_LENGTHS:
        ids = torch.randint(3, VOCAB, (length,), generator=g).tolist()
        out.append({"input_ids": ids, "labels": [-100] * PROMPT + ids[PROMPT:]})
    return out


def packed_batch(samples: list[dict]) -> dict:
    """The batch swiftbox's SFT trains on with packing on (TRL's padding-free collator)."""
    from trl.trainer.sft_trainer import DataCollatorForLanguageModeling

    return DataCollatorForLanguageModeling(pad_token_id=0, padding_free=True)(samples)


def _token_losses(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.cross_entropy(logits[:-1].float(), labels[1:], ignore_index=-100, reduction="none")


def check(model_type: str, dtype: torch.dtype = torch.float32, attn: str = "sdpa", per_sample: bool = True) -> Verdict:
    """`per_sample`: the hybrid mixers keep packed samples apart the way swiftbox trains packed rows
    (swiftbox.compat.hybrid_mixers_per_sample); False measures transformers alone."""
    from swiftbox.compat import hybrid_mixers_per_sample

    model = tiny_model(model_type, dtype, attn)
    if per_sample:
        hybrid_mixers_per_sample(model, model_type)
    samples = rows()
    batch = packed_batch(samples)
    labels = batch.pop("labels")[0]
    embed = model.get_input_embeddings()
    inputs = embed(batch.pop("input_ids")).detach().requires_grad_(True)
    try:
        with _quiet():
            logits = model(inputs_embeds=inputs, **batch, use_cache=False).logits[0]
    except ValueError as exc:
        if "packed" not in str(exc):
            raise
        return Verdict("refused", float("nan"), float("nan"), float("nan"), str(exc).splitlines()[0])
    packed = _token_losses(logits, labels)
    starts = [0]
    for s in samples:
        starts.append(starts[-1] + len(s["input_ids"]))
    # a leak shows as a gradient of the last row's loss through the inputs of the rows before it
    last = packed[starts[-2]:starts[-1] - 1].sum()
    (cross,) = torch.autograd.grad(last, inputs, retain_graph=True)
    cross_grad = float(cross[0, :starts[-2]].abs().max())
    model.zero_grad()
    packed.sum().backward()
    grads_packed = {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad()
    loss_diff = 0.0
    for s, start in zip(samples, starts):
        ids = torch.tensor([s["input_ids"]])
        with _quiet():
            alone = _token_losses(model(input_ids=ids, use_cache=False).logits[0], torch.tensor(s["labels"]))
        alone.sum().backward()
        n = len(s["input_ids"]) - 1
        loss_diff = max(loss_diff, float((packed[start:start + n] - alone).detach().abs().max()))
    scale = max(float(g.abs().max()) for g in grads_packed.values())
    grad_diff = max(float((grads_packed[n] - p.grad).abs().max()) for n, p in model.named_parameters()
                    if n in grads_packed) / scale
    tol = TOLERANCE[dtype]
    exact = loss_diff <= tol and grad_diff <= tol * 5 and cross_grad <= 1e-7
    return Verdict("exact" if exact else "leaks", loss_diff, grad_diff, cross_grad)


@contextlib.contextmanager
def _quiet():
    with warnings.catch_warnings(), contextlib.redirect_stderr(io.StringIO()):
        warnings.simplefilter("ignore")
        yield

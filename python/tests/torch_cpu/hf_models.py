"""Hugging Face transformers models (from PyPI: their own modeling files), small random configs, made
tensor-parallel-shaped the way their own TP plans are applied for inference; rank `rank` of `world`
keeps its own shard:

  rowwise / rowwise_split_input  (o_proj, down_proj) the rank's input features of the linear,
                                 dist.all_reduce of its output, then the bias once (transformers'
                                 RowwiseParallel on its local inference path); _split_input takes
                                 the rank's slice of the replicated input first
  colwise                        the rank's slice of the output features
  colwise_gather_output          the whole output (what the gather gives back)
  embedding_rowwise              vocab-parallel: the lookups of the rank's vocabulary rows, the
                                 others zero, all-reduced
  expert plan (experts)          the rank's experts (the others' down projections zero, so they add
                                 exact zeros), their output all-reduced, as transformers' AllReduceEP
                                 sums the ranks' experts

The weights are drawn from the same seed on every rank, so the shards of one job fit together. On
one process with the CPU tests' fake process group, whose all-reduce leaves its input as it is, the
model computes one rank's partial values; the compiled model and the eager one compute the same.

    python3 hf_models.py --table     # print the per-model table (docs/compile_pass_models.md)
"""

from __future__ import annotations

import re

import torch
import torch.distributed as dist
import torch.nn.functional as F

WORLD = 2

# name: (model_type, config overrides); every config is small: 2 layers, hidden 256
MODELS = {
    "Llama": ("llama", {}),
    "Mistral": ("mistral", {}),
    "Qwen3": ("qwen3", {}),
    "Qwen3-MoE": ("qwen3_moe", dict(moe=True, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=64,
                                    decoder_sparse_step=1)),
    "Qwen2-MoE": ("qwen2_moe", dict(moe=True, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=64,
                                    shared_expert_intermediate_size=128)),
    "Mixtral": ("mixtral", dict(moe=True, num_local_experts=4, num_experts_per_tok=2)),
    "Gemma3": ("gemma3_text", dict(sliding_window=16)),
    "Phi-3": ("phi3", {}),
    "OLMo2": ("olmo2", {}),
}


def build(name: str, dtype=torch.bfloat16, seed: int = 0, rank: int = 0, world: int = WORLD,
          **overrides):
    """The model `name` (MODELS), random weights from `seed` (on the CPU: the same on every rank),
    eval mode, rank `rank`'s tensor-parallel shard of `world` (world 1: the whole model, without
    any all-reduce); `overrides` replace config values."""
    from transformers import AutoConfig, AutoModelForCausalLM

    model_type, extra = MODELS[name]
    extra = dict(extra, **overrides)
    moe = extra.pop("moe", False)
    cfg = AutoConfig.for_model(model_type, vocab_size=128, hidden_size=256, intermediate_size=512,
                               num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                               head_dim=64, max_position_embeddings=64, pad_token_id=0,
                               bos_token_id=1, eos_token_id=2, **extra)
    torch.manual_seed(seed)
    # MoE experts as batched matmuls: the grouped_mm path checks data pointers, which torch 2.10's
    # Dynamo cannot trace
    kwargs = {"experts_implementation": "batched_mm"} if moe else {}
    model = AutoModelForCausalLM.from_config(cfg, **kwargs).to(dtype).eval()
    _randomize_vectors(model, seed)
    if world > 1:
        tensor_parallel(model, world, rank)
    return model


def _randomize_vectors(model, seed: int) -> None:
    """Norm weights start as ones (zeros for Gemma's (1 + w)) and biases as zeros, values that would
    hide a weight or a bias wired wrongly (or a rounding order: x * 1 rounds as x): they get random
    values near their start."""
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1:
                scale = 0.02 if name.endswith("bias") else 0.25
                p.add_((scale * torch.randn(p.shape, generator=g)).to(p.dtype))


def _matches(model, pattern: str):
    rx = re.compile("^" + re.escape(pattern).replace(r"\*", r"\d+") + "$")
    return [(n, m) for n, m in model.named_modules() if rx.match(n)]


def _rows(t, world, rank):
    n = t.shape[0] // world
    return t[rank * n:(rank + 1) * n].clone()


def tensor_parallel(model, world: int = WORLD, rank: int = 0) -> None:
    if not 0 <= rank < world:
        raise ValueError(f"rank {rank} is not one of {world} ranks")
    plan = dict(getattr(model, "_tp_plan", None) or {})
    for pattern, style in plan.items():
        for _, module in _matches(model, pattern):
            if style in ("rowwise", "rowwise_split_input"):
                _rowwise(module, world, rank, split_input=style == "rowwise_split_input")
            elif style == "colwise":
                _colwise(module, world, rank)
            elif style == "embedding_rowwise":
                _embedding(module, world, rank)
            # colwise_gather_output / replicated_with_grad_allreduce: the whole output, unchanged
    for pattern, style in (getattr(model, "_ep_plan", None) or {}).items():
        if style == "ep_dispatch_experts":
            for _, module in _matches(model, pattern):
                _experts(module, world, rank)


# The replaced forwards read the module's attributes (not tensors captured when sharding), so that
# model.to(device) moves what they use.

def _rowwise(linear, world, rank, split_input):
    local_in = linear.in_features // world
    lo = rank * local_in
    linear.local_weight = torch.nn.Parameter(linear.weight[:, lo:lo + local_in].clone(),
                                             requires_grad=False)

    def forward(x):
        if split_input:
            x = x[..., lo:lo + local_in]
        out = F.linear(x, linear.local_weight)
        dist.all_reduce(out)
        if linear.bias is not None:
            out = out + linear.bias
        return out

    linear.forward = forward


def _colwise(linear, world, rank):
    linear.weight = torch.nn.Parameter(_rows(linear.weight, world, rank), requires_grad=False)
    if linear.bias is not None:
        linear.bias = torch.nn.Parameter(_rows(linear.bias, world, rank), requires_grad=False)
    linear.out_features //= world


def _embedding(module, world, rank):
    local = module.num_embeddings // world
    lo, hi = rank * local, (rank + 1) * local
    original = module.forward

    def forward(ids):
        mine = (ids >= lo) & (ids < hi)
        out = original(torch.where(mine, ids, torch.full_like(ids, lo)))
        out = out * mine.unsqueeze(-1).to(out.dtype)
        dist.all_reduce(out)
        return out

    module.forward = forward


def _experts(module, world, rank):
    n = module.down_proj.shape[0]
    if n % world:
        raise ValueError(f"{n} experts do not split over {world} ranks")
    local = n // world
    with torch.no_grad():  # the other ranks' experts: zero output, so they add exact zeros
        module.down_proj[:rank * local].zero_()
        module.down_proj[(rank + 1) * local:].zero_()
    original = module.forward

    def forward(*args, **kwargs):
        out = original(*args, **kwargs)
        dist.all_reduce(out)
        return out

    module.forward = forward


def forward_fn(model):
    """The function the tests compile: token ids -> logits (no KV cache)."""
    def fn(ids):
        return model(input_ids=ids, use_cache=False).logits
    return fn


def token_ids(seed: int = 0, batch: int = 2, seq: int = 8):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(3, 128, (batch, seq), generator=g)


# ---- the per-model table (docs/compile_pass_models.md) -------------------------------------------

DOC = "docs/compile_pass_models.md"
BEGIN, END = "<!-- models table: begin -->", "<!-- models table: end -->"


def _plain(text: str) -> str:
    """A reason without the graph's node names (they vary between torch versions): "mul_15
    (aten.mul.Tensor)" becomes "aten.mul.Tensor"."""
    return re.sub(r"\b\w+ \(((?:aten|prims|_c10d_functional|vllm|sglang|arfusion)[\w.]*)\)", r"\1",
                  text)


def row(name: str, stats) -> str:
    import collections

    fused = collections.Counter()
    left = collections.Counter()
    for _, _, outcome in stats.sites:
        if outcome.startswith("fused "):
            fused[outcome[len("fused "):].replace("decomposed: ", "")] += 1
        else:
            left[_plain(outcome[len("left: "):] if outcome.startswith("left: ") else outcome)] += 1
    fused_text = "<br>".join(f"{n} x {k}" for k, n in sorted(fused.items())) or "none"
    left_text = "<br>".join(f"{n} x {k}" for k, n in sorted(left.items())) or "none"
    return f"| {name} | {stats.all_reduces} | {fused_text} | {left_text} |"


def table(trace) -> str:
    """The markdown table of every model: trace(name) -> the pass's stats for that model."""
    lines = ["| Model | All-reduces | Fused (count x kind) | Left (count x reason) |",
             "|---|---|---|---|"]
    for name in MODELS:
        lines.append(row(name, trace(name)))
    return "\n".join(lines)


def documented_table(repo_root: str) -> str:
    import os

    with open(os.path.join(repo_root, DOC)) as f:
        text = f.read()
    return text[text.index(BEGIN) + len(BEGIN):text.index(END)].strip()


def _main():
    import argparse
    import os

    import harness

    ap = argparse.ArgumentParser(description="The compile pass on Hugging Face models: the table")
    ap.add_argument("--write", action="store_true", help=f"rewrite the table in {DOC}")
    args = ap.parse_args()

    def trace(name):
        p = harness.make_pass()
        harness.graph(forward_fn(build(name)), [token_ids()], p)
        return p.stats

    text = table(trace)
    print(text)
    if args.write:
        root = os.path.abspath(os.path.join(harness.PYTHON_DIR, ".."))
        path = os.path.join(root, DOC)
        with open(path) as f:
            doc = f.read()
        doc = doc[:doc.index(BEGIN) + len(BEGIN)] + "\n" + text + "\n" + doc[doc.index(END):]
        with open(path, "w") as f:
            f.write(doc)


if __name__ == "__main__":
    _main()

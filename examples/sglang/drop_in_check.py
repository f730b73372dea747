"""The SGLang drop-in on a GPU, without an SGLang server: what SGLang's RMSNorm gets back from
``arfusion.integrations.sglang.allreduce_residual_rmsnorm`` where it called FlashInfer's fused
all-reduce + residual add + RMSNorm.

    torchrun --nproc-per-node 2 examples/sglang/drop_in_check.py      # ranks may share one GPU

Each rank draws its own input (seeded by rank and call), calls the drop-in with SGLang's keyword
arguments and checks:
  * (norm_out, residual_out) are new tensors and the inputs are unchanged (SGLang's convention:
    its fallback and its `preserves_residual` check rely on it);
  * both equal, bit for bit, arfusion's unfused algorithm on the same inputs (the fused kernel
    keeps the unfused path's rounding);
  * residual_out equals round(round(fp32 sum of every rank's input in rank order) + residual),
    computed here from the gathered inputs;
  * every rank holds the same bits (hashes compared over the group);
  * a batch over the communicator's max_tokens is declined with (None, None), on every rank, and
    counted in stats().
Exit status 0 when all hold. Rank 0 prints a summary.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys

import torch
import torch.distributed as dist

import arfusion.torch as aft
from arfusion.integrations import sglang as drop_in


def bits(t: torch.Tensor) -> bytes:
    return t.detach().contiguous().view(torch.uint8).cpu().numpy().tobytes()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--hidden", type=int, default=4096)
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--calls", type=int, default=6)
    args = ap.parse_args()
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)) % torch.cuda.device_count())
    dist.init_process_group("gloo")
    comm = aft.Communicator.from_group(max_tokens=args.max_tokens, max_hidden=args.hidden,
                                       dtype=torch.bfloat16, name="sglang:check")
    drop_in.enable(comm, use_attn_tp_group=True, norm_rounding="once")
    dev = torch.device("cuda")
    failures = []
    H = args.hidden
    for call in range(args.calls):
        tokens = [1, 7, 32, 128, args.max_tokens, 3][call % 6]
        g = torch.Generator().manual_seed(1000 * call + rank)
        x = torch.randn(tokens, H, generator=g).to(torch.bfloat16).to(dev)
        gr = torch.Generator().manual_seed(1000 * call + 777)  # the residual is replicated
        residual = torch.randn(tokens, H, generator=gr).to(torch.bfloat16).to(dev)
        weight = (1 + 0.1 * torch.randn(H, generator=gr)).to(torch.bfloat16).to(dev)
        x0, r0 = x.clone(), residual.clone()
        norm, res = drop_in.allreduce_residual_rmsnorm(
            input_tensor=x, residual=residual, weight=weight, eps=1e-6,
            max_token_num=max(tokens, 2048), use_attn_tp_group=True)
        torch.cuda.synchronize()
        if norm is None:
            failures.append(f"call {call}: declined ({drop_in.decline_reason(x, residual, weight)})")
            continue
        if norm.data_ptr() in (x.data_ptr(), residual.data_ptr()) or \
                res.data_ptr() in (x.data_ptr(), residual.data_ptr()):
            failures.append(f"call {call}: an output aliases an input")
        if not (torch.equal(x, x0) and torch.equal(residual, r0)):
            failures.append(f"call {call}: an input changed")
        ref_norm, ref_res = comm.fused_add_rms_norm_out(x, residual, weight, 1e-6,
                                                        norm_rounding="once", algorithm="unfused")
        torch.cuda.synchronize()
        if bits(norm) != bits(ref_norm) or bits(res) != bits(ref_res):
            failures.append(f"call {call}: differs from arfusion's unfused algorithm")
        gathered = [torch.empty_like(x0).cpu() for _ in range(world)]
        dist.all_gather(gathered, x0.cpu())
        total = torch.zeros(tokens, H, dtype=torch.float32)
        for part in gathered:  # fp32 in rank order
            total += part.float()
        # the all-reduce rounded to bf16, then the residual added and rounded (arfusion's contract,
        # docs/architecture.md "Numerics")
        want_res = (total.to(torch.bfloat16).float() + r0.cpu().float()).to(torch.bfloat16)
        if bits(res) != bits(want_res):
            failures.append(f"call {call}: residual_out is not round(round(rank-order fp32 sum) "
                            "+ residual)")
        digest = hashlib.sha256(bits(norm) + bits(res)).hexdigest()
        digests = [None] * world
        dist.all_gather_object(digests, digest)
        if len(set(digests)) != 1:
            failures.append(f"call {call}: ranks differ ({digests})")
    big = torch.ones(args.max_tokens + 1, H, dtype=torch.bfloat16, device=dev)
    declined = drop_in.allreduce_residual_rmsnorm(big, big.clone(), torch.ones(H, dtype=torch.bfloat16,
                                                                               device=dev))
    if declined != (None, None):
        failures.append("a batch over max_tokens was not declined")
    all_failures = [None] * world
    dist.all_gather_object(all_failures, failures)
    if rank == 0:
        print(f"drop_in_check: {world} ranks, {args.calls} calls, hidden {H}, "
              f"stats {drop_in.stats()}")
        for r, f in enumerate(all_failures):
            for line in f:
                print(f"  rank {r}: {line}")
        print("drop_in_check: " + ("FAILED" if any(all_failures) else "passed"))
    comm.destroy()
    dist.destroy_process_group()
    return 1 if any(all_failures) else 0


if __name__ == "__main__":
    sys.exit(main())

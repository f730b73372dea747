#!/usr/bin/env python3
"""How torch evaluates the dynamic FP8 scale `amax / 448.0` (and q = y / scale) on a GPU.

arfusion's contract divides (IEEE, as the CPU does); torch on CUDA multiplies by the fp32
reciprocal of a Python-scalar divisor in eager mode, and Inductor may do the same or differ again.
The compile pass replaces torch's formula with the fused kernel, so this prints, for random bf16
rows (a different magnitude per row), the fraction of scales and of e4m3 bytes on which each
evaluation differs from the IEEE one and from amax * fp32(1/448). Needs torch with CUDA.

    python3 dev/python/probe_fp8_scale_rounding.py [--tokens 4096] [--hidden 8192]
"""

import argparse
import json

import torch


def quant(y):
    yf = y.float()
    sc = torch.clamp(yf.abs().amax(dim=-1, keepdim=True) / 448.0, min=1.0 / (448.0 * 512.0))
    return (yf / sc).clamp(-448.0, 448.0).to(torch.float8_e4m3fn), sc


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=4096)
    ap.add_argument("--hidden", type=int, default=8192)
    args = ap.parse_args()
    g = torch.Generator().manual_seed(11)
    mag = torch.exp2(torch.randint(-12, 8, (args.tokens, 1), generator=g).float())
    y = (torch.randn(args.tokens, args.hidden, generator=g) * mag).to(torch.bfloat16)
    q_ieee, s_ieee = quant(y)  # CPU: IEEE division
    yf = y.float()
    s_recip = torch.clamp(yf.abs().amax(dim=-1, keepdim=True) * torch.tensor(1.0 / 448.0),
                          min=1.0 / (448.0 * 512.0))
    yd = y.cuda()
    q_eager, s_eager = quant(yd)
    q_comp, s_comp = torch.compile(quant, fullgraph=True)(yd)
    torch.cuda.synchronize()

    def frac(a, b, view):
        return float((a.cpu().view(view) != b.cpu().view(view)).float().mean())

    out = {"torch": torch.__version__, "device": torch.cuda.get_device_name(0),
           "tokens": args.tokens, "hidden": args.hidden,
           "cpu_recip_vs_ieee_scales": frac(s_recip, s_ieee, torch.int32)}
    for name, q, s in (("cuda_eager", q_eager, s_eager), ("inductor", q_comp, s_comp)):
        out[f"{name}_vs_ieee_scales"] = frac(s, s_ieee, torch.int32)
        out[f"{name}_vs_recip_scales"] = frac(s, s_recip, torch.int32)
        out[f"{name}_vs_ieee_q_bytes"] = frac(q, q_ieee, torch.uint8)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Dump the post-grad FX graphs torch.compile produces for all-reduce + residual add + RMSNorm.

For the GPU machine (torch >= 2.10 with CUDA, one GPU, the package installed). One process, a fake process group of world
size 2 (torch.testing._internal.distributed.fake_pg: collectives complete without communicating),
so Dynamo turns ``torch.distributed.all_reduce`` into its functional form exactly as it does in a
real tensor-parallel job. Each variant below is compiled with Inductor and two custom passes that
print the graph they are handed:

  * ``post_grad_custom_pre_pass``  : the graph before Inductor's own post-grad pattern passes
  * ``post_grad_custom_post_pass`` : the graph arfusion's pass will see (after them)

Output: stdout, and when $OUT (or --out DIR) is set one file per variant and stage under it plus
``summary.json`` (torch version, which variants compiled, the op targets each graph holds).

    python3 dev/python/dump_post_grad_graphs.py                 # every variant
    OUT=/tmp/graphs python3 dev/python/dump_post_grad_graphs.py --only gemma,fp8
    python3 dev/python/dump_post_grad_graphs.py --list

Standalone: needs torch only, not arfusion.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import traceback


def _parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default=os.environ.get("OUT"), help="directory for the dumps (default $OUT)")
    p.add_argument("--tokens", type=int, default=16)
    p.add_argument("--hidden", type=int, default=1024)
    p.add_argument("--world", type=int, default=2)
    p.add_argument("--only", default="", help="comma-separated substrings of variant names")
    p.add_argument("--list", action="store_true", help="list the variants and exit")
    p.add_argument("--dtypes", default="bf16", help="comma-separated: bf16,fp16")
    return p.parse_args()


def main() -> int:
    args = _parse_args()
    try:
        import torch
    except ImportError:
        print("SKIPPED: torch is not installed", flush=True)
        return 77
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch._inductor.custom_graph_pass import CustomGraphPass

    if not torch.cuda.is_available():
        print("SKIPPED: no CUDA device visible", flush=True)
        return 77

    out_dir = args.out
    if out_dir:
        os.makedirs(out_dir, exist_ok=True)

    # Every compile must run the passes: no FX graph / AOT caches (a cache hit skips the passes).
    import torch._inductor.config as inductor_config

    inductor_config.fx_graph_cache = False
    if hasattr(inductor_config, "fx_graph_remote_cache"):
        inductor_config.fx_graph_remote_cache = False
    if hasattr(inductor_config, "autotune_local_cache"):
        inductor_config.autotune_local_cache = False
    try:
        import torch._functorch.config as functorch_config

        if hasattr(functorch_config, "enable_autograd_cache"):
            functorch_config.enable_autograd_cache = False
    except ImportError:
        pass

    from torch.testing._internal.distributed.fake_pg import FakeStore

    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=args.world)
    device = torch.device("cuda", 0)
    torch.cuda.set_device(device)

    current = {"name": None}
    records: dict[str, dict] = {}

    def describe_node(n):
        val = n.meta.get("val")
        vdesc = ""

        def one(v):
            if isinstance(v, torch.Tensor):
                return f"{str(v.dtype).replace('torch.', '')}{list(v.shape)} stride={list(v.stride())}"
            return type(v).__name__ + ":" + str(v)

        if isinstance(val, (list, tuple)):
            vdesc = "(" + ", ".join(one(v) for v in val) + ")"
        elif val is not None:
            vdesc = one(val)
        target = n.target
        tname = getattr(target, "__name__", None) if not isinstance(target, str) else target
        if hasattr(target, "_schema"):
            tname = str(target)  # e.g. aten.add.Tensor / _c10d_functional.all_reduce.default
        return f"{n.op:14s} {n.name:24s} {str(tname):48s} args={n.args!r} kwargs={n.kwargs!r} -> {vdesc}"

    def dump(stage, graph):
        name = current["name"] or "unnamed"
        text_graph = str(graph)
        detail = "\n".join(describe_node(n) for n in graph.nodes)
        block = (f"===== {name} [{stage}] =====\n{text_graph}\n----- nodes (op, name, target, args,"
                 f" kwargs -> meta['val']) -----\n{detail}\n")
        print(block, flush=True)
        rec = records.setdefault(name, {"stages": {}})
        idx = len([k for k in rec["stages"] if k.startswith(stage)])
        key = stage if idx == 0 else f"{stage}#{idx}"
        rec["stages"][key] = sorted({
            str(n.target) for n in graph.nodes if n.op == "call_function"
        })
        if out_dir:
            with open(os.path.join(out_dir, f"{name}.{key}.txt"), "w") as f:
                f.write(block)

    class DumpPass(CustomGraphPass):
        def __init__(self, stage):
            self.stage = stage

        def __call__(self, graph):
            dump(self.stage, graph)

        def uuid(self):
            return None  # never cache: the point is to see the graph

    pre_pass, post_pass = DumpPass("post_grad_pre"), DumpPass("post_grad_post")

    # ---- model pieces, written the way TP models write them --------------------------------------
    class LlamaRMSNorm(torch.nn.Module):  # Hugging Face style: fp32 variance, weight * x.to(dtype)
        def __init__(self, hidden, eps=1e-6, dtype=torch.bfloat16):
            super().__init__()
            self.weight = torch.nn.Parameter(torch.randn(hidden, dtype=dtype, device=device))
            self.eps = eps

        def forward(self, x):
            dt = x.dtype
            h = x.to(torch.float32)
            var = h.pow(2).mean(-1, keepdim=True)
            h = h * torch.rsqrt(var + self.eps)
            return self.weight * h.to(dt)

    class GemmaRMSNorm(torch.nn.Module):  # Gemma: fp32 throughout, (1 + w), one rounding at the end
        def __init__(self, hidden, eps=1e-6, dtype=torch.bfloat16):
            super().__init__()
            self.weight = torch.nn.Parameter(torch.randn(hidden, dtype=dtype, device=device) * 0.1)
            self.eps = eps

        def forward(self, x):
            h = x.float()
            h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
            return (h * (1.0 + self.weight.float())).type_as(x)

    class Fp32WeightRMSNorm(torch.nn.Module):  # fp32 weight, result rounded once
        def __init__(self, hidden, eps=1e-6, dtype=torch.bfloat16):
            super().__init__()
            self.weight = torch.nn.Parameter(torch.randn(hidden, dtype=torch.float32, device=device))
            self.eps = eps

        def forward(self, x):
            h = x.float()
            h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
            return (h * self.weight).to(x.dtype)

    def fp8_per_token(y):
        yf = y.float()
        amax = yf.abs().amax(dim=-1, keepdim=True)
        scale = torch.clamp(amax / 448.0, min=1.0 / (448.0 * 512.0))
        q = (yf / scale).clamp(-448.0, 448.0).to(torch.float8_e4m3fn)
        return q, scale

    def fp8_per_group(y, group=128):
        t, h = y.shape
        yf = y.float().reshape(t, h // group, group)
        amax = yf.abs().amax(dim=-1, keepdim=True)
        scale = torch.clamp(amax / 448.0, min=1.0 / (448.0 * 512.0))
        q = (yf / scale).clamp(-448.0, 448.0).to(torch.float8_e4m3fn)
        return q.reshape(t, h), scale.reshape(t, h // group)

    def fp8_static(y, scale):
        return (y.float() / scale).clamp(-448.0, 448.0).to(torch.float8_e4m3fn)

    eps = 1e-6

    def make_variants(dtype, tag):
        H = args.hidden
        w = torch.randn(H, dtype=dtype, device=device)
        lin = torch.nn.Linear(H, H, bias=False, device=device, dtype=dtype)
        llama = LlamaRMSNorm(H, eps, dtype)
        gemma = GemmaRMSNorm(H, eps, dtype)
        f32w = Fp32WeightRMSNorm(H, eps, dtype)
        nnrms = torch.nn.RMSNorm(H, eps=eps, device=device, dtype=dtype)
        static_scale = torch.tensor([0.05], device=device, dtype=torch.float32)

        def ar(x):
            dist.all_reduce(x)
            return x

        v = {}
        # F.rms_norm: the residual stream in the activation dtype
        v["f_rms_norm"] = (lambda x, r: (lambda s: (F.rms_norm(s, (H,), w, eps), s))(ar(x) + r), 2)
        v["f_rms_norm_no_weight"] = (lambda x, r: (lambda s: (F.rms_norm(s, (H,), None, eps), s))(ar(x) + r), 2)
        v["nn_rmsnorm"] = (lambda x, r: (lambda s: (nnrms(s), s))(ar(x) + r), 2)
        v["llama_rmsnorm"] = (lambda x, r: (lambda s: (llama(s), s))(ar(x) + r), 2)
        v["gemma_rmsnorm"] = (lambda x, r: (lambda s: (gemma(s), s))(ar(x) + r), 2)
        v["fp32_weight_rmsnorm"] = (lambda x, r: (lambda s: (f32w(s), s))(ar(x) + r), 2)
        # first layer: no residual
        v["first_layer_f_rms_norm"] = (lambda x: (F.rms_norm(ar(x), (H,), w, eps), x), 1)
        v["first_layer_llama"] = (lambda x: (llama(ar(x)),), 1)
        # residual + all-reduce written the other way round, and an in-place residual update
        v["residual_first_add"] = (lambda x, r: (lambda s: (llama(s), s))(r + ar(x)), 2)

        def inplace_residual(x, r):
            r.add_(ar(x))
            return llama(r)

        v["inplace_residual_llama"] = (inplace_residual, 2)
        # all-reduce of an intermediate (row-parallel linear), as a TP model does
        v["linear_ar_llama"] = (lambda x, r: (lambda s: (llama(s), s))(ar(lin(x)) + r), 2)
        v["linear_ar_f_rms_norm"] = (lambda x, r: (lambda s: (F.rms_norm(s, (H,), w, eps), s))(ar(lin(x)) + r), 2)
        # functional collectives called directly
        import torch.distributed._functional_collectives as funcol

        v["funcol_all_reduce_llama"] = (
            lambda x, r: (lambda s: (llama(s), s))(funcol.all_reduce(x, "sum", dist.group.WORLD) + r), 2)
        # quantization tails in plain torch
        v["llama_fp8_per_token"] = (lambda x, r: (lambda s: (*fp8_per_token(llama(s)), s))(ar(x) + r), 2)
        v["llama_fp8_per_group"] = (lambda x, r: (lambda s: (*fp8_per_group(llama(s)), s))(ar(x) + r), 2)
        v["llama_fp8_static"] = (lambda x, r: (lambda s: (fp8_static(llama(s), static_scale), s))(ar(x) + r), 2)
        v["f_rms_norm_fp8_per_token"] = (
            lambda x, r: (lambda s: (*fp8_per_token(F.rms_norm(s, (H,), w, eps)), s))(ar(x) + r), 2)
        v["f_rms_norm_fp8_per_group"] = (
            lambda x, r: (lambda s: (*fp8_per_group(F.rms_norm(s, (H,), w, eps)), s))(ar(x) + r), 2)
        v["gemma_fp8_per_token"] = (lambda x, r: (lambda s: (*fp8_per_token(gemma(s)), s))(ar(x) + r), 2)

        # forms real models and engines write (what the pass fuses or explains; see its CPU tests)
        T = args.tokens
        v["moe_reshape_llama"] = (
            lambda x, r: (lambda s: (llama(s), s))(r.view(2, T // 2, H) + ar(x).reshape(2, T // 2, H)), 2)

        def llama_pow(s):
            h = s.float()
            h = h * torch.pow(h.pow(2).mean(-1, keepdim=True) + eps, -0.5)
            return llama.weight * h.to(s.dtype)

        v["llama_pow_minus_half"] = (lambda x, r: (lambda s: (llama_pow(s), s))(ar(x) + r), 2)

        def vllm_native(x, r):  # vLLM RMSNorm.forward_static: the residual promoted by the add
            h = ar(x).to(torch.float32)
            h = h + r
            res = h.to(x.dtype)
            h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
            return h.to(x.dtype) * w, res

        v["vllm_native_fp32_residual"] = (vllm_native, 2)

        def vllm_quant_native(y):  # vLLM QuantFP8.forward_native, per token
            x_max, _ = y.abs().max(dim=-1)
            sc = (x_max.unsqueeze(-1).to(torch.float32) / 448.0).clamp(min=1.0 / (448.0 * 512.0))
            return (y.to(torch.float32) * sc.reciprocal()).clamp(-448.0, 448.0).to(torch.float8_e4m3fn), sc

        v["llama_vllm_quant_native"] = (lambda x, r: (lambda s: (*vllm_quant_native(llama(s)), s))(ar(x) + r), 2)
        v["gemma_sandwich"] = (lambda x, r: (lambda h: (lambda s: (gemma(s), s))(r + h))(gemma(ar(x))), 2)

        # two layers back to back (the residual flows from one pattern into the next)
        def two_layers(x, r):
            s1 = ar(lin(x)) + r
            h1 = llama(s1)
            s2 = ar(lin(h1)) + s1
            return llama(s2), s2

        v["two_layers_llama"] = (two_layers, 2)
        return {f"{tag}.{k}": val for k, val in v.items()}

    dtypes = {"bf16": torch.bfloat16, "fp16": torch.float16}
    variants = {}
    for tag in [d for d in args.dtypes.split(",") if d]:
        variants.update(make_variants(dtypes[tag], tag))
    # a dynamic token dimension (as engines compile), bf16 only
    dyn = {}
    for k in ("bf16.f_rms_norm", "bf16.llama_rmsnorm", "bf16.gemma_rmsnorm", "bf16.llama_fp8_per_token"):
        if k in variants:
            dyn[k.replace("bf16.", "bf16_dynamic.")] = variants[k] + (True,)
    variants.update(dyn)

    if args.list:
        for k in variants:
            print(k)
        return 0
    only = [s for s in args.only.split(",") if s]
    names = [k for k in variants if not only or any(s in k for s in only)]

    summary = {"torch": torch.__version__, "cuda": torch.version.cuda,
               "device": torch.cuda.get_device_name(0), "tokens": args.tokens, "hidden": args.hidden,
               "world": args.world, "variants": {}}
    print(f"torch {torch.__version__} cuda {torch.version.cuda} on {summary['device']}", flush=True)
    failures = 0
    for name in names:
        entry = variants[name]
        fn, nargs = entry[0], entry[1]
        dynamic = len(entry) > 2 and entry[2]
        dtype = torch.float16 if name.startswith("fp16") else torch.bfloat16
        current["name"] = name
        torch._dynamo.reset()
        inputs = [torch.randn(args.tokens, args.hidden, dtype=dtype, device=device) for _ in range(nargs)]
        if dynamic:
            for t in inputs:
                torch._dynamo.mark_dynamic(t, 0)
        try:
            compiled = torch.compile(fn, fullgraph=True, options={
                "post_grad_custom_pre_pass": pre_pass, "post_grad_custom_post_pass": post_pass})
            with torch.no_grad():
                compiled(*inputs)
            torch.cuda.synchronize()
            summary["variants"][name] = {"ok": True, **records.get(name, {})}
        except Exception as e:  # keep going: one failing variant must not hide the others
            failures += 1
            tb = traceback.format_exc()
            print(f"===== {name} FAILED =====\n{tb}", flush=True)
            summary["variants"][name] = {"ok": False, "error": f"{type(e).__name__}: {e}"[:2000],
                                         **records.get(name, {})}
            if out_dir:
                with open(os.path.join(out_dir, f"{name}.error.txt"), "w") as f:
                    f.write(tb)
    if out_dir:
        with open(os.path.join(out_dir, "summary.json"), "w") as f:
            json.dump(summary, f, indent=1)
    print(f"done: {len(names) - failures}/{len(names)} variants compiled", flush=True)
    dist.destroy_process_group()
    return 0 if failures == 0 else 1


if __name__ == "__main__":
    sys.exit(main())

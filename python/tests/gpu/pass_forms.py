#!/usr/bin/env python3
"""The compile pass on every source form, in one process (GPU machine, torch >= 2.10, the package
installed: run_gpu_tests.sh).

A fake process group of world size 2 (torch.testing._internal.distributed.fake_pg: collectives
return at once without communicating) lets Dynamo produce exactly the graphs of a real TP job,
and a world-1 arfusion communicator (mapped to the fake group with group_map) runs the fused ops:
the all-reduce of one rank is the identity on both sides, so the compiled model must equal the
eager one (residual bitwise, norm within 1 ulp, FP8 tails exact on the returned norm: against the
contract with the pass's scale rule, times_reciprocal, on the CPU, and against eager torch's own
tail on the GPU applied to the same norm, q and scales bitwise). For every
variant the pass must replace the expected number of patterns of the expected kind; a miss prints
the pass's own reason (the point of this test: torch's graph forms change between releases).

    python3 python/tests/gpu/pass_forms.py [--json FILE] [--only substr,...]

Exit 0 all passed, 1 a failure, 77 skipped (no torch >= 2.10 / no GPU). Prints "N passed, N failed".
"""

import argparse
import json
import os
import sys
import traceback
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", default=None)
    ap.add_argument("--only", default="")
    args = ap.parse_args()
    try:
        import torch
    except ImportError:
        print("SKIPPED: torch is not installed")
        return 77
    if tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2]) < (2, 10):
        print(f"SKIPPED: torch {torch.__version__} < 2.10")
        return 77
    if not torch.cuda.is_available():
        print("SKIPPED: no CUDA device visible")
        return 77
    import torch._inductor.config as inductor_config
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.testing._internal.distributed.fake_pg import FakeStore

    import arfusion
    import arfusion.torch as aft
    import reference as ref

    inductor_config.fx_graph_cache = False
    try:
        import torch._functorch.config as functorch_config

        functorch_config.enable_autograd_cache = False
    except (ImportError, AttributeError):
        pass

    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=2)
    sys.path.insert(0, os.path.join(HERE, "..", "torch_cpu"))
    import engine_ops  # the engines' all-reduce ops under their own names (CUDA stand-ins)

    engine_ops.register(("CPU", "CUDA"))
    dev = torch.device("cuda", 0)
    torch.cuda.set_device(dev)
    dtype = torch.bfloat16
    T, H, eps = 16, 1024, 1e-6

    cfg = arfusion.comm_config(transport=arfusion.Transport.Local, rank=0, world_size=1, device=0,
                               max_tokens=64, max_hidden=H, dtype=int(arfusion.DataType.BFloat16),
                               id=arfusion.unique_id())
    comm = aft.Communicator(arfusion.Comm.init_rank(cfg, "forms"), name="forms", device=dev,
                            dtype=dtype, config=cfg)
    group_map = {dist.group.WORLD.group_name: comm.name, "tp:0": comm.name}

    g = torch.Generator().manual_seed(7)
    scale = (0.5 + torch.rand(H, generator=g)).to(dtype).to(dev)
    w = (1.0 + 0.2 * torch.randn(H, generator=g)).to(dtype).to(dev)
    w32 = (1.0 + 0.2 * torch.randn(H, generator=g)).to(dev)
    wg = (0.1 * torch.randn(H, generator=g)).to(dtype).to(dev)
    static_scale = torch.tensor([0.05], dtype=torch.float32, device=dev)
    nn_norm = torch.nn.RMSNorm(H, eps=eps, device=dev, dtype=dtype)
    with torch.no_grad():
        nn_norm.weight.copy_(w)

    def ar(x):
        p = x * scale  # an intermediate, as a row-parallel layer's output is
        dist.all_reduce(p)
        return p

    def llama(s, weight=w):
        h = s.to(torch.float32)
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
        return weight * h.to(dtype)

    def llama_pow(s):  # pow(mean + eps, -0.5) for rsqrt
        h = s.to(torch.float32)
        h = h * torch.pow(h.pow(2).mean(-1, keepdim=True) + eps, -0.5)
        return w * h.to(dtype)

    def olmo2(s):  # OLMo 2: (w * x) in fp32, one rounding
        h = s.to(torch.float32)
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
        return (w * h).to(dtype)

    def gemma(s):
        h = s.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
        return (h * (1.0 + wg.float())).type_as(s)

    def fp32w(s):
        h = s.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
        return (h * w32).to(dtype)

    def per_token(y):
        yf = y.float()
        sc = torch.clamp(yf.abs().amax(dim=-1, keepdim=True) / 448.0, min=1.0 / (448.0 * 512.0))
        return (yf / sc).clamp(-448.0, 448.0).to(torch.float8_e4m3fn), sc

    def per_group(y):
        t, h = y.shape
        yf = y.float().reshape(t, h // 128, 128)
        sc = torch.clamp(yf.abs().amax(dim=-1, keepdim=True) / 448.0, min=1.0 / (448.0 * 512.0))
        q = (yf / sc).clamp(-448.0, 448.0).to(torch.float8_e4m3fn)
        return q.reshape(t, h), sc.reshape(t, h // 128)

    def per_token_bf16_amax(y):  # the amax of the bf16 norm, then converted (vLLM)
        amax, _ = y.abs().max(dim=-1)
        sc = (amax.unsqueeze(-1).to(torch.float32) / 448.0).clamp(min=1.0 / (448.0 * 512.0))
        return (y.float() / sc).clamp(-448.0, 448.0).to(torch.float8_e4m3fn), sc

    def per_group_minus_one(y):  # groups by a view with -1
        yf = y.float().view(-1, 128)
        sc = torch.clamp(yf.abs().amax(dim=-1, keepdim=True) / 448.0, min=1.0 / (448.0 * 512.0))
        q = (yf / sc).clamp(-448.0, 448.0).to(torch.float8_e4m3fn)
        return q.view(y.shape), sc.view(y.shape[0], -1)

    def vllm_group_native(y):  # vLLM's QuantFP8._quantize_group_native
        xg = y.view(-1, y.shape[-1] // 128, 128)
        sc = (xg.abs().max(dim=-1, keepdim=True)[0].float() / 448.0).clamp(min=1.0 / (448.0 * 512.0))
        q = (xg / sc).clamp(-448.0, 448.0).to(torch.float8_e4m3fn)
        return q.view(y.shape), sc.squeeze(-1).reshape(y.shape[0], -1)

    def static(y):
        return (y.float() / static_scale).clamp(-448.0, 448.0).to(torch.float8_e4m3fn)

    def two_layers(x, r):
        s1 = ar(x) + r
        h1 = llama(s1)
        s2 = ar(h1) + s1
        return llama(s2), s2

    def inplace_residual(x, r):
        r = r.clone()
        r.add_(ar(x))
        return llama(r), r

    def vllm_native(x, r):  # SGLang's native RMSNorm: f32(x) + f32(residual)
        h = ar(x).to(torch.float32) + r.to(torch.float32)
        res = h.to(dtype)
        h = h * torch.rsqrt(h.pow(2).mean(dim=-1, keepdim=True) + eps)
        return h.to(dtype) * w, res

    def vllm_native_implicit(x, r):  # vLLM's RMSNorm.forward_static: the add promotes residual
        h = ar(x).to(torch.float32)
        h = h + r
        res = h.to(dtype)
        h = h * torch.rsqrt(h.pow(2).mean(dim=-1, keepdim=True) + eps)
        return h.to(dtype) * w, res

    def moe_reshape(x, r):  # an MoE block's [T, H] sum reshaped to the residual's [2, T/2, H]
        s = r.view(2, T // 2, H) + ar(x).reshape(2, T // 2, H)
        return llama(s), s

    def gemma_sandwich(x, r):  # Gemma 2/3: norm(all-reduce) + residual, then the next norm
        h = gemma(ar(x))
        s = r + h
        return h, s, gemma(s)

    def gemma_sandwich_block(x, r):  # the same as a decoder layer runs it: h feeds the add alone
        s = r + gemma(ar(x))
        return s, gemma(s)

    def engine_site(reduce):
        def fn(x, r):
            p = x * scale
            s = reduce(p) + r
            return llama(s), s
        return fn

    def sglang_inplace(p):
        torch.ops.sglang.inplace_all_reduce(p, "tp:0")
        return p

    # name: (fn, number of args, expected replacements, substrings every kind must contain, quant)
    variants = {
        "F.rms_norm": (lambda x, r: (lambda s: (F.rms_norm(s, (H,), w, eps), s))(ar(x) + r), 2, 1, ["/once"], None),
        "F.rms_norm without weight": (lambda x, r: (lambda s: (F.rms_norm(s, (H,), None, eps), s))(ar(x) + r), 2, 1, ["/once"], None),
        "nn.RMSNorm": (lambda x, r: (lambda s: (nn_norm(s), s))(ar(x) + r), 2, 1, ["/once"], None),
        "LlamaRMSNorm": (lambda x, r: (lambda s: (llama(s), s))(ar(x) + r), 2, 1, ["/before_weight"], None),
        "Gemma (1 + w)": (lambda x, r: (lambda s: (gemma(s), s))(ar(x) + r), 2, 1, ["(1 + w)"], None),
        "fp32 weight": (lambda x, r: (lambda s: (fp32w(s), s))(ar(x) + r), 2, 1, ["fp32 weight"], None),
        "residual + all-reduce order": (lambda x, r: (lambda s: (llama(s), s))(r + ar(x)), 2, 1, ["residual/"], None),
        "first layer F.rms_norm": (lambda x: (lambda s: (F.rms_norm(s, (H,), w, eps), s))(ar(x)), 1, 1, ["first_layer/"], None),
        "first layer LlamaRMSNorm": (lambda x: (lambda s: (llama(s), s))(ar(x)), 1, 1, ["first_layer/"], None),
        "in-place residual add": (inplace_residual, 2, 1, ["residual/"], None),
        "two layers": (two_layers, 2, 2, ["residual/"], None),
        "Llama + FP8 per-token": (lambda x, r: (lambda s: (lambda n: (n, *per_token(n), s))(llama(s)))(ar(x) + r), 2, 1, ["+fp8_per_token"], "fp8_per_token"),
        "F.rms_norm + FP8 per-token": (lambda x, r: (lambda s: (lambda n: (n, *per_token(n), s))(F.rms_norm(s, (H,), w, eps)))(ar(x) + r), 2, 1, ["+fp8_per_token"], "fp8_per_token"),
        "Llama + FP8 per-group": (lambda x, r: (lambda s: (lambda n: (n, *per_group(n), s))(llama(s)))(ar(x) + r), 2, 1, ["+fp8_per_group"], "fp8_per_group"),
        "Llama + FP8 static": (lambda x, r: (lambda s: (lambda n: (n, static(n), s))(llama(s)))(ar(x) + r), 2, 1, ["+fp8_per_tensor"], "fp8_per_tensor"),
        "LlamaRMSNorm with pow(-0.5)": (lambda x, r: (lambda s: (llama_pow(s), s))(ar(x) + r), 2, 1, ["/before_weight"], None),
        "OLMo 2 (w * x) in fp32": (lambda x, r: (lambda s: (olmo2(s), s))(ar(x) + r), 2, 1, ["x * w in fp32"], None),
        "MoE reshape after the all-reduce": (moe_reshape, 2, 1, ["+view"], None),
        "Gemma sandwich (first layer + note)": (gemma_sandwich, 2, 1, ["first_layer[sandwich]"], None),
        # post_norm="sandwich" with the library's opt-in (ARF_EXPERIMENTAL_SANDWICH=1): one call
        "Gemma sandwich call (post_norm='sandwich')": (gemma_sandwich_block, 2, 1, ["sandwich/"], "sandwich"),
        "vllm.all_reduce stand-in": (engine_site(lambda p: torch.ops.vllm.all_reduce(p, "tp:0")), 2, 1, ["residual/"], None),
        "sglang.inplace_all_reduce stand-in": (engine_site(sglang_inplace), 2, 1, ["residual/"], None),
        "Llama + FP8 per-token (bf16 amax)": (lambda x, r: (lambda s: (lambda n: (n, *per_token_bf16_amax(n), s))(llama(s)))(ar(x) + r), 2, 1, ["+fp8_per_token"], "fp8_per_token"),
        "Llama + FP8 per-group (view -1)": (lambda x, r: (lambda s: (lambda n: (n, *per_group_minus_one(n), s))(llama(s)))(ar(x) + r), 2, 1, ["+fp8_per_group"], "fp8_per_group"),
        "Llama + vLLM native group quant": (lambda x, r: (lambda s: (lambda n: (n, *vllm_group_native(n), s))(llama(s)))(ar(x) + r), 2, 1, ["+fp8_per_group"], "fp8_per_group"),
        # only the FP8 tail reads the rounded norm: torch 2.10's Inductor folds the round trip, and
        # the pass fuses the all-reduce and the residual add only; later torch keeps it (all fused)
        "Gemma + FP8 per-token, q only": (lambda x, r: (lambda s: (*per_token(gemma(s)), s))(ar(x) + r), 2, 1, [], "q_only"),
        "vLLM native (fp32 residual add), fp32_residual_add=True": (vllm_native_implicit, 2, 1, ["fp32_residual/"], "fp32res"),
        "SGLang native (explicit fp32 add), fp32_residual_add=True": (vllm_native, 2, 1, ["fp32_residual/"], "fp32res"),
        "vLLM native without the option: left alone": (vllm_native_implicit, 2, 0, [], None),
        "dynamic tokens (max 64)": (lambda x, r: (lambda s: (llama(s), s))(ar(x) + r), 2, 1, ["/before_weight"], "dynamic"),
    }
    only = [s for s in args.only.split(",") if s]
    results = []

    def record(name, ok, detail):
        results.append({"name": name, "ok": ok, "detail": detail})
        print(f"{'PASS' if ok else 'FAIL'}  [pass forms] {name}" + (f": {detail}" if detail else ""), flush=True)

    for name, (fn, nargs, expected, kinds, mode) in variants.items():
        if only and not any(s in name for s in only):
            continue
        torch._dynamo.reset()
        if mode == "sandwich":
            os.environ["ARF_EXPERIMENTAL_SANDWICH"] = "1"
        try:
            gen = torch.Generator().manual_seed(zlib.crc32(name.encode()))
            inputs = [torch.randn(T, H, generator=gen).to(dtype).to(dev) for _ in range(nargs)]
            p = aft.AllReduceFusionPass(comm, group_map=group_map,
                                        fp32_residual_add=mode == "fp32res",
                                        post_norm="sandwich" if mode == "sandwich" else "first_layer")
            dynamic = mode == "dynamic"
            if dynamic:
                for t in inputs:
                    torch._dynamo.mark_dynamic(t, 0, min=2, max=64)
            model = torch.compile(fn, fullgraph=True, dynamic=None if dynamic else False,
                                  options={"post_grad_custom_post_pass": p})
            with torch.no_grad():
                got = model(*inputs)
                want = fn(*inputs)
            torch.cuda.synchronize()
            comm.check()
            summary = p.stats.summary().replace("\n", " | ")
            problems = []
            if p.stats.replaced != expected:
                problems.append(f"replaced {p.stats.replaced}, expected {expected}")
            if expected == 0 and not p.stats.rejected:
                problems.append("nothing replaced but no reason recorded")
            if mode == "q_only" and not any(("+add_only" in k or "+fp8_per_token" in k)
                                            for k in p.stats.kinds):
                problems.append("q only: neither the add-only fusion nor the fused tail")
            if mode == "q_only" and any("+add_only" in k for k in p.stats.kinds) and not any(
                    "read unrounded" in n for n in p.stats.notes):
                problems.append("the add-only fusion's note does not name the unrounded fp32 norm")
            for k in p.stats.kinds:
                for sub in kinds:
                    if sub not in k:
                        problems.append(f"kind {k!r} lacks {sub!r}")
            # numerics: tensors of activation dtype within 1 ulp (residuals exact), fp8 exact
            got = got if isinstance(got, tuple) else (got,)
            want = want if isinstance(want, tuple) else (want,)
            if mode == "q_only":
                # the norm is not an output and may differ from eager's by 1 ulp, and a row's scale
                # with it: the dequantized values agree within one e4m3 step
                dq_got = got[0].float() * got[1].float()
                dq_want = want[0].float() * want[1].float()
                bound = 0.125 * dq_want.abs() + 2 * want[1].float()
                if not bool(((dq_got - dq_want).abs() <= bound).all()):
                    problems.append("q only: the dequantized values differ from eager's by more "
                                    "than one e4m3 step")
            for i, (a, b) in enumerate(zip(got, want)):
                if a.dtype in (torch.bfloat16, torch.float16):
                    d = int(ref.ulp_distance(a.cpu(), b.cpu()).max())
                    # the fp32-residual form normalizes the rounded residual (not the fp32 sum)
                    # two layers / the sandwich: an unfused norm of Inductor's reads its fp32 sum
                    limit = 4 if ("two layers" in name or "sandwich" in name) else (
                        2 if mode == "fp32res" else 1)
                    if d > limit:
                        problems.append(f"output {i}: {d} ulp from eager")
            if mode in ("fp8_per_token", "fp8_per_group"):
                # The pass fuses dynamic tails with scale_rule "times_reciprocal": the contract
                # with that rule on the CPU, and eager torch's own tail on the GPU (amax *
                # fp32(1/448)) run on the compiled norm, must both give the fused q and scales.
                norm_c = got[0].cpu()
                if mode == "fp8_per_token":
                    qr, sr = ref.fp8_per_token(norm_c, "times_reciprocal")
                    qe, se = per_token(got[0])
                else:
                    qr, sr, _ = ref.fp8_per_group(norm_c, "fp32", "times_reciprocal")
                    qe, se = per_group(got[0])
                q_got, s_got = got[1].cpu(), got[2].cpu()
                if not (ref.bits_equal(q_got, qr) and ref.bits_equal(s_got, sr)):
                    problems.append(f"{mode} q/scales differ from the contract (times_reciprocal) "
                                    "on the returned norm")
                if not ref.bits_equal(s_got, se.cpu()):
                    n = int((s_got.view(torch.int32) != se.cpu().view(torch.int32)).sum())
                    problems.append(f"{mode} scales differ from eager torch's on the returned norm "
                                    f"in {n} of {se.numel()}")
                if not ref.bits_equal(q_got, qe.cpu()):
                    problems.append(f"{mode} q differs from eager torch's on the returned norm")
                # where the compiled and eager norms agree bitwise, so must the eager model's scales
                if ref.bits_equal(norm_c, want[0].cpu()) and not ref.bits_equal(s_got, want[2].cpu()):
                    problems.append(f"{mode}: norms equal, scales differ from the eager model's")
            elif mode == "fp8_per_tensor":
                if not ref.bits_equal(got[1].cpu(), ref.fp8_per_tensor(got[0].cpu(), static_scale.cpu())):
                    problems.append("fp8 static q differs from the contract on the returned norm")
            if mode == "dynamic":
                x2 = [torch.randn(40, H, generator=gen).to(dtype).to(dev) for _ in range(nargs)]
                for t in x2:
                    torch._dynamo.mark_dynamic(t, 0, min=2, max=64)
                with torch.no_grad():
                    a, b = model(*x2), fn(*x2)
                torch.cuda.synchronize()
                if int(ref.ulp_distance(a[0].cpu(), b[0].cpu()).max()) > 1:
                    problems.append("T=40 differs from eager")
            record(name, not problems, "; ".join(problems + [summary]))
        except Exception as e:  # noqa: BLE001
            record(name, False, f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=8)}")
        finally:
            os.environ.pop("ARF_EXPERIMENTAL_SANDWICH", None)
    comm.destroy()
    dist.destroy_process_group()
    passed = sum(1 for r in results if r["ok"])
    failed = len(results) - passed
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    print(f"{passed} passed, {failed} failed")
    return 0 if failed == 0 and passed else 1


if __name__ == "__main__":
    sys.exit(main())

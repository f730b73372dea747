"""The torch.compile GPU scenario: the pass on a toy tensor-parallel model (run by
scenarios.suite; split from scenarios.py for its size)."""

from __future__ import annotations

import reference as ref  # noqa: E402
from scenarios import SEED, _bits, _make_comm, _rank_inputs, _require, _same_on_all_ranks, _torch  # noqa: E402


# ---- torch.compile: the pass on a toy tensor-parallel model ------------------------------------


def _toy_model(comm, world, rank, hidden, device, mode):
    """Five layers: partial sums (activations times a per-rank vector) -> all-reduce -> residual
    add -> RMSNorm in a different form per layer; the last layer adds an FP8 per-token tail.
    mode "torch": torch.distributed.all_reduce + plain torch norms (what the pass rewrites);
    "arfusion": the fused ops called directly (the expected result, bitwise; FP8: times_reciprocal);
    "eager_ref": arfusion's plain all-reduce + the same torch norms (close, not bitwise)."""
    torch = _torch()
    import torch.distributed as dist
    import torch.nn.functional as F

    dtype = torch.bfloat16
    eps = 1e-6
    g = torch.Generator().manual_seed(SEED + 700)
    scales = [(0.5 + torch.rand(world, hidden, generator=g)).to(dtype)[rank].to(device) for _ in range(5)]
    w_bf16 = [(1.0 + 0.2 * torch.randn(hidden, generator=g)).to(dtype).to(device) for _ in range(5)]
    w_f32 = (1.0 + 0.2 * torch.randn(hidden, generator=g)).to(device)

    def f_rms(s, w):
        return F.rms_norm(s, (hidden,), w, eps)

    def llama(s, w):
        h = s.to(torch.float32)
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
        return w * h.to(dtype)

    def gemma(s, w):
        h = s.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
        return (h * (1.0 + w.float())).type_as(s)

    def fp32w(s, w):
        h = s.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
        return (h * w).to(dtype)

    layers = [  # (torch norm, weight, fused-op options)
        (f_rms, w_bf16[0], dict()),
        (llama, w_bf16[1], dict(norm_rounding="before_weight")),
        (gemma, w_bf16[2], dict(gamma_plus_one=True)),
        (fp32w, w_f32, dict()),
        (llama, w_bf16[4], dict(norm_rounding="before_weight")),
    ]

    def forward(x):
        h, residual, q, sc = x, None, None, None
        for i, (norm, w, opts) in enumerate(layers):
            partial = h * scales[i]
            last = i == len(layers) - 1
            if mode == "arfusion":
                if last:
                    q, sc, residual, h = comm.fused_add_rms_norm_quant(
                        partial, residual, w, eps, quant="fp8_per_token", with_norm=True,
                        scale_rule="times_reciprocal", **opts)
                else:
                    h, residual = comm.fused_add_rms_norm_out(partial, residual, w, eps, **opts)
                continue
            if mode == "torch":
                dist.all_reduce(partial)
            else:
                partial = comm.all_reduce(partial)
            residual = partial if residual is None else partial + residual
            h = norm(residual, w)
            if last:
                q, sc = ref.torch_fp8_per_token(h)
        return h, residual, q, sc

    return forward


def compiled(ctx):
    torch = _torch()
    import torch._inductor.config as inductor_config

    import arfusion.torch as aft

    inductor_config.fx_graph_cache = False  # a cache hit would skip the pass (nothing to count)
    try:
        import torch._functorch.config as functorch_config

        functorch_config.enable_autograd_cache = False
    except (ImportError, AttributeError):
        pass
    hidden, dev = 1024, ctx.device
    comm = _make_comm(ctx, "tp", max_tokens=64, max_hidden=hidden)
    fwd_torch = _toy_model(comm, ctx.world, ctx.rank, hidden, dev, "torch")
    fwd_arf = _toy_model(comm, ctx.world, ctx.rank, hidden, dev, "arfusion")
    fwd_ref = _toy_model(comm, ctx.world, ctx.rank, hidden, dev, "eager_ref")

    def inputs(t, seed):
        return _rank_inputs(ctx.world, t, hidden, torch.bfloat16, seed)[ctx.rank].to(dev)

    def compare(got, want, what):
        names = ("norm", "residual", "fp8", "scales")
        for n, a, b in zip(names, got, want):
            _bits(a, b, f"{what}: {n}")

    def static_shapes():
        p = aft.AllReduceFusionPass(comm)
        model = torch.compile(fwd_torch, fullgraph=True, dynamic=False,
                              options={"post_grad_custom_post_pass": p})
        x = inputs(16, SEED + 710)
        with torch.no_grad():
            got = model(x)
            want = fwd_arf(x)
            close = fwd_ref(x)
        torch.cuda.synchronize()
        comm.check()
        summary = p.stats.summary()
        _require(p.stats.replaced == 5 and p.stats.all_reduces == 5,
                 f"expected 5 of 5 all-reduces replaced:\n{summary}")
        _require(any("fp8_per_token" in k for k in p.stats.kinds), f"FP8 tail not fused:\n{summary}")
        compare(got, want, "compiled (pass) vs the fused ops called eagerly")
        # eager torch's own FP8 tail on the compiled norm: the fused tail keeps its bits
        q_t, s_t = ref.torch_fp8_per_token(got[0])
        _bits(got[3], s_t, "compiled FP8 scales vs eager torch's tail on the same norm")
        _bits(got[2], q_t, "compiled FP8 q vs eager torch's tail on the same norm")
        for a, b, n in zip(got[:2], close[:2], ("norm", "residual")):
            _require(torch.allclose(a.float(), b.float(), rtol=3e-2, atol=3e-2),
                     f"{n}: compiled far from the unfused eager model")
        _same_on_all_ranks(ctx, "compiled outputs", *got)
        return summary.replace("\n", " | ")

    ctx.check("torch.compile + AllReduceFusionPass: 5 patterns replaced, outputs = eager fused ops",
              static_shapes)

    def dynamic_tokens():
        p = aft.AllReduceFusionPass(comm)
        model = torch.compile(fwd_torch, fullgraph=True, options={"post_grad_custom_post_pass": p})
        results = []
        for t in (16, 40, 9):
            x = inputs(t, SEED + 720 + t)
            torch._dynamo.mark_dynamic(x, 0, min=2, max=64)
            with torch.no_grad():
                got = model(x)
                want = fwd_arf(x)
            torch.cuda.synchronize()
            compare(got, want, f"dynamic T={t}")
            results.append(t)
        _require(p.stats.replaced == 5 * p.stats.graphs and p.stats.graphs >= 1,
                 p.stats.summary())
        return f"T in {results}: {p.stats.graphs} graph(s); " + p.stats.summary().replace("\n", " | ")

    ctx.check("torch.compile with a dynamic token count (bounded by mark_dynamic)", dynamic_tokens)

    def unbounded_dynamic_is_reported():
        p = aft.AllReduceFusionPass(comm)
        model = torch.compile(fwd_ref, fullgraph=True, options={"post_grad_custom_post_pass": p})
        x = inputs(12, SEED + 730)
        torch._dynamo.mark_dynamic(x, 0)
        with torch.no_grad():
            got = model(x)
            want = fwd_ref(x)
        torch.cuda.synchronize()
        _require(p.stats.replaced == 0, p.stats.summary())
        _require(p.stats.rejected and all("upper bound" in why for _, why in p.stats.rejected),
                 p.stats.summary())
        for a, b in zip(got[:2], want[:2]):
            _require(torch.allclose(a.float(), b.float(), rtol=3e-2, atol=3e-2), "outputs differ")
        return p.stats.summary().replace("\n", " | ")

    ctx.check("an unbounded dynamic token count is left unfused, with the reason",
              unbounded_dynamic_is_reported)

    def not_a_norm_is_reported():
        def f(x, r):
            y = comm.all_reduce(x)
            return (y + r).float().sigmoid()

        p = aft.AllReduceFusionPass(comm)
        model = torch.compile(f, fullgraph=True, dynamic=False, options={"post_grad_custom_post_pass": p})
        x, r = inputs(8, SEED + 740), inputs(8, SEED + 741)
        with torch.no_grad():
            got = model(x, r)
            want = f(x, r)
        torch.cuda.synchronize()
        _require(p.stats.all_reduces == 1 and p.stats.replaced == 0 and len(p.stats.rejected) == 1,
                 p.stats.summary())
        # Inductor keeps y + r in fp32 where eager rounds it to bf16: close, not equal
        _require(torch.allclose(got, want, rtol=1e-2, atol=1e-2), "outputs differ")
        return p.stats.rejected[0][1]

    ctx.check("an all-reduce without an RMSNorm is left alone, with the reason", not_a_norm_is_reported)
    ctx.barrier()
    comm.destroy()

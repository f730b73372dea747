"""The sandwich GPU scenario: the ops with post_weight (Gemma 2/3's post-norm, residual add and next
norm in one call) against the unfused algorithm, against the library's own first-layer call for h,
and across ranks (run by scenarios.suite; split from scenarios.py for its size). Sandwich calls are
refused unless ARF_EXPERIMENTAL_SANDWICH=1: every rank process sets it for this scenario alike."""

from __future__ import annotations

import os

import reference as ref  # noqa: E402
from scenarios import (SEED, _bits, _make_comm, _rank_inputs, _require,  # noqa: E402
                       _same_on_all_ranks, _shared, _torch)

CASES = [
    # (T, H, weight dtype (None = activation), gamma_plus_one, rounding, with residual, quant)
    (1, 4096, None, True, "once", True, None),
    (64, 2048, "float32", False, "before_weight", True, None),
    (300, 1024, None, True, "once", False, None),
    (16, 4096, None, True, "once", True, "fp8_per_token"),
]


def sandwich(ctx):
    torch = _torch()
    import arfusion

    dtype, eps, dev = torch.bfloat16, 1e-6, ctx.device
    saved = os.environ.get("ARF_EXPERIMENTAL_SANDWICH")
    os.environ["ARF_EXPERIMENTAL_SANDWICH"] = "1"
    comm = _make_comm(ctx, "sandwich")
    try:
        for i, (t, h, wdt, plus_one, rounding, with_res, quant) in enumerate(CASES):
            name = (f"sandwich T={t} H={h} weight={wdt or 'act'} plus_one={plus_one} {rounding} "
                    f"residual={with_res} quant={quant}")

            def run_case(t=t, h=h, wdt=wdt, plus_one=plus_one, rounding=rounding,
                         with_res=with_res, quant=quant, i=i):
                wdtype = getattr(torch, wdt) if wdt else dtype
                xs = _rank_inputs(ctx.world, t, h, dtype, SEED + 900 + i)
                residual, w = _shared(t, h, dtype, SEED + 900 + i, wdtype)
                _, w_post = _shared(t, h, dtype, SEED + 950 + i, wdtype)
                x, wd, pw = xs[ctx.rank].to(dev), w.to(dev), w_post.to(dev)
                r = residual.to(dev) if with_res else None
                kw = dict(gamma_plus_one=plus_one, norm_rounding=rounding)
                plan = comm.plan(t, h, quant=quant, gamma_dtype=wdtype, sandwich=True, **kw)
                _require("sandwich" in plan.reason, f"plan reason {plan.reason!r}")
                norm, res = comm.fused_add_rms_norm_out(x, r, wd, eps, post_weight=pw, **kw)
                norm_u, res_u = comm.fused_add_rms_norm_out(x, r, wd, eps, post_weight=pw,
                                                            algorithm="unfused", **kw)
                # h as the library writes it for a separate norm over the sum (a first-layer call)
                h_lib, _ = comm.fused_add_rms_norm_out(x, None, pw, eps, **kw)
                torch.cuda.synchronize()
                comm.check()
                _bits(norm, norm_u, "norm: fused vs unfused")
                _bits(res, res_u, "residual_out: fused vs unfused")
                _bits(res, ref.residual_out(h_lib.cpu(), residual if with_res else None, dtype),
                      "residual_out vs round(h + residual), h from a first-layer call")
                norm_ref = ref.rms_norm(res.cpu(), w, eps, plus_one, rounding, dtype)
                ulps = int(ref.ulp_distance(norm.cpu(), norm_ref).max())
                _require(ulps <= (2 if rounding == "before_weight" else 1),
                         f"norm vs reference: max {ulps} ulp")
                if quant is not None:
                    q, sc, res_q, norm_q = comm.fused_add_rms_norm_quant(
                        x, r, wd, eps, quant=quant, with_norm=True, post_weight=pw, **kw)
                    torch.cuda.synchronize()
                    _bits(res_q, res, "quant call: residual_out vs the norm call's")
                    _bits(norm_q, norm, "quant call: norm_out vs the norm call's")
                    q_ref, sc_ref = ref.fp8_per_token(norm_q.cpu())
                    _bits(q, q_ref, "quant_out vs the contract on the call's norm")
                    _bits(sc.reshape(sc_ref.shape), sc_ref, "scale_out vs the contract")
                _same_on_all_ranks(ctx, name, norm, res)
                return f"{plan.algorithm} ({plan.reason}); norm within {ulps} ulp"

            ctx.check(name, run_case)
    finally:
        comm.destroy()
        if saved is None:
            os.environ.pop("ARF_EXPERIMENTAL_SANDWICH", None)
        else:
            os.environ["ARF_EXPERIMENTAL_SANDWICH"] = saved

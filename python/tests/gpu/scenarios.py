"""GPU scenarios, each run on every rank by harness.run_scenario (see run_gpu_tests.py)."""

from __future__ import annotations

import hashlib
import os
import random
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import reference as ref  # noqa: E402

SEED = 1234


def _torch():
    import torch

    return torch


def _rank_inputs(world, t, h, dtype, seed, scale=1.0):
    """Every rank's partial sums (the same on every rank: each generates all of them)."""
    torch = _torch()
    xs = []
    for r in range(world):
        g = torch.Generator().manual_seed(seed * 1009 + r)
        xs.append((torch.randn(t, h, generator=g) * scale).to(dtype))
    return xs


def _shared(t, h, dtype, seed, weight_dtype=None):
    torch = _torch()
    g = torch.Generator().manual_seed(seed * 7919 + 17)
    residual = torch.randn(t, h, generator=g).to(dtype)
    w = (1.0 + 0.25 * torch.randn(h, generator=g)).to(weight_dtype or dtype)
    return residual, w


def _digest(*tensors):
    h = hashlib.sha256()
    for t in tensors:
        t = t.detach().contiguous().cpu()
        h.update(str((tuple(t.shape), str(t.dtype))).encode())
        if t.numel():
            h.update(t.view(_torch().uint8).numpy().tobytes())
    return h.hexdigest()


def _same_on_all_ranks(ctx, what, *tensors):
    digests = ctx.gather(_digest(*tensors))
    if len(set(digests)) != 1:
        raise AssertionError(f"{what}: outputs differ across ranks: {digests}")


def _require(cond, msg):
    if not cond:
        raise AssertionError(msg)


def _bits(a, b, what):
    a, b = a.cpu(), b.cpu()
    if not ref.bits_equal(a, b):
        if a.shape != b.shape or a.dtype != b.dtype:
            raise AssertionError(f"{what}: {tuple(a.shape)} {a.dtype} vs {tuple(b.shape)} {b.dtype}")
        diff = (a.contiguous().view(_torch().uint8) != b.contiguous().view(_torch().uint8))
        raise AssertionError(f"{what}: {int(diff.sum())} of {diff.numel()} bytes differ")


def _make_comm(ctx, name, **kw):
    import arfusion.torch as aft

    torch = _torch()
    kw.setdefault("max_tokens", 512)
    kw.setdefault("max_hidden", 4096)
    kw.setdefault("dtype", torch.bfloat16)
    kw.setdefault("timeout_s", 30.0)
    return aft.Communicator.from_group(name=name, **kw)


# ---- core: fused ops vs unfused vs the contract, cross-rank, quantized, all-reduce ---------------

NORM_CASES = [
    # (T, H, weight dtype (None = activation), gamma_plus_one, rounding, with residual)
    (1, 4096, None, False, "once", True),
    (7, 1024, "float32", False, "once", True),
    (64, 4096, None, True, "once", True),
    (300, 2048, None, False, "before_weight", True),
    (33, 1024, "float32", True, "before_weight", True),
    (5, 1024, None, False, "once", False),
    (512, 4096, None, False, "once", True),
]


def core(ctx, quick=False):
    torch = _torch()
    import arfusion

    dtype = torch.bfloat16
    comm = _make_comm(ctx, "core")
    dev = ctx.device
    eps = 1e-6

    def check_workspace():
        b = comm.workspace_bytes
        _require(b > 0, f"workspace_bytes {b}")
        facts = comm.plan_facts()
        _require(facts["world_size"] == ctx.world, facts)
        _require(facts["ranks_per_device"] >= 1, facts)
        return f"{b} bytes, facts {facts}"

    ctx.check("communicator: workspace_bytes and plan facts", check_workspace)

    cases = NORM_CASES[:3] if quick else NORM_CASES
    for i, (t, h, wdt, plus_one, rounding, with_res) in enumerate(cases):
        name = (f"fused_add_rms_norm_out T={t} H={h} weight={wdt or 'act'} plus_one={plus_one} "
                f"{rounding} residual={with_res}")

        def run_case(t=t, h=h, wdt=wdt, plus_one=plus_one, rounding=rounding, with_res=with_res, i=i):
            wdtype = getattr(torch, wdt) if wdt else dtype
            xs = _rank_inputs(ctx.world, t, h, dtype, SEED + i)
            residual, w = _shared(t, h, dtype, SEED + i, wdtype)
            x = xs[ctx.rank].to(dev)
            r = residual.to(dev) if with_res else None
            wd = w.to(dev)
            kw = dict(gamma_plus_one=plus_one, norm_rounding=rounding)
            norm, res = comm.fused_add_rms_norm_out(x, r, wd, eps, **kw)
            norm_u, res_u = comm.fused_add_rms_norm_out(x, r, wd, eps, algorithm="unfused", **kw)
            torch.cuda.synchronize()
            comm.check()
            _bits(norm, norm_u, "norm: fused vs unfused")
            _bits(res, res_u, "residual_out: fused vs unfused")
            ar = ref.all_reduce(xs, dtype)
            res_ref = ref.residual_out(ar, residual if with_res else None, dtype)
            _bits(res, res_ref, "residual_out vs the fp32 rank-order reference")
            norm_ref = ref.rms_norm(res_ref, w, eps, plus_one, rounding, dtype)
            ulps = ref.ulp_distance(norm.cpu(), norm_ref)
            # the reference's rsqrt and sum order are not the kernel's: 1 ulp once; rounding
            # before the weight can turn that ulp of x*rstd into 2 of the weighted result
            limit = 2 if rounding == "before_weight" else 1
            _require(int(ulps.max()) <= limit, f"norm vs reference: max {int(ulps.max())} ulp")
            exact = float((ulps == 0).float().mean())
            # every feasible forced algorithm gives the same bits
            forced = []
            for algo in ("oneshot_lamport", "oneshot_pull", "twoshot"):
                try:
                    comm.plan(t, h, algorithm=algo, gamma_dtype=wdtype, gamma_plus_one=plus_one,
                              norm_rounding=rounding)
                except arfusion.ArfError:
                    continue
                n2, r2 = comm.fused_add_rms_norm_out(x, r, wd, eps, algorithm=algo, **kw)
                torch.cuda.synchronize()
                _bits(n2, norm, f"norm: {algo} vs auto")
                _bits(r2, res, f"residual_out: {algo} vs auto")
                forced.append(algo)
            _same_on_all_ranks(ctx, name, norm, res)
            plan = comm.plan(t, h, gamma_dtype=wdtype, gamma_plus_one=plus_one,
                             norm_rounding=rounding)
            return (f"auto={plan.algorithm} ({plan.reason}); forced ok: {forced}; "
                    f"{exact:.4f} of norm bit-exact vs the CPU reference")

        ctx.check(name, run_case)

    def inplace():
        t, h = 16, 2048
        xs = _rank_inputs(ctx.world, t, h, dtype, SEED + 50)
        residual, w = _shared(t, h, dtype, SEED + 50)
        x = xs[ctx.rank].to(dev)
        r = residual.to(dev)
        wd = w.to(dev)
        norm, res = comm.fused_add_rms_norm_out(x, r, wd, eps, norm_rounding="before_weight")
        x2, r2 = x.clone(), r.clone()
        comm.fused_add_rms_norm(x2, r2, wd, eps, norm_rounding="before_weight")
        torch.cuda.synchronize()
        _bits(x2, norm, "in place: input := norm")
        _bits(r2, res, "in place: residual := all_reduce + residual")

    ctx.check("fused_add_rms_norm (in place) == out of place", inplace)

    def all_reduce():
        for t, h in ((1, 8), (13, 1024), (512, 4096)):
            xs = _rank_inputs(ctx.world, t, h, dtype, SEED + 60 + t)
            x = xs[ctx.rank].to(dev)
            y = comm.all_reduce(x)
            x2 = x.clone()
            comm.all_reduce_(x2)
            torch.cuda.synchronize()
            want = ref.all_reduce(xs, dtype)
            _bits(y, want, f"all_reduce {t}x{h} vs reference")
            _bits(x2, want, f"all_reduce_ {t}x{h} vs reference")
            _bits(x, xs[ctx.rank].to(dev), "all_reduce leaves its input alone")
        # a non-2-D shape (flat count)
        xs = _rank_inputs(ctx.world, 6, 40, dtype, SEED + 70)
        y = comm.all_reduce(xs[ctx.rank].to(dev).reshape(2, 3, 40))
        _bits(y.reshape(6, 40), ref.all_reduce(xs, dtype), "all_reduce of a 3-D tensor")

    ctx.check("all_reduce / all_reduce_ vs reference", all_reduce)

    def input_buffer():
        # zero-copy inputs: the same bits with the input in the communicator's input buffer, for
        # the out-of-place fused op and the all-reduce; an in-place op on it is refused
        for t, h in ((3, 1024), (16, 2048), (64, 4096)):
            xs = _rank_inputs(ctx.world, t, h, dtype, SEED + 80 + t)
            residual, w = _shared(t, h, dtype, SEED + 80 + t)
            x, r, wd = xs[ctx.rank].to(dev), residual.to(dev), w.to(dev)
            want_norm, want_res = comm.fused_add_rms_norm_out(x, r, wd, eps)
            buf = comm.input_buffer(t, h)
            _require(buf.shape == (t, h) and buf.dtype == dtype and buf.device == x.device,
                     f"input_buffer view {tuple(buf.shape)} {buf.dtype} {buf.device}")
            buf.copy_(x)
            norm, res = comm.fused_add_rms_norm_out(buf, r, wd, eps)
            torch.cuda.synchronize()
            _bits(norm, want_norm, f"{t}x{h}: norm with the input in the buffer")
            _bits(res, want_res, f"{t}x{h}: residual with the input in the buffer")
            _bits(buf, x, f"{t}x{h}: the call leaves the buffer alone")
            _bits(comm.all_reduce(buf), ref.all_reduce(xs, dtype), f"{t}x{h}: all_reduce from the buffer")
        buf = comm.input_buffer(8, 1024)
        try:
            comm.all_reduce_(buf)
        except arfusion.ArfError as e:
            _require("input buffer" in str(e), f"unexpected message: {e}")
        else:
            raise AssertionError("an in-place all_reduce_ on the input buffer was not refused")
        torch.cuda.synchronize()
        comm.check()

    ctx.check("input_buffer: zero-copy inputs give the same bits; in place on it is refused",
              input_buffer)

    quant_cases = [
        ("fp8_per_tensor", "row_major", "fp32"),
        ("fp8_per_token", "row_major", "fp32"),
        ("fp8_per_group", "row_major", "fp32"),
        ("fp8_per_group", "mn_major", "fp32"),
        ("fp8_per_group", "row_major", "ue8m0_as_fp32"),
        ("fp8_per_group", "mn_major", "ue8m0_as_fp32"),
        ("fp8_per_group", "row_major", "ue8m0_packed"),
        ("fp8_per_group", "mn_major", "ue8m0_packed"),
        ("nvfp4", "row_major", "fp32"),
        ("nvfp4", "swizzled_128x4", "fp32"),
        ("mxfp4", "row_major", "fp32"),
        ("mxfp4", "swizzled_128x4", "fp32"),
    ]
    quant_cases = [c + ("divide",) for c in quant_cases]
    # torch's GPU scale arithmetic (amax * fp32(1/448)), what the compile pass asks for
    rule_cases = [("fp8_per_token", "row_major", "fp32", "times_reciprocal"),
                  ("fp8_per_group", "row_major", "fp32", "times_reciprocal"),
                  ("fp8_per_group", "mn_major", "ue8m0_packed", "times_reciprocal")]
    quant_cases = (quant_cases[1:3] + quant_cases[-2:-1] + rule_cases[:1] if quick
                   else quant_cases + rule_cases)
    for j, (quant, layout, fmt, rule) in enumerate(quant_cases):
        def run_quant(quant=quant, layout=layout, fmt=fmt, rule=rule, j=j):
            t, h = (5, 1024) if j % 2 else (130, 2048)
            xs = _rank_inputs(ctx.world, t, h, dtype, SEED + 100 + j)
            residual, w = _shared(t, h, dtype, SEED + 100 + j)
            x, r, wd = xs[ctx.rank].to(dev), residual.to(dev), w.to(dev)
            scale = None
            if quant == "fp8_per_tensor":
                scale = torch.tensor([0.05], dtype=torch.float32, device=dev)
            elif quant == "nvfp4":
                scale = torch.tensor([448.0 * 6.0 / 8.0], dtype=torch.float32, device=dev)
            kw = dict(quant=quant, scale=scale, scale_layout=layout, scale_format=fmt, scale_rule=rule)
            q, s, res, norm = comm.fused_add_rms_norm_quant(x, r, wd, eps, with_norm=True, **kw)
            q2, s2, res2, empty = comm.fused_add_rms_norm_quant(x, r, wd, eps, **kw)
            q3, s3, res3, norm3 = comm.fused_add_rms_norm_quant(x, r, wd, eps, with_norm=True,
                                                                fallback=3, **kw)
            norm0, res0 = comm.fused_add_rms_norm_out(x, r, wd, eps)
            torch.cuda.synchronize()
            comm.check()
            _require(empty.numel() == 0, "with_norm=False returns an empty norm")
            _bits(q2, q, "quant_out with and without norm_out")
            _bits(s2, s, "scale_out with and without norm_out")
            _bits(q3, q, "quant_out: fallback level 3 vs 1")
            _bits(s3, s, "scale_out: fallback level 3 vs 1")
            _bits(norm3, norm, "norm_out: level 3 vs 1")
            _bits(norm, norm0, "norm_out of the quantized pattern vs residual_rmsnorm")
            for rr in (res, res2, res3):
                _bits(rr, res0, "residual_out of the quantized pattern vs residual_rmsnorm")
            nc = norm.cpu()
            if quant == "fp8_per_tensor":
                _bits(q, ref.fp8_per_tensor(nc, scale.cpu()), "fp8 per-tensor vs reference")
                _require(s.numel() == 0, "per-tensor writes no scale")
            elif quant == "fp8_per_token":
                qr, sr = ref.fp8_per_token(nc, rule)
                _bits(q, qr, "fp8 per-token q vs reference")
                _bits(s, sr, "fp8 per-token scales vs reference")
                if rule == "times_reciprocal":  # torch's own tail on the GPU gives these bits
                    _, s_gpu = ref.torch_fp8_per_token(norm)
                    _bits(s, s_gpu, "fp8 per-token scales vs torch's tail on the GPU")
            elif quant == "fp8_per_group":
                qr, sr, codes = ref.fp8_per_group(nc, fmt, rule)
                _bits(q, qr, "fp8 per-group q vs reference")
                if fmt == "ue8m0_packed":
                    want = codes if layout == "row_major" else ref.mn_major_packed(codes)
                else:
                    want = sr if layout == "row_major" else ref.mn_major_fp32(sr)
                _bits(s, want, f"fp8 per-group scales ({layout}, {fmt}) vs reference")
            elif quant == "mxfp4":
                qr, codes = ref.mxfp4(nc)
                _bits(q, qr, "mxfp4 q vs reference")
                want = codes if layout == "row_major" else ref.swizzle_128x4(codes)
                _bits(s.view(torch.uint8), want, f"mxfp4 scales ({layout}) vs reference")
            else:
                qr, codes = ref.nvfp4(nc, float(scale.item()))
                _bits(q, qr, "nvfp4 q vs reference")
                want = codes if layout == "row_major" else ref.swizzle_128x4(codes)
                _bits(s.view(torch.uint8), want, f"nvfp4 scales ({layout}) vs reference")
            _same_on_all_ranks(ctx, f"{quant} {layout} {fmt} {rule}", q, s, res, norm)
            plan = comm.plan(t, h, quant=quant, scale_layout=layout, scale_format=fmt, scale_rule=rule)
            return f"T={t} H={h}: {plan.algorithm} level {plan.fallback_level}"

        ctx.check(f"fused_add_rms_norm_quant {quant} {layout} {fmt}"
                  + ("" if rule == "divide" else f" {rule}"), run_quant)

    def refused_call_keeps_comm_usable():
        x = torch.zeros(4, 1004, dtype=dtype, device=dev)   # hidden % 8 != 0
        w = torch.ones(1004, dtype=dtype, device=dev)
        try:
            comm.fused_add_rms_norm_out(x, x.clone(), w, eps)
        except arfusion.ArfError as e:
            _require(e.status == "arfInvalidArgument", e)
            _require(e.message, "the library says why")
        else:
            raise AssertionError("hidden 1004 was accepted")
        xf = torch.zeros(4, 1024, dtype=torch.float16, device=dev)  # not the communicator's dtype
        wf = torch.ones(1024, dtype=torch.float16, device=dev)
        try:
            comm.fused_add_rms_norm_out(xf, xf.clone(), wf, eps)
        except arfusion.ArfError as e:
            _require(e.status == "arfInvalidArgument", e)
        else:
            raise AssertionError("an fp16 call on a bf16 communicator was accepted")
        # the call's dtype is the input's own: the library refuses one that is not the
        # communicator's (it once got the communicator's dtype and read the data wrongly)
        try:
            comm.all_reduce(xf)
        except arfusion.ArfError as e:
            _require(e.status == "arfInvalidArgument" and "dtype" in e.message, e)
        else:
            raise AssertionError("an fp16 all_reduce on a bf16 communicator was accepted")
        x32 = torch.zeros(4, 1024, dtype=torch.float32, device=dev)
        for what, call in (("all_reduce", lambda: comm.all_reduce(x32)),
                           ("all_reduce_", lambda: comm.all_reduce_(x32)),
                           ("fused_add_rms_norm_out",
                            lambda: comm.fused_add_rms_norm_out(x32, x32.clone(), x32[0].clone(), eps))):
            try:
                call()
            except ValueError as e:
                _require("activation dtype" in str(e), e)
            else:
                raise AssertionError(f"a float32 {what} was accepted")
        xs = _rank_inputs(ctx.world, 3, 1024, dtype, SEED + 80)
        y = comm.all_reduce(xs[ctx.rank].to(dev))
        torch.cuda.synchronize()
        _bits(y, ref.all_reduce(xs, dtype), "a good call after refused ones")

    ctx.check("refused calls raise ArfError and leave the communicator usable",
              refused_call_keeps_comm_usable)
    ctx.barrier()
    comm.destroy()
    import arfusion.torch as aft

    ctx.check("destroy unregisters",
              lambda: _require("core" not in aft.registered_communicators(), "still registered"))


def core_quick(ctx):
    core(ctx, quick=True)


# ---- opcheck -------------------------------------------------------------------------------------


def opchecks(ctx):
    torch = _torch()
    comm = _make_comm(ctx, "opcheck")
    dev, dtype = ctx.device, torch.bfloat16
    t, h = 8, 1024
    xs = _rank_inputs(ctx.world, t, h, dtype, SEED + 200)
    residual, w = _shared(t, h, dtype, SEED + 200)
    x, r, wd = xs[ctx.rank].to(dev), residual.to(dev), w.to(dev)
    ops = torch.ops.arfusion
    cases = [
        ("fused_add_rms_norm", ops.fused_add_rms_norm.default, (x.clone(), r.clone(), wd, 1e-6, comm.name)),
        ("fused_add_rms_norm_out", ops.fused_add_rms_norm_out.default, (x, r, wd, 1e-6, comm.name)),
        ("fused_add_rms_norm_out (no residual)", ops.fused_add_rms_norm_out.default, (x, None, wd, 1e-6, comm.name)),
        ("fused_add_rms_norm_quant fp8_per_token", ops.fused_add_rms_norm_quant.default,
         (x, r, wd, None, 1e-6, comm.name, "fp8_per_token")),
        ("fused_add_rms_norm_quant fp8_per_group mn_major packed", ops.fused_add_rms_norm_quant.default,
         (x, r, wd, None, 1e-6, comm.name, "fp8_per_group", "mn_major", "ue8m0_packed", True)),
        ("fused_add_rms_norm_quant fp8_per_group times_reciprocal", ops.fused_add_rms_norm_quant.default,
         (x, r, wd, None, 1e-6, comm.name, "fp8_per_group", "row_major", "fp32", True, False, "once",
          "auto", 0, "times_reciprocal")),
        ("fused_add_rms_norm_quant nvfp4", ops.fused_add_rms_norm_quant.default,
         (x, r, wd, torch.tensor([100.0], device=dev), 1e-6, comm.name, "nvfp4")),
        ("all_reduce", ops.all_reduce.default, (x, comm.name)),
        ("all_reduce_", ops.all_reduce_.default, (x.clone(), comm.name)),
    ]
    for name, op, args in cases:
        def run(op=op, args=args):
            result = torch.library.opcheck(op, args)
            torch.cuda.synchronize()
            comm.check()
            bad = {k: v for k, v in result.items() if v != "SUCCESS"}
            _require(not bad, bad)
            return ", ".join(sorted(result))

        ctx.check(f"opcheck {name}", run)
    ctx.barrier()
    comm.destroy()


# ---- CUDA graphs -----------------------------------------------------------------------------------


def graphs(ctx):
    torch = _torch()
    comm = _make_comm(ctx, "graphs")
    dev, dtype = ctx.device, torch.bfloat16
    t, h, eps = 24, 2048, 1e-6

    def capture_and_replay():
        residual, w = _shared(t, h, dtype, SEED + 300)
        x_static = torch.zeros(t, h, dtype=dtype, device=dev)
        r_static = torch.zeros(t, h, dtype=dtype, device=dev)
        wd = w.to(dev)
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):  # warm up outside the capture (allocator, lazy state)
            comm.fused_add_rms_norm_out(x_static, r_static, wd, eps)
            comm.fused_add_rms_norm_quant(x_static, r_static, wd, eps, quant="fp8_per_token")
        torch.cuda.current_stream().wait_stream(s)
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            norm, res = comm.fused_add_rms_norm_out(x_static, r_static, wd, eps)
            q, sc, res_q, _ = comm.fused_add_rms_norm_quant(norm, res, wd, eps, quant="fp8_per_token")
        rng = random.Random(ctx.rank)
        for replay in range(5):
            xs = _rank_inputs(ctx.world, t, h, dtype, SEED + 310 + replay)
            res_in, _ = _shared(t, h, dtype, SEED + 310 + replay)
            x_static.copy_(xs[ctx.rank].to(dev))
            r_static.copy_(res_in.to(dev))
            time.sleep(rng.random() * 0.02)  # ranks reach the replay at different times
            g.replay()
            torch.cuda.synchronize()
            comm.check()
            # the same calls, eagerly, on the same inputs
            n_e, r_e = comm.fused_add_rms_norm_out(x_static, r_static, wd, eps)
            q_e, s_e, rq_e, _ = comm.fused_add_rms_norm_quant(n_e, r_e, wd, eps, quant="fp8_per_token")
            torch.cuda.synchronize()
            _bits(norm, n_e, f"replay {replay}: norm vs eager")
            _bits(res, r_e, f"replay {replay}: residual vs eager")
            _bits(q, q_e, f"replay {replay}: fp8 vs eager")
            _bits(sc, s_e, f"replay {replay}: scales vs eager")
            ar = ref.all_reduce(xs, dtype)
            _bits(res, ref.residual_out(ar, res_in, dtype), f"replay {replay}: residual vs reference")
            _same_on_all_ranks(ctx, f"replay {replay}", norm, res, q, sc, res_q)
        return "5 replays with new inputs each"

    ctx.check("CUDA graph capture + replay with changed inputs", capture_and_replay)

    def creation_refused_during_capture():
        import arfusion

        g = torch.cuda.CUDAGraph()
        raised = None
        x = torch.zeros(8, device=dev)
        with torch.cuda.graph(g):
            x.add_(1)
            try:
                _make_comm(ctx, "during_capture")
            except arfusion.ArfError as e:
                raised = e
        _require(raised is not None, "creation during capture was not refused")
        _require("capture" in raised.message, raised)
        return str(raised)

    ctx.check("Communicator creation during capture is refused on every rank",
              creation_refused_during_capture)
    ctx.barrier()
    comm.destroy()


# ---- a rank that stops calling ---------------------------------------------------------------------


def timeout(ctx):
    torch = _torch()
    import arfusion

    dev, dtype = ctx.device, torch.bfloat16
    timeout_s = 2.0
    comm = _make_comm(ctx, "timeout", timeout_s=timeout_s)
    t, h = 4, 1024
    xs = _rank_inputs(ctx.world, t, h, dtype, SEED + 400)
    x = xs[ctx.rank].to(dev)
    residual, w = _shared(t, h, dtype, SEED + 400)
    r, wd = residual.to(dev), w.to(dev)
    quitter = ctx.world - 1

    def stall():
        for _ in range(3):  # calls 0, 1, 2 complete everywhere
            comm.fused_add_rms_norm_out(x, r, wd, 1e-6)
        torch.cuda.synchronize()
        comm.check()
        ctx.barrier()
        if ctx.rank == quitter:
            ctx.barrier()  # stops calling; waits for the others to finish
            return "stopped calling"
        t0 = time.time()
        err = None
        try:
            comm.fused_add_rms_norm_out(x, r, wd, 1e-6)  # call 3: the quitter never joins
            torch.cuda.synchronize()                    # bounded: the kernel gives up
            comm.check()
            comm.fused_add_rms_norm_out(x, r, wd, 1e-6)
        except arfusion.ArfError as e:
            err = e
        elapsed = time.time() - t0
        ctx.barrier()
        _require(err is not None, "no ArfError after a peer stopped calling")
        _require(err.status == "arfTimeout", f"status {err.status}: {err}")
        _require(elapsed < timeout_s + 30.0, f"raised after {elapsed:.1f} s")
        _require(err.first_lost_call == 3, f"first lost call {err.first_lost_call}, expected 3: {err}")
        try:
            comm.fused_add_rms_norm_out(x, r, wd, 1e-6)
        except arfusion.ArfError as e2:
            _require(e2.status in ("arfTimeout", "arfCommFailed"), e2)
        else:
            raise AssertionError("a failed communicator accepted another call")
        return f"raised after {elapsed:.1f} s: {err}"

    ctx.check("a rank that stops calling makes every other rank raise", stall)
    ctx.check("destroy after the failure", comm.destroy)


# ---- creation failures agree -------------------------------------------------------------------


def creation(ctx):
    torch = _torch()
    import arfusion

    def asymmetric_problem():
        bad = torch.float32 if ctx.rank == ctx.world - 1 else torch.bfloat16
        try:
            _make_comm(ctx, "asym", dtype=bad)
        except arfusion.ArfError as e:
            _require(f"rank {ctx.world - 1}" in e.message, e)
            return str(e)
        raise AssertionError("creation succeeded although one rank asked for float32")

    ctx.check("one rank's bad argument fails creation on every rank", asymmetric_problem)

    def library_refusal():
        try:
            _make_comm(ctx, "bad_capacity", max_hidden=4100)  # not a multiple of 8
        except arfusion.ArfError as e:
            _require(e.status == "arfInvalidArgument", e)
            return str(e)
        raise AssertionError("max_hidden 4100 was accepted")

    ctx.check("a library refusal at creation raises on every rank", library_refusal)

    def name_reuse():
        c = _make_comm(ctx, "twice", max_tokens=16, max_hidden=1024)
        try:
            try:
                _make_comm(ctx, "twice", max_tokens=16, max_hidden=1024)
            except arfusion.ArfError as e:
                _require("already exists" in e.message, e)
            else:
                raise AssertionError("a second communicator with the same name was created")
        finally:
            ctx.barrier()
            c.destroy()

    ctx.check("a registry name is used once", name_reuse)

    def context_manager():
        import arfusion.torch as aft

        with _make_comm(ctx, "ctx", max_tokens=16, max_hidden=1024) as c:
            _require(aft.get_communicator("ctx") is c, "not registered")
            ctx.barrier()
        _require("ctx" not in aft.registered_communicators(), "still registered after with")

    ctx.check("context manager destroys and unregisters", context_manager)

    def fp16():
        c = _make_comm(ctx, "fp16", dtype=torch.float16, max_tokens=64, max_hidden=2048)
        try:
            t, h = 9, 2048
            xs = _rank_inputs(ctx.world, t, h, torch.float16, SEED + 500)
            residual, w = _shared(t, h, torch.float16, SEED + 500)
            norm, res = c.fused_add_rms_norm_out(xs[ctx.rank].to(ctx.device), residual.to(ctx.device),
                                                 w.to(ctx.device), 1e-5)
            torch.cuda.synchronize()
            ar = ref.all_reduce(xs, torch.float16)
            res_ref = ref.residual_out(ar, residual, torch.float16)
            _bits(res, res_ref, "fp16 residual_out vs reference")
            ulps = ref.ulp_distance(norm.cpu(), ref.rms_norm(res_ref, w, 1e-5, False, "once", torch.float16))
            _require(int(ulps.max()) <= 1, f"fp16 norm: {int(ulps.max())} ulp")
        finally:
            ctx.barrier()
            c.destroy()

    ctx.check("fp16 communicator vs reference", fp16)

    def from_nccl():
        import torch.distributed as dist

        saved_env = {}
        if torch.cuda.device_count() < ctx.world:
            # Ranks sharing the GPU join NCCL over loopback (arfusion.shared_gpu says why).
            from arfusion.shared_gpu import nccl_env_for_ranks_on_one_gpu
            env = nccl_env_for_ranks_on_one_gpu(f"arfusion-test-{os.getppid()}", ctx.rank)
            saved_env = {k: os.environ.get(k) for k in env}
            os.environ.update(env)
        pg = dist.new_group(backend="nccl")
        try:
            dist.all_reduce(torch.ones(1, device=ctx.device), group=pg)  # creates NCCL's communicator
            backend = pg._get_backend(torch.device("cuda"))
            ptr = backend._comm_ptr() if hasattr(backend, "_comm_ptr") else None
            if not ptr:
                raise AssertionError("this torch does not expose the NCCL communicator (_comm_ptr)")
            import arfusion.torch as aft

            c = aft.Communicator.from_nccl(ptr, max_tokens=16, max_hidden=1024, name="nccl_boot")
            try:
                _require(c.world_size == ctx.world, c)
                xs = _rank_inputs(ctx.world, 2, 1024, torch.bfloat16, SEED + 600)
                y = c.all_reduce(xs[ctx.rank].to(ctx.device))
                torch.cuda.synchronize()
                _bits(y, ref.all_reduce(xs, torch.bfloat16), "from_nccl all_reduce")
            finally:
                c.destroy()
            return f"rank {c.rank}"
        finally:
            # The scenarios after this one run without this NCCL group and its environment
            # (destroying a group is local: every NCCL operation on it has completed above).
            dist.destroy_process_group(pg)
            for k, v in saved_env.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v

    ctx.check("from_nccl", from_nccl)


# ---- suites: several scenarios in one set of rank processes ------------------------------------

SUITES = {
    2: ("core", "opchecks", "graphs", "creation", "compiled", "sandwich", "timeout"),
    4: ("core_quick", "graphs", "sandwich", "timeout"),
    8: ("core_quick", "timeout"),
}


def suite(ctx):
    only = [s for s in os.environ.get("ARF_GPU_SCENARIOS", "").split(",") if s]
    names = only or SUITES.get(ctx.world, ("core_quick", "timeout"))
    for name in names:
        ctx.log(f"scenario {name}")
        ctx.barrier()
        globals()[name](ctx)


# the torch.compile and sandwich scenarios live in their own files (they import this module's helpers)
from scenarios_compiled import compiled  # noqa: E402,F401
from scenarios_sandwich import sandwich  # noqa: E402,F401

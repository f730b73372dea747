"""Correctness gates of the end-to-end benchmark (torch side), run on every rank before any timing.

DEMANDED (a failure fails the run) — only what a contract promises:
  * self-check: this file's torch ulp distance equals numerics.ulp_distance on a fixed probe set.
  * per site (the first layer's three all-reduce sites, on the model's own activations):
      - arfusion's all-reduce == the fp32 rank-order sum of the gathered partials, rounded once
        (arfusion.h "Numerics": bitwise);
      - the fused op's residual_out == torch's bf16 add of that all-reduce and the residual
        (arfusion: round(float(sum) + float(residual)); torch's bf16 add: the same fp32 add and
        one rounding): bitwise;
      - fused == arfusion's own unfused path (algorithm="unfused"): bitwise (arfusion.h);
      - fused norm within 2 ulp of torch's LlamaRMSNorm of the same residual: both compute
        round(round(y * s) * w) in fp32, but the fp32 sum of squares is ordered differently
        (torch's reduction tree vs arfusion's), so s may differ in its last bits; the bf16
        intermediate then lands on the same or the neighbouring value, and the weighted product
        differs by less than 2 ulp before its rounding -> at most 2 ulp after. Not bitwise.
      - FP8 (when an e variant runs): the fused quantizer's q and scales == torch's quantization
        (model.torch_quant) of the fused op's own bf16 norm, bitwise (arfusion.h: quantized
        patterns quantize the rounded norm, quant_formats.h rules; both layouts), for each scale
        rule against the torch evaluation that computes it: scale_rule "divide" (the default,
        IEEE amax / 448) against torch on the CPU, "times_reciprocal" (what the model and the
        pass use) against torch on the GPU, where `amax / 448.0` is amax * fp32(1/448).
  * end to end (prefill of a fixed prompt + teacher-forced greedy decode, L layers):
      - (c) with every forced algorithm (c@unfused, c@oneshot_*, c@twoshot) == (c): bitwise
        (final hidden states, logits, tokens); a forced algorithm the planner refuses for a
        shape is reported as refused, not failed;
      - (d) == (c_compiled) and (e_d) == (e_c_compiled): bitwise — the pass puts the same op with
        the same arguments where (c) calls it; everything else is the same code under the same
        compiler. Also: the pass replaced every all-reduce of every graph, with the
        before_weight rounding, and (e_d) every FP8 tail that feeds an FP8 GEMM;
      - every arfusion-carried variant's outputs are bitwise identical on every rank (arfusion.h:
        identical residual and gamma on every rank -> identical outputs);
      - sanity bounds (NOT a contract, catch gross breakage only): mean logits cosine of every
        bf16 variant vs the reference >= --min-cosine, of every FP8 variant vs e_a >=
        --min-cosine-fp8.

REPORTED (measured, never faked, not promised): (b) vs (c) — differ only by torch's norm vs
arfusion's (see above), so after L layers they differ in the low bits; (a) vs the rest — NCCL sums
bf16 in its own order with a rounding per step (gloo for (a'): its order), arfusion in fp32 in rank
order with one rounding: the sums differ for TP > 2 (for TP 2 one fp32 add of two bf16 values is
exact, so the sums agree); compiled vs eager — Inductor fuses pointwise chains (rotary, SiLU * up)
without the eager per-op bf16 roundings. For each: max ulp of the final hidden states, fraction
bitwise equal, logits cosine (min/mean over the decode steps), greedy agreement.

Teacher forcing: the reference variant ((a), else (c), else (e_a), (e_c), else the first variant
that runs: config.gate_order) decodes greedily, every rank feeding rank 0's token; every other
variant is fed the reference's tokens, so its prediction at each step is compared with the
reference's at the same context.
"""

from __future__ import annotations

import dataclasses
import hashlib
import time
import traceback

import torch
import torch.distributed as dist
import torch.nn.functional as F

import config
import model
import numerics

SITE_NORM_MAX_ULP = 2

DEMANDED_BITWISE = [
    ("d", "c_compiled", "the pass puts the fused op where (c) calls it; the rest is the same code "
     "under the same compiler"),
    ("e_d", "e_c_compiled", "the same with the FP8 tail fused"),
]
REPORTED_PAIRS = [("b", "c"), ("a", "b"), ("a", "c"), ("c_compiled", "c"), ("d", "c"), ("d0", "a"),
                  ("d", "d0"), ("e_c", "e_a"), ("e_d", "e_a"), ("e_c_compiled", "e_c"),
                  ("e_d0", "e_a"), ("e_a", "a"), ("e_c", "c")]


class Gates:
    def __init__(self):
        self.demanded: list[dict] = []
        self.reported: dict = {"sites": [], "comparisons": [], "variants": {}, "cross_rank": {}}

    def demand(self, name: str, ok: bool, detail: str = "") -> bool:
        self.demanded.append({"name": name, "ok": bool(ok), "detail": detail})
        return ok

    @property
    def passed(self) -> bool:
        return bool(self.demanded) and all(g["ok"] for g in self.demanded)

    def to_json(self) -> dict:
        return {"passed": self.passed, "demanded": self.demanded, "reported": self.reported}


# ---- numerics in torch ---------------------------------------------------------------------------


def ulp_t(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Elementwise ulp distance of two bf16 tensors (numerics.py's definition); -1 for NaN pairs."""
    if a.dtype != torch.bfloat16 or b.dtype != torch.bfloat16 or a.shape != b.shape:
        raise ValueError(f"ulp_t: {a.dtype} {tuple(a.shape)} vs {b.dtype} {tuple(b.shape)}")
    ia = a.contiguous().view(torch.int16).to(torch.int32)
    ib = b.contiguous().view(torch.int16).to(torch.int32)
    oa = torch.where(ia < 0, -(ia & 0x7FFF), ia)
    ob = torch.where(ib < 0, -(ib & 0x7FFF), ib)
    d = (oa - ob).abs()
    return torch.where(torch.isnan(a) | torch.isnan(b), torch.full_like(d, -1), d)


def ulp_summary_t(d: torch.Tensor) -> dict:
    d = d.flatten()
    n = d.numel()
    nan = int((d < 0).sum())
    ok = d[d >= 0]
    hist = {"0": int((ok == 0).sum()), "1": int((ok == 1).sum()), "2": int((ok == 2).sum()),
            ">2": int((ok > 2).sum())}
    return {"elements": n, "max_ulp": int(ok.max()) if ok.numel() else 0, "hist": hist,
            "nan_pairs": nan, "fraction_equal": hist["0"] / n if n else None}


def bits_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.numel() == 0:
        return True
    return torch.equal(a.contiguous().view(torch.uint8), b.contiguous().view(torch.uint8))


def digest(*tensors) -> str:
    h = hashlib.sha256()
    for t in tensors:
        if isinstance(t, (list, tuple)):
            h.update(repr(list(t)).encode())
            continue
        t = t.detach().contiguous().cpu()
        h.update(repr((tuple(t.shape), str(t.dtype))).encode())
        if not t.numel():
            continue
        u = t.view(torch.uint8).flatten()
        try:
            h.update(u.numpy().tobytes())
        except (RuntimeError, ImportError, TypeError):   # no numpy: an exact-enough checksum
            w = u.to(torch.int64)
            idx = torch.arange(w.numel(), dtype=torch.int64)
            mult = (idx * 2654435761) % 2147483647 + 1
            h.update(repr((int(w.sum()), int((w * mult).sum()), int((w * (idx + 1)).sum()))).encode())
    return h.hexdigest()


def self_check(g: Gates) -> None:
    pairs = numerics.probe_pairs()

    def as_bf16(patterns):   # 16-bit patterns -> int16 values (two's complement) -> bf16 view
        return torch.tensor([p - 0x10000 if p >= 0x8000 else p for p in patterns],
                            dtype=torch.int16).view(torch.bfloat16)

    a = as_bf16([p[0] for p in pairs])
    b = as_bf16([p[1] for p in pairs])
    got = ulp_t(a, b).tolist()
    want = [numerics.ulp_distance(x, y) for x, y in pairs]
    want = [-1 if w is None else w for w in want]
    bad = [(hex(p[0]), hex(p[1]), x, y) for p, x, y in zip(pairs, got, want) if x != y]
    g.demand("self-check: torch ulp distance == numerics.ulp_distance (probe patterns)", not bad,
             f"{len(pairs)} pairs" if not bad else f"mismatches (a, b, torch, python): {bad[:5]}")


# ---- FP8 capability -------------------------------------------------------------------------------


def probe_fp8(ctx, ms: list[int]) -> tuple[str | None, str]:
    """per_group if torch._scaled_mm takes 1x128 activation / 128x128 weight scales on this GPU for
    every M the run uses (numerically checked against the dequantized product), else per_token,
    else None. Returns (mode, detail)."""
    if not hasattr(torch, "_scaled_mm"):
        return None, f"torch {torch.__version__} has no torch._scaled_mm"
    cap = torch.cuda.get_device_capability(ctx.device)
    if cap < (8, 9):
        return None, f"compute capability {cap} < 8.9: no FP8 GEMM"
    K, N = ctx.dims.hidden, 256
    gen = torch.Generator(device=ctx.device).manual_seed(99)
    w = (torch.randn(N, K, generator=gen, device=ctx.device) / K ** 0.5).to(torch.bfloat16)
    why = {}
    for mode in ("per_group", "per_token"):
        try:
            w8, ws = model.quant_weight(w, mode)
            if mode == "per_group":
                w_deq = (w8.float().view(N // 128, 128, K // 128, 128) * ws[:, None, :, None]).view(N, K)
            else:
                w_deq = w8.float() * ws[:, None]
            for m in sorted(set(ms)):
                x = torch.randn(m, K, generator=gen, device=ctx.device).to(torch.bfloat16)
                q, s = model.torch_quant(x, mode)
                cases = [("row-major scales", s)]
                if mode == "per_group":   # the arfusion MN-major buffer [K/128, round_up(M, 4)]
                    tp = (m + 3) // 4 * 4
                    buf = torch.zeros(K // 128, tp, dtype=torch.float32, device=ctx.device)
                    buf[:, :m] = s.t()
                    cases.append(("MN-major buffer view", buf.t()[:m]))
                    x_deq = (q.float().view(m, K // 128, 128) * s[:, :, None]).view(m, K)
                else:
                    x_deq = q.float() * s
                ref = x_deq @ w_deq.t()
                for what, sv in cases:
                    try:
                        out = model.fp8_gemm(q, sv, w8, ws, mode).float()
                    except Exception as e:  # noqa: BLE001 - re-raised with the size that failed
                        raise RuntimeError(f"M={m}, {what}: {type(e).__name__}: "
                                           f"{str(e).splitlines()[0][:240]}") from e
                    rel = float((out - ref).norm() / ref.norm().clamp_min(1e-30))
                    if not rel < 1e-2:
                        raise AssertionError(f"M={m}, {what}: relative error {rel:.3g} vs the "
                                             "dequantized product")
            torch.cuda.synchronize()
            detail = ("torch._scaled_mm, activations 1x128 groups (MN-major scales), weights "
                      "128x128 blocks" if mode == "per_group" else
                      "torch._scaled_mm row-wise: one scale per token and per output channel"
                      + (f" (per-group unavailable: {why.get('per_group')})" if why else ""))
            return mode, detail + f"; checked for M in {sorted(set(ms))}"
        except Exception as e:  # noqa: BLE001 - the reason is reported
            why[mode] = f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"
    return None, "; ".join(f"{k}: {v}" for k, v in why.items())


# ---- per-site contract checks -------------------------------------------------------------------


def _gather_cpu(ctx, t: torch.Tensor) -> list[torch.Tensor]:
    x = t.detach().contiguous().cpu()
    out = [torch.empty_like(x) for _ in range(ctx.world)]
    dist.all_gather(out, x, group=ctx.cpu_group)
    return out


def rank_order_sum(xs: list[torch.Tensor]) -> torch.Tensor:
    """arfusion.h: acc = 0; acc += x_r in rank order, in fp32; one rounding; never -0."""
    acc = torch.zeros(xs[0].shape, dtype=torch.float32)
    for x in xs:
        acc = acc + x.float()
    return (acc + 0.0).to(torch.bfloat16)


def baseline_all_reduce(ctx, x: torch.Tensor) -> torch.Tensor:
    y = x.clone()
    if ctx.nccl:
        dist.all_reduce(y)
    else:
        c = y.cpu()
        dist.all_reduce(c, group=ctx.cpu_group)
        y.copy_(c)
    return y


def _check_site(ctx, g: Gates, name, x, residual, w, fp8_mode):
    eps, comm = ctx.dims.eps, ctx.comm_name
    ops = torch.ops.arfusion
    ref = rank_order_sum(_gather_cpu(ctx, x))
    ar = ops.all_reduce(x, comm)
    base = baseline_all_reduce(ctx, x)
    n_f, r_f = ops.fused_add_rms_norm_out(x, residual, w, eps, comm, False, "before_weight", "auto")
    n_u, r_u = ops.fused_add_rms_norm_out(x, residual, w, eps, comm, False, "before_weight",
                                          "unfused")
    torch.cuda.synchronize()
    ctx.comm.check()
    ar_c = ar.cpu()
    ok = bits_equal(ar_c, ref)
    g.demand(f"site {name}: arfusion all-reduce == fp32 rank-order sum (bitwise)", ok,
             "" if ok else f"ulp {ulp_summary_t(ulp_t(ar_c, ref))}")
    r_t = ar if residual is None else ar + residual
    n_t = model.llama_norm(r_t, w, eps)
    ok = bits_equal(r_f, r_t)
    g.demand(f"site {name}: fused residual_out == torch bf16 add of the arfusion all-reduce "
             "(bitwise)", ok, "" if ok else f"ulp {ulp_summary_t(ulp_t(r_f, r_t))}")
    ok = bits_equal(n_f, n_u) and bits_equal(r_f, r_u)
    g.demand(f"site {name}: fused == arfusion unfused path (norm and residual, bitwise)", ok)
    un = ulp_summary_t(ulp_t(n_f, n_t))
    g.demand(f"site {name}: fused norm within {SITE_NORM_MAX_ULP} ulp of torch LlamaRMSNorm",
             un["max_ulp"] <= SITE_NORM_MAX_ULP and un["nan_pairs"] == 0, f"{un}")
    ub = ulp_summary_t(ulp_t(base.cpu(), ref))
    site = {"site": name, "tokens": int(x.shape[0]),
            "baseline_ar": "nccl" if ctx.nccl else "gloo_cpu_copy",
            "baseline_ar_max_ulp": ub["max_ulp"],
            "baseline_ar_fraction_differing": 1.0 - ub["fraction_equal"],
            "baseline_ar_bitwise": ub["hist"]["0"] == ub["elements"],
            "norm_max_ulp": un["max_ulp"], "norm_fraction_equal": un["fraction_equal"],
            "norm_hist": un["hist"]}
    if fp8_mode is not None:
        _check_site_fp8(g, site, name, x, residual, w, eps, comm, n_f, r_f, fp8_mode)
    g.reported["sites"].append(site)
    return n_f, r_f


def _check_site_fp8(g: Gates, site, name, x, residual, w, eps, comm, n_f, r_f, fp8_mode):
    """The fused quantizer against torch's quantization of the fused norm, per scale rule: the
    default "divide" (IEEE amax / 448) against torch on the CPU, model.SCALE_RULE
    ("times_reciprocal", amax * fp32(1/448)) against torch on the GPU; both bitwise. Reported: how
    many of the divide rule's scales differ from torch's on the GPU (what fusing with the default
    rule would change)."""
    quant = "fp8_per_group" if fp8_mode == "per_group" else "fp8_per_token"
    torch_on = {"divide": model.torch_quant(n_f.cpu(), fp8_mode),
                model.SCALE_RULE: tuple(t.cpu() for t in model.torch_quant(n_f, fp8_mode))}
    where = {"divide": "CPU (IEEE division)", model.SCALE_RULE: "GPU (amax * fp32(1/448))"}
    s_cpu, s_gpu = torch_on["divide"][1], torch_on[model.SCALE_RULE][1]
    site["fp8_scales_differing_from_torch_gpu"] = float(
        (s_gpu.view(torch.int32) != s_cpu.view(torch.int32)).float().mean())
    layouts = ["row_major", "mn_major"] if fp8_mode == "per_group" else ["row_major"]
    for rule, (q_t, s_t) in torch_on.items():
        for layout in layouts:
            q, s, r_q, _ = torch.ops.arfusion.fused_add_rms_norm_quant(
                x, residual, w, None, eps, comm, quant, layout, "fp32", False, False,
                "before_weight", "auto", 0, rule)
            torch.cuda.synchronize()
            q, s_log = q.cpu(), (s.t()[:x.shape[0]] if layout == "mn_major" else s).cpu()
            scales_ok = bits_equal(s_log.contiguous(), s_t.contiguous())
            ok = bits_equal(q, q_t) and scales_ok and bits_equal(r_q, r_f)
            detail = "" if ok else (
                f"q differs in {int((q.view(torch.uint8) != q_t.view(torch.uint8)).sum())} of "
                f"{q.numel()} bytes; scales equal: {scales_ok}")
            g.demand(f"site {name}: fused {quant} ({layout}, scale_rule {rule}) == torch's "
                     f"quantization on the fused norm, torch on the {where[rule]} (bitwise)",
                     ok, detail)


def site_checks(ctx, g: Gates, fp8_mode) -> None:
    """The first layer's three sites (embedding, attention, MLP) on the prompt's activations."""
    W, dims = ctx.W, ctx.dims
    S = model.make_static(dims, ctx.world, ctx.rank, comm_name=ctx.comm_name, ar="fused",
                          algorithm="auto", fp8=None, phase="prefill")
    P = ctx.opts.prompt_tokens
    ids = ctx.prompt_ids
    positions = torch.arange(P, device=ctx.device)
    kc = torch.zeros(1, S.nkv, ctx.opts.context, S.head_dim, dtype=torch.bfloat16, device=ctx.device)
    vc = torch.zeros_like(kc)
    with torch.no_grad():
        e = model.embed_partial(ids, W.emb, S)
        h1, r1 = _check_site(ctx, g, "embed", e, None, W.norm1, fp8_mode)
        o = model.attn_partial(h1, None, W.qkv, W.o, None, None, kc, vc, ctx.cos_tab[:P],
                               ctx.sin_tab[:P], positions, None, S)
        h2, r2 = _check_site(ctx, g, "layer0.attention", o, r1, W.norm2, fp8_mode)
        d = model.mlp_partial(h2, None, W.gu, W.down, None, None, S)
        _check_site(ctx, g, "layer0.mlp", d, r2, W.norm1, fp8_mode)


# ---- end-to-end sequences -------------------------------------------------------------------------


@dataclasses.dataclass
class Record:
    name: str
    prefill_h: torch.Tensor   # [P, H] bf16, CPU
    decode_h: torch.Tensor    # [steps, H]
    logits: torch.Tensor      # [steps + 1, V] bf16 (prefill's last token, then every step)
    preds: list
    digest: str
    seconds: float


def _runner(ctx, v, phase):
    return model.Runner(variant=v, phase=phase, weights=ctx.W, dims=ctx.dims, tp=ctx.world,
                        rank=ctx.rank, comm_name=ctx.comm_name,
                        ar_mode=model.ar_mode_of(v, ctx.nccl), fp8_mode=ctx.fp8_mode,
                        layers=ctx.dims.layers)


def forced_algorithm_refusal(ctx, v) -> str | None:
    """Why the planner refuses a forced algorithm for a call of the sequence (None: it runs)."""
    if v.algorithm == "auto":
        return None
    import arfusion

    for t in sorted({ctx.opts.prompt_tokens, 1}):
        try:
            ctx.comm.plan(t, ctx.dims.hidden, algorithm=v.algorithm, norm_rounding="before_weight")
        except arfusion.ArfError as e:
            return f"T={t}: {e.status}: {e.message}"
    return None


def run_sequence(ctx, v, ref_tokens):
    """Prefill the prompt, then decode; feeds ref_tokens (teacher forcing) or, without them, rank
    0's greedy token. Returns (Record, runners)."""
    t0 = time.time()
    dims, opts, dev = ctx.dims, ctx.opts, ctx.device
    P, steps, C = opts.prompt_tokens, opts.gate_steps, opts.context
    nkv = dims.kv_heads // ctx.world
    caches = [(torch.zeros(1, nkv, C, dims.head_dim, dtype=torch.bfloat16, device=dev),
               torch.zeros(1, nkv, C, dims.head_dim, dtype=torch.bfloat16, device=dev))
              for _ in range(dims.layers)]
    rp, rd = _runner(ctx, v, "prefill"), _runner(ctx, v, "decode")
    preds, dec_h, logit_rows = [], [], []

    def next_token(pred, i):
        if ref_tokens is not None:
            return ref_tokens[i]
        obj = [pred]
        dist.broadcast_object_list(obj, src=0, group=ctx.cpu_group)
        return obj[0]

    with torch.no_grad():
        h = rp.forward(ctx.prompt_ids, torch.arange(P, device=dev), caches, ctx.cos_tab[:P],
                       ctx.sin_tab[:P], None)
        lg = F.linear(h[-1:], ctx.W.lm)
        prefill_h = h.cpu()
        preds.append(int(lg[0].argmax()))
        logit_rows.append(lg[0].cpu())
        tok = next_token(preds[-1], 0)
        for t in range(steps):
            pos = torch.tensor([P + t], device=dev)
            mask = (ctx.ctx_arange <= pos).view(1, 1, 1, C)
            h = rd.forward(torch.tensor([tok], device=dev), pos, caches,
                           ctx.cos_tab.index_select(0, pos), ctx.sin_tab.index_select(0, pos), mask)
            lg = F.linear(h, ctx.W.lm)
            preds.append(int(lg[0].argmax()))
            dec_h.append(h[0].cpu())
            logit_rows.append(lg[0].cpu())
            tok = next_token(preds[-1], t + 1)
        torch.cuda.synchronize()
    ctx.comm.check()
    decode_h = torch.stack(dec_h) if dec_h else torch.empty(0, dims.hidden, dtype=torch.bfloat16)
    logits = torch.stack(logit_rows)
    rec = Record(v.name, prefill_h, decode_h, logits, preds,
                 digest(prefill_h, decode_h, logits, preds), time.time() - t0)
    return rec, (rp, rd)


def compare(a: Record, b: Record) -> dict:
    ha = torch.cat([a.prefill_h.flatten(), a.decode_h.flatten()])
    hb = torch.cat([b.prefill_h.flatten(), b.decode_h.flatten()])
    u = ulp_summary_t(ulp_t(ha, hb))
    la, lb = a.logits.double(), b.logits.double()
    cos = ((la * lb).sum(-1) / (la.norm(dim=-1) * lb.norm(dim=-1))).tolist()
    cos = [c for c in cos if c == c]
    return {"variant": b.name, "against": a.name,
            "bitwise": bits_equal(ha, hb) and bits_equal(a.logits, b.logits) and a.preds == b.preds,
            "hidden_ulp": u,
            "logits_cosine": {"min": min(cos) if cos else None,
                              "mean": sum(cos) / len(cos) if cos else None},
            "agreement": numerics.agreement(b.preds, a.preds)}


# ---- the whole gate stage -------------------------------------------------------------------------


def _agree(ctx, ok: bool, detail: str):
    """Every rank's (ok, detail): all must be ok to continue with this variant."""
    got = ctx.gather((bool(ok), detail))
    bad = [(r, d) for r, (o, d) in enumerate(got) if not o]
    return not bad, bad


def run_gates(ctx) -> tuple[Gates, dict, dict]:
    """Returns (gates, records by variant name, pass summaries by variant)."""
    g = Gates()
    self_check(g)
    fp8_mode = ctx.fp8_mode if any(config.variant(n).fp8 for n in ctx.plan.gate_variants) else None
    try:
        site_checks(ctx, g, fp8_mode)
    except Exception as e:  # noqa: BLE001
        g.demand("per-site checks ran", False, f"{type(e).__name__}: {e}\n"
                 f"{traceback.format_exc(limit=4)}")
    # the reference candidates first: if (a) fails, (c) becomes the reference before anything is
    # teacher-forced on tokens that do not exist (config.gate_order)
    order = config.gate_order(ctx.plan.gate_variants)
    ref_name = None
    records: dict[str, Record] = {}
    passes: dict[str, dict] = {}
    ref_tokens = None
    status = g.reported["variants"]
    for name in order:
        v = config.variant(name)
        if v.fp8 and ctx.fp8_mode is None:
            status[name] = {"status": "skipped", "detail": f"no FP8 GEMM: {ctx.fp8_detail}"}
            continue
        refusal = forced_algorithm_refusal(ctx, v)
        agreed, bad = _agree(ctx, refusal is None, refusal or "")
        if not agreed:
            status[name] = {"status": "refused", "detail": "; ".join(f"rank {r}: {d}" for r, d in bad)}
            continue
        is_ref = ref_tokens is None
        ctx.log(f"gates: variant {name}" + (" (reference, free-running greedy)" if is_ref else ""))
        if v.compiled:
            torch._dynamo.reset()
        err = ""
        rec = runners = None
        try:
            rec, runners = run_sequence(ctx, v, None if is_ref else ref_tokens)
        except Exception as e:  # noqa: BLE001 - every rank reports, the run goes on
            err = f"{type(e).__name__}: {str(e)[:2000]}\n{traceback.format_exc(limit=6)}"
        agreed, bad = _agree(ctx, not err, err)
        if not agreed:
            detail = "; ".join(f"rank {r}: {d}" for r, d in bad)
            status[name] = {"status": "error", "detail": detail}
            g.demand(f"variant {name} ran", False, detail)
            continue
        status[name] = {"status": "ok", "seconds": round(rec.seconds, 2),
                        "ar_mode": model.ar_mode_of(v, ctx.nccl)}
        records[name] = rec
        if is_ref:
            ref_tokens = list(rec.preds)
            ref_name = name
            g.reported["reference"] = name
            g.reported["reference_tokens"] = ref_tokens
        if v.fusion_pass:
            checks = [model.pass_check(r) for r in runners]
            ok = all(c[0] for c in checks)
            g.demand(f"pass on {name}: every all-reduce of every graph replaced "
                     "(before_weight" + (", FP8 tails" if v.fp8 else "") + ")", ok,
                     " | ".join(c[1] for c in checks))
            passes[name] = {r.S.phase: model.pass_summaries(r) for r in runners}
        digests = ctx.gather(rec.digest)
        same = len(set(digests)) == 1
        g.reported["cross_rank"][name] = same
        if v.ar != "c10d" or v.fusion_pass:
            g.demand(f"{name}: outputs bitwise identical on every rank", same,
                     "" if same else f"digests {digests}")
        del runners
    _comparisons(ctx, g, records, ref_name)
    return g, records, passes


def _comparisons(ctx, g: Gates, records: dict, ref_name: str | None) -> None:
    comps = g.reported["comparisons"]
    for name, rec in records.items():
        if name.startswith("c@") and "c" in records:
            c = compare(records["c"], rec)
            comps.append(c)
            g.demand(f"{name} == c (bitwise: every algorithm gives the contract's bits)", c["bitwise"],
                     _brief(c))
    for v, base, why in DEMANDED_BITWISE:
        if v in records and base in records:
            c = compare(records[base], records[v])
            comps.append(c)
            g.demand(f"{v} == {base} (bitwise: {why})", c["bitwise"], _brief(c))
    for v, base in REPORTED_PAIRS:
        if v in records and base in records:
            comps.append(compare(records[base], records[v]))
    done = {(c["variant"], c["against"]) for c in comps}
    if ref_name:
        for name, rec in records.items():
            if name == ref_name:
                continue
            if (name, ref_name) not in done:
                comps.append(compare(records[ref_name], rec))
    # sanity bounds (not a contract)
    by_pair = {(c["variant"], c["against"]): c for c in comps}
    for name in records:
        v = config.variant(name)
        base = "e_a" if v.fp8 else ref_name
        bound = ctx.opts.min_cosine_fp8 if v.fp8 else ctx.opts.min_cosine
        if base is None or base == name or (name, base) not in by_pair:
            continue
        mean = by_pair[(name, base)]["logits_cosine"]["mean"]
        g.demand(f"sanity (not a contract): mean logits cosine {name} vs {base} >= {bound}",
                 mean is not None and mean >= bound, f"mean {mean}")


def _brief(c: dict) -> str:
    u, cs, ag = c["hidden_ulp"], c["logits_cosine"], c["agreement"]
    return (f"hidden max ulp {u['max_ulp']}, equal {u['fraction_equal']}; logits cos min "
            f"{cs['min']}; agreement {ag['agree']}/{ag['predictions']}")

"""One rank's check of one Hugging Face model (python/tests/torch_cpu/hf_models.py) with the compile
pass: the rank's tensor-parallel shard, run eager, compiled without the pass and compiled with it
on token batches of several sizes, compared; what the pass fused and left, against the documented
table (docs/compile_pass_models.md). Device-agnostic: hf_models_gpu.py runs it on every rank of a
GPU job with a real communicator, and on the CPU (--cpu-dry-run) with the CPU tests' fake process
group and a CommunicatorFacts.

Tolerances, relative to the largest |logit| of the reference (bf16 logits of a 2-layer model):
  TOL_COMPILED  with the pass against the same model compiled without it. The fused op follows the
                unfused rounding contract (docs/architecture.md, Numerics): the graph's bf16
                roundings of the sum, the residual and the norm. Inductor's own kernels for the same
                nodes keep fp32 between them where the graph rounds (Inductor's default, without
                emulate_precision_casts) and sum the squares in another order: some norm outputs
                differ by a bf16 unit (2^-8 relative). Two layers carry those units into the logits
                (rounding all five norms of Llama in the other order moves them by about 1%): 2%,
                about five bf16 units of the largest logit, passes them, while a wiring fault (a
                dropped residual, another weight, a wrong shard or a missing rank's sum) moves
                logits by a large fraction of the largest.
  TOL_EAGER     with the pass against the eager model: Inductor also keeps fp32 inside its fused
                kernels where eager rounds every op to bf16, a few more roundings per layer: 5%,
                the CPU tests' model tolerance (python/tests/torch_cpu/test_models.py).
The MoE models route every token to all their experts (num_experts_per_tok = num_experts): a
top-k choice is discontinuous, and a one-unit difference in a router's input could pick another
expert for a token and fail a correct run; the routing weights stay continuous, the graphs keep
their top-k, and the pass sees the same sites (the documented table is compared).
Not bit for bit: a rounding fault (a bf16 unit in some elements) is within these tolerances; the
fused ops' bits are checked op by op (scenarios.py, scenarios_compiled.py), and a rounding that
differs between ranks is caught here by the cross-rank comparison, bit for bit (the digests).
"""

from __future__ import annotations

import hashlib
import os
import re
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TORCH_CPU = os.path.abspath(os.path.join(HERE, "..", "torch_cpu"))
REPO = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
if TORCH_CPU not in sys.path:
    sys.path.append(TORCH_CPU)  # after this directory: its harness.py is not the GPU one

import torch  # noqa: E402

import hf_models  # noqa: E402

TOKENS = (1, 3, 17, 64)      # decode, and prefills; >= 2 share one graph (a dynamic token count)
MAX_TOKENS = max(TOKENS)     # the dynamic dimension's bound, and the communicator's max_tokens
HIDDEN = 256                 # hf_models' configs
TOL_COMPILED = 0.02
TOL_EAGER = 0.05

# Reasons for leaving an all-reduce unfused that are limitations of what the fused op computes
# (docs/compile_pass_models.md says why), not faults of the pass.
LIMITATIONS = ("computed after the all-reduce", "no RMSNorm follows the all-reduce")


def token_batch(name: str, tokens: int, seed: int = 0):
    """[1, tokens] token ids, the same on every rank (the replicated input), other per model and
    token count."""
    g = torch.Generator().manual_seed(seed * 1000003 + sum(map(ord, name)) * 101 + tokens)
    return torch.randint(3, 128, (1, tokens), generator=g)


def mark_tokens(ids) -> None:
    """A token count of 2 or more is dynamic up to MAX_TOKENS (the pass needs the bound); 1 gets a
    graph of its own (Dynamo specializes sizes 0 and 1)."""
    if ids.shape[1] >= 2:
        torch._dynamo.mark_dynamic(ids, 1, min=2, max=MAX_TOKENS)


def digest(t) -> str:
    t = t.detach().contiguous().cpu()
    h = hashlib.sha256(str((tuple(t.shape), str(t.dtype))).encode())
    if t.numel():
        h.update(t.view(torch.uint8).numpy().tobytes())
    return h.hexdigest()[:16]


def rel_err(got, want) -> float:
    """max |got - want| over max |want| (inf where either has a non-finite value)."""
    got, want = got.float(), want.float()
    if not (torch.isfinite(got).all() and torch.isfinite(want).all()):
        return float("inf")
    scale = float(want.abs().max())
    diff = float((got - want).abs().max())
    return diff / scale if scale > 0 else (0.0 if diff == 0 else float("inf"))


def bits_differ(got, want) -> float:
    """The fraction of elements whose bits differ."""
    a = got.contiguous().view(torch.int16) if got.dtype == torch.bfloat16 else got
    b = want.contiguous().view(torch.int16) if want.dtype == torch.bfloat16 else want
    return float((a != b).float().mean())


# ---- negative controls: a fault put into the graph after the pass -------------------------------


def mutant_hook(kind: str, rank: int):
    """A pass to chain after AllReduceFusionPass (its `then`) that breaks the fused ops it finds:
    "drop_residual": every fused op with a residual loses it (the residual stream is cut: the
          outputs must leave TOL_COMPILED);
    "rank_rounding": on rank 1 only, the norm rounds the other way (once <-> before_weight): a
          one-unit difference in some norm elements on one rank, which only the cross-rank bitwise
          comparison must catch."""
    from arfusion.torch import ops

    target = ops.op("fused_add_rms_norm_out")
    changed = []

    def hook(graph):
        for node in graph.nodes:
            if node.op != "call_function" or node.target is not target:
                continue
            args = list(node.args)
            if kind == "drop_residual" and args[1] is not None:
                args[1] = None
            elif kind == "rank_rounding" and rank == 1:
                args[6] = "once" if args[6] == "before_weight" else "before_weight"
            elif kind not in ("drop_residual", "rank_rounding"):
                raise ValueError(f"unknown mutant {kind!r}")
            else:
                continue
            node.args = tuple(args)
            changed.append(node.name)

    hook.changed = changed
    return hook


# ---- one model on one rank ------------------------------------------------------------------------


def config_overrides(name: str) -> dict:
    """Every token routed to every expert (the module docstring says why)."""
    extra = hf_models.MODELS[name][1]
    if not extra.get("moe"):
        return {}
    experts = extra.get("num_experts", extra.get("num_local_experts"))
    return {"num_experts_per_tok": experts}


def documented_row(name: str) -> str | None:
    for line in hf_models.documented_table(REPO).splitlines():
        if line.startswith(f"| {name} |"):
            return line
    return None


def canonical_row(row: str) -> str:
    """A table row with every reason's list of readers ("read by a, b, c") sorted: their order is
    the graph's, which a dynamic token count changes (its size nodes come first)."""
    def sort_readers(m):
        return m.group(1) + ", ".join(sorted(m.group(2).split(", "))) + m.group(3)

    return re.sub(r"(read by )(.*?)( \||<br>)", sort_readers, row)


def _stats_dict(stats) -> dict:
    return {"graphs": stats.graphs, "all_reduces": stats.all_reduces, "replaced": stats.replaced,
            "kinds": dict(stats.kinds), "left": [why for _, why in stats.rejected],
            "notes": list(stats.notes)}


def _run(fn, batches):
    outs = {}
    with torch.no_grad():
        for t, ids in batches:
            outs[t] = fn(ids)
    return outs


def _sync(device):
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def check_model(name: str, *, rank: int, world: int, device, comm, compile_fn,
                tokens=TOKENS, variants=(("pass", None),), seed: int = 0,
                whole_model_reference: bool = True) -> dict:
    """Runs model `name` as rank `rank` of `world` on `device`; `comm` is the pass's communicator
    (a Communicator or CommunicatorFacts), compile_fn(fn, pass or None) compiles fn (Dynamo's
    caches reset). variants: (label, mutant kind or None) of the compiled-with-pass runs.
    whole_model_reference: compare the eager logits with the unsharded model's (needs a real
    all-reduce: the ranks' partial sums add up to the whole model's only through it). Returns
    the result: per variant the pass's stats and per token count the errors and digests; every
    failed expectation of this rank in "problems" (the cross-rank comparison is the caller's)."""
    import arfusion.torch as aft

    res = {"model": name, "rank": rank, "world": world, "tokens": list(tokens), "problems": [],
           "seconds": {}, "variants": {}}
    problems = res["problems"]
    t0 = time.time()
    model = hf_models.build(name, seed=seed, rank=rank, world=world, **config_overrides(name))
    model = model.to(device)
    fn = hf_models.forward_fn(model)
    batches = [(t, token_batch(name, t, seed).to(device)) for t in tokens]
    for _, ids in batches:
        mark_tokens(ids)
    res["seconds"]["build"] = round(time.time() - t0, 2)

    t0 = time.time()
    eager = _run(fn, batches)
    _sync(device)
    res["seconds"]["eager"] = round(time.time() - t0, 2)
    if whole_model_reference:
        # the shards fit together: the ranks' eager model computes the whole model's logits
        whole = hf_models.build(name, seed=seed, world=1, **config_overrides(name)).to(device)
        ref = _run(hf_models.forward_fn(whole), batches)
        res["err_eager_vs_whole_model"] = {t: rel_err(eager[t], ref[t]) for t in eager}
        for t, e in res["err_eager_vs_whole_model"].items():
            if e > TOL_EAGER:
                problems.append(f"T={t}: the tensor-parallel eager model is {e:.4g} of the largest "
                                f"logit from the whole model (tolerance {TOL_EAGER}): the shards "
                                "do not fit together")
        del whole, ref

    t0 = time.time()
    nopass = _run(compile_fn(fn, None), batches)
    _sync(device)
    res["seconds"]["compiled_without_pass"] = round(time.time() - t0, 2)
    res["digests"] = {"eager": {t: digest(o) for t, o in eager.items()},
                      "compiled_without_pass": {t: digest(o) for t, o in nopass.items()}}
    res["err_without_pass_vs_eager"] = {t: rel_err(nopass[t], eager[t]) for t in eager}

    want_row = documented_row(name)
    for label, mutant in variants:
        t0 = time.time()
        hook = mutant_hook(mutant, rank) if mutant else None
        p = aft.AllReduceFusionPass(comm, then=hook)
        got = _run(compile_fn(fn, p), batches)
        _sync(device)
        v = {"mutant": mutant, "stats": _stats_dict(p.stats),
             "per_graph": [_stats_dict(g) for g in p.history],
             "rows": [hf_models.row(name, g) for g in p.history], "documented_row": want_row,
             "runs": {}, "problems": [], "seconds": round(time.time() - t0, 2)}
        res["variants"][label] = v
        vp = v["problems"]
        if hook is not None:
            v["mutated_nodes"] = list(hook.changed)
            if not hook.changed and (mutant != "rank_rounding" or rank == 1):
                vp.append(f"mutant {mutant}: no fused op to change (the control would be vacuous)")
        if not p.history:
            vp.append("the pass never ran (no graph compiled through it)")
        for g in p.history:
            left = [why for _, why in g.rejected]
            for why in left:
                if not any(lim in why for lim in LIMITATIONS):
                    vp.append(f"an all-reduce left unfused: {why}")
            if g.all_reduces == 0:
                vp.append("a graph without any all-reduce")
        for i, row in enumerate(v["rows"]):
            if want_row is None or canonical_row(row) != canonical_row(want_row):
                import transformers

                vp.append(f"graph {i}: the pass's outcome differs from {hf_models.DOC} "
                          f"(transformers {transformers.__version__}): got {row!r}, documented "
                          f"{want_row!r}")
        for t, out in got.items():
            run = {"err_vs_without_pass": rel_err(out, nopass[t]),
                   "err_vs_eager": rel_err(out, eager[t]),
                   "bits_differ_vs_without_pass": bits_differ(out, nopass[t]),
                   "digest": digest(out)}
            v["runs"][t] = run
            if run["err_vs_without_pass"] > TOL_COMPILED:
                vp.append(f"T={t}: {run['err_vs_without_pass']:.4g} of the largest logit from the "
                          f"model compiled without the pass (tolerance {TOL_COMPILED})")
            if run["err_vs_eager"] > TOL_EAGER:
                vp.append(f"T={t}: {run['err_vs_eager']:.4g} of the largest logit from the eager "
                          f"model (tolerance {TOL_EAGER})")
        problems.extend(f"{label}: {x}" for x in vp)
    for t, e in res["err_without_pass_vs_eager"].items():
        if e > TOL_EAGER:  # the reference itself is off: no comparison above means anything
            problems.append(f"T={t}: compiled without the pass is {e:.4g} of the largest logit "
                            f"from eager (tolerance {TOL_EAGER})")
    return res


def cross_rank(results) -> list[str]:
    """Problems where the ranks' outputs differ in any bit (results: one check_model result per
    rank, of the same model)."""
    out = []
    if len(results) < 2:
        return out
    first = results[0]
    for other in results[1:]:
        for kind in ("eager", "compiled_without_pass"):
            for t, d in first["digests"][kind].items():
                if other["digests"][kind].get(t) != d:
                    out.append(f"{kind}: T={t}: rank {first['rank']} and rank {other['rank']} "
                               "differ")
        for label, v in first["variants"].items():
            ov = other["variants"].get(label)
            if ov is None:
                out.append(f"{label}: rank {other['rank']} has no result")
                continue
            for t, run in v["runs"].items():
                if ov["runs"].get(t, {}).get("digest") != run["digest"]:
                    out.append(f"{label}: T={t}: rank {first['rank']} and rank {other['rank']} "
                               "differ")
    return out

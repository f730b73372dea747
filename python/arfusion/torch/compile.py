"""torch.compile pass: all-reduce -> residual add -> RMSNorm (-> FP8 quantization) becomes one
arfusion op.

Install it as Inductor's post-grad custom pass (a CustomGraphPass with a uuid, so the FX graph
cache keys on it)::

    p = AllReduceFusionPass(comm)            # comm: an arfusion.torch.Communicator (or its name)
    model = torch.compile(model, options={"post_grad_custom_post_pass": p})
    # or: torch.compile(model, options=compile_options(comm))
    ...
    print(p.stats.summary())                 # matched / replaced / why not, per graph

What it looks for, starting from every all-reduce node of the post-grad graph (a walk over users,
not one fixed pattern, so small variations still match):

  all-reduce  torch.ops._c10d_functional.all_reduce(x, "sum", group) + wait_tensor (what Dynamo
              makes of torch.distributed.all_reduce and funcol.all_reduce), torch.ops.vllm.
              all_reduce(x, group) when vLLM is loaded, torch.ops.arfusion.all_reduce(x, comm)
  residual    add(ar, residual) / add(residual, ar) in the activation dtype; or none (first layer:
              the norm reads the all-reduce itself; the fused op's residual_out is the all-reduce)
  RMSNorm     aten._fused_rms_norm / aten.rms_norm, or the decomposed fp32 chain
              convert(f32) -> pow 2 | mul x*x -> mean(-1, keepdim) -> add eps -> rsqrt -> mul, then
                * weight in fp32 -> convert      (F.rms_norm, nn.RMSNorm, fp32 weights: norm_rounding
                                                  "once")
                * (1 + weight.float()) -> convert  (Gemma: gamma_plus_one, "once")
                convert -> * weight               (Hugging Face LlamaRMSNorm `weight * x.to(dtype)`:
                                                  "before_weight")
                convert (no weight)               (a ones weight, "once")
  FP8 tails   after the norm, in plain torch: static per-tensor (x.float() / scale).clamp(-448, 448)
              .to(float8_e4m3fn); per-token and per-group 1x128 with scale = clamp_min(amax / 448,
              1 / (448 * 512)) (arfusion's contract exactly; anything else is left unfused and
              reported)

Eligibility is arfusion's own planner (arfPlanShape on the communicator: world size, dtype,
hidden, token count, quantization block rules), so every rank decides identically. A dynamic
token count must have a known upper bound (torch._dynamo.mark_dynamic(t, 0, max=...)), or pass
assume_max_tokens=True to promise that no call exceeds the communicator's max_tokens (a call that
does raises ArfError; it never computes wrong numbers).

Every decision is counted in ``pass.stats`` (FusionStats: graphs, all-reduces seen, matched,
replaced, per-kind counts, and the reason for every all-reduce left alone) and logged on the
"arfusion.compile" logger: a pass that silently applies nowhere is the failure mode this avoids.
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import logging
import operator
import os
import struct
from typing import Any

import torch
import torch.fx as fx
from torch._inductor.custom_graph_pass import CustomGraphPass

import arfusion as _arf
from arfusion._lib import ArfError, Pattern

from . import ops as _ops
from ._comm import ACTIVATION_DTYPES, Communicator, get_communicator, registered_communicators

log = logging.getLogger("arfusion.compile")

aten = torch.ops.aten
prims = torch.ops.prims

_F8_MAX = 448.0


def _f32(x: float) -> float:
    return struct.unpack("f", struct.pack("f", float(x)))[0]


_MIN_FP8_SCALE = _f32(1.0 / (448.0 * 512.0))


class _NoMatch(Exception):
    """Raised inside matchers with the reason the walk stopped."""


# ---- stats ---------------------------------------------------------------------------------------


@dataclasses.dataclass
class FusionStats:
    """What the pass did. ``rejected`` holds (all-reduce node, reason) for every all-reduce it saw
    and left alone; ``notes`` holds remarks on replaced patterns (e.g. a quantization tail that
    stayed unfused)."""

    graphs: int = 0
    all_reduces: int = 0
    matched: int = 0
    replaced: int = 0
    kinds: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    rejected: list = dataclasses.field(default_factory=list)
    notes: list = dataclasses.field(default_factory=list)

    def merge(self, other: "FusionStats") -> None:
        self.graphs += other.graphs
        self.all_reduces += other.all_reduces
        self.matched += other.matched
        self.replaced += other.replaced
        self.kinds.update(other.kinds)
        self.rejected.extend(other.rejected)
        self.notes.extend(other.notes)

    def summary(self) -> str:
        lines = [f"arfusion pass: {self.graphs} graph(s), {self.all_reduces} all-reduce(s), "
                 f"{self.matched} matched, {self.replaced} replaced"]
        for kind, n in sorted(self.kinds.items()):
            lines.append(f"  replaced {n} x {kind}")
        for node, reason in self.rejected:
            lines.append(f"  not replaced: {node}: {reason}")
        for note in self.notes:
            lines.append(f"  note: {note}")
        return "\n".join(lines)


# ---- graph helpers -------------------------------------------------------------------------------


def _val(n):
    return n.meta.get("val") if isinstance(n, fx.Node) else None


def _is_call(n, *targets) -> bool:
    return isinstance(n, fx.Node) and n.op == "call_function" and n.target in targets


def _op(namespace: str, name: str, overload: str = "default"):
    """torch.ops.<namespace>.<name>.<overload>, or None where it does not exist."""
    try:
        return getattr(getattr(getattr(torch.ops, namespace), name), overload)
    except (AttributeError, RuntimeError):
        return None


def _targets(*specs) -> tuple:
    return tuple(t for t in (_op(*s) for s in specs) if t is not None)


_CONVERT = _targets(("prims", "convert_element_type"), ("aten", "_to_copy"))
_VIEW = _targets(("aten", "view"), ("aten", "reshape"), ("aten", "_unsafe_view"))
_MUL = _targets(("aten", "mul", "Tensor"))
_ADD = _targets(("aten", "add", "Tensor"), ("aten", "add", "Scalar"))
_DIV = _targets(("aten", "div", "Tensor"), ("aten", "div", "Scalar"))
_POW = _targets(("aten", "pow", "Tensor_Scalar"))
_MEAN = _targets(("aten", "mean", "dim"))
_RSQRT = _targets(("aten", "rsqrt"))
_ABS = _targets(("aten", "abs"))
_AMAX = _targets(("aten", "amax"))
_CLAMP = _targets(("aten", "clamp"), ("aten", "clamp_min"), ("aten", "clamp_max"))
_FUSED_RMS = _targets(("aten", "_fused_rms_norm"), ("aten", "rms_norm"))
_C10D_AR = _targets(("_c10d_functional", "all_reduce"), ("c10d_functional", "all_reduce"))
_C10D_WAIT = _targets(("_c10d_functional", "wait_tensor"), ("c10d_functional", "wait_tensor"))


def _convert_dtype(n):
    """The target dtype when n is a pure dtype conversion, else None."""
    if not isinstance(n, fx.Node) or n.op != "call_function":
        return None
    if n.target == _op("prims", "convert_element_type"):
        return n.args[1] if len(n.args) > 1 else n.kwargs.get("dtype")
    if n.target == _op("aten", "_to_copy"):
        extra = {k for k in n.kwargs if k not in ("dtype", "layout", "device", "memory_format")}
        if extra or len(n.args) > 1:
            return None
        v, src = _val(n), _val(n.args[0])
        if v is None or src is None or v.device != src.device:
            return None
        return n.kwargs.get("dtype")
    return None


def _dtype(n):
    v = _val(n)
    return v.dtype if isinstance(v, torch.Tensor) else None


def _shape(n):
    v = _val(n)
    return tuple(v.shape) if isinstance(v, torch.Tensor) else None


def _users(n, pred) -> list:
    return [u for u in n.users if pred(u)]


def _other_operand(n, mine):
    """For a binary node n that uses `mine` as one operand: the other operand."""
    a, b = n.args[0], n.args[1]
    if a is mine and b is not mine:
        return b
    if b is mine and a is not mine:
        return a
    if a is mine and b is mine:
        return mine
    return None


def _is_last_dim(dims, ndim) -> bool:
    if not isinstance(dims, (list, tuple)) or len(dims) != 1:
        return False
    d = dims[0]
    return d == -1 or d == ndim - 1


def _scalar(x):
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else None


# ---- RMSNorm matching ----------------------------------------------------------------------------


@dataclasses.dataclass
class _Norm:
    out: fx.Node                  # the norm's result, activation dtype, shape of y
    weight: fx.Node | None        # gamma node (None: no weight -> ones)
    eps: float
    gamma_plus_one: bool
    rounding: str                 # "once" | "before_weight"
    form: str                     # for stats


def _match_fused_rms(y, hidden) -> _Norm:
    for u in y.users:
        if not _is_call(u, *_FUSED_RMS) or u.args[0] is not y:
            continue
        shape = u.args[1] if len(u.args) > 1 else u.kwargs.get("normalized_shape")
        weight = u.args[2] if len(u.args) > 2 else u.kwargs.get("weight")
        eps = u.args[3] if len(u.args) > 3 else u.kwargs.get("eps")
        if list(shape or []) != [hidden]:
            raise _NoMatch(f"{u.target}: normalized_shape {shape} is not [hidden={hidden}]")
        if eps is None:
            raise _NoMatch(f"{u.target}: eps=None (the default eps) is not matched; pass eps")
        if _scalar(eps) is None:
            raise _NoMatch(f"{u.target}: eps is not a constant")
        if weight is not None and _shape(weight) != (hidden,):
            raise _NoMatch(f"{u.target}: weight shape {_shape(weight)} is not [{hidden}]")
        if u.target == _op("aten", "rms_norm"):
            out = u
        else:  # _fused_rms_norm -> (out, rstd)
            outs = [g for g in u.users if _is_call(g, operator.getitem) and g.args[1] == 0]
            if len(outs) != 1:
                raise _NoMatch(f"{u.target}: output 0 not used exactly once")
            out = outs[0]
        if _dtype(out) != _dtype(y):
            raise _NoMatch(f"{u.target}: output dtype {_dtype(out)} is not the input's")
        return _Norm(out, weight, float(eps), False, "once", str(u.target))
    raise _NoMatch("no RMSNorm op")


def _match_weight_operand(g, hidden):
    """g multiplies the fp32 normalized value: returns (weight node, gamma_plus_one)."""
    if not isinstance(g, fx.Node) or _shape(g) != (hidden,):
        raise _NoMatch(f"the normalized value is multiplied by {g} (shape {_shape(g)}), not a "
                       f"[{hidden}] weight")
    if _is_call(g, *_ADD):
        # Gemma: (1 + w.float()) or (w.float() + 1) in fp32
        a, b = g.args[0], g.args[1]
        one, w = (a, b) if _scalar(a) is not None else (b, a)
        if _scalar(one) != 1.0 or g.kwargs.get("alpha", 1) != 1 or _dtype(g) != torch.float32:
            raise _NoMatch(f"weight operand {g} is an add that is not fp32 (1 + w)")
        if _convert_dtype(w) == torch.float32:
            w = w.args[0]
        if _dtype(w) not in (torch.float32, *ACTIVATION_DTYPES) or _shape(w) != (hidden,):
            raise _NoMatch(f"Gemma weight {w} has dtype {_dtype(w)}")
        return w, True
    if _convert_dtype(g) == torch.float32:
        w = g.args[0]
        if _dtype(w) in ACTIVATION_DTYPES and _shape(w) == (hidden,):
            return w, False
        raise _NoMatch(f"weight {w} converted to fp32 has dtype {_dtype(w)}")
    if _dtype(g) in (torch.float32, *ACTIVATION_DTYPES):
        return g, False
    raise _NoMatch(f"weight {g} has dtype {_dtype(g)}")


def _match_decomposed(y, hidden, act_dtype) -> _Norm:
    y32s = [u for u in y.users if _convert_dtype(u) == torch.float32]
    if not y32s:
        raise _NoMatch("the residual sum has no fp32 conversion (no RMSNorm found)")
    why = []
    for y32 in y32s:
        try:
            return _match_decomposed_from(y32, y32s, hidden, act_dtype)
        except _NoMatch as e:
            why.append(str(e))
    raise _NoMatch("; ".join(why))


def _match_decomposed_from(y32, y32s, hidden, act_dtype) -> _Norm:
    ndim = len(_shape(y32))
    sq = [u for u in y32.users
          if (_is_call(u, *_POW) and u.args[0] is y32 and _scalar(u.args[1]) == 2.0)
          or (_is_call(u, *_MUL) and u.args[0] is y32 and u.args[1] is y32)]
    if len(sq) != 1:
        raise _NoMatch("no unique square (pow 2 / x*x) of the fp32 value")
    sq = sq[0]
    means = [u for u in sq.users if _is_call(u, *_MEAN) and u.args[0] is sq]
    if len(means) != 1:
        raise _NoMatch("the square has no unique mean")
    m = means[0]
    dims = m.args[1] if len(m.args) > 1 else m.kwargs.get("dim")
    keep = m.args[2] if len(m.args) > 2 else m.kwargs.get("keepdim", False)
    if not _is_last_dim(dims, ndim) or not keep:
        raise _NoMatch(f"mean over {dims} keepdim={keep}, not the last dim with keepdim")
    adds = [u for u in m.users if _is_call(u, *_ADD) and _scalar(_other_operand(u, m)) is not None
            and u.kwargs.get("alpha", 1) == 1]
    if len(adds) != 1:
        raise _NoMatch("the mean square has no unique `+ eps` with a constant eps")
    e = adds[0]
    eps = _scalar(_other_operand(e, m))
    rs = [u for u in e.users if _is_call(u, *_RSQRT)]
    if len(rs) != 1:
        raise _NoMatch("no unique rsqrt of mean + eps")
    r = rs[0]
    # x * rsqrt: the fp32 value, or the activation-dtype value itself (aten.rms_norm's
    # input.mul(rsqrt(...)), promoted to fp32: the same products)
    y = y32.args[0]
    ns = [u for u in r.users if _is_call(u, *_MUL)
          and (_other_operand(u, r) in y32s or _other_operand(u, r) is y)
          and _dtype(u) == torch.float32]
    if len(ns) != 1:
        raise _NoMatch("the rsqrt does not multiply the fp32 value exactly once")
    n = ns[0]
    # tails
    tails = []
    for u in n.users:
        if _convert_dtype(u) == act_dtype:
            # round before the weight: convert -> * weight (activation dtype), or no weight
            ws = [w for w in u.users if _is_call(w, *_MUL) and _dtype(w) == act_dtype]
            if len(ws) == 1 and len(u.users) == 1:
                w = _other_operand(ws[0], u)
                if isinstance(w, fx.Node) and _shape(w) == (hidden,) and _dtype(w) == act_dtype:
                    tails.append(_Norm(ws[0], w, eps, False, "before_weight",
                                       "decomposed: weight * x.to(dtype)"))
                    continue
            tails.append(_Norm(u, None, eps, False, "once", "decomposed: no weight"))
        elif _is_call(u, *_MUL) and _dtype(u) == torch.float32:
            g = _other_operand(u, n)
            w, plus_one = _match_weight_operand(g, hidden)
            outs = [c for c in u.users if _convert_dtype(c) == act_dtype]
            if len(outs) != 1:
                raise _NoMatch("the weighted fp32 norm is not converted to the activation dtype "
                               "exactly once")
            form = "decomposed: (1 + w) in fp32" if plus_one else (
                "decomposed: fp32 weight" if _dtype(w) == torch.float32 else
                "decomposed: x * w in fp32")
            tails.append(_Norm(outs[0], w, eps, plus_one, "once", form))
    if len(tails) != 1:
        raise _NoMatch(f"the normalized fp32 value has {len(tails)} recognised tails (need 1)")
    return tails[0]


def _match_norm(y, hidden, act_dtype) -> _Norm:
    errors = []
    for matcher in (_match_fused_rms, lambda y_, h_: _match_decomposed(y_, h_, act_dtype)):
        try:
            return matcher(y, hidden)
        except _NoMatch as e:
            errors.append(str(e))
    raise _NoMatch("RMSNorm not recognised: " + " | ".join(errors))


# ---- FP8 tails -----------------------------------------------------------------------------------


@dataclasses.dataclass
class _Quant:
    kind: str                     # fp8_per_tensor | fp8_per_token | fp8_per_group
    q: fx.Node                    # fp8 result as the graph uses it
    scale_out: fx.Node | None     # the computed scale the graph uses (dynamic kinds)
    scale_in: fx.Node | None      # static scale input
    internal: set                 # nodes of the tail (its intermediates)


def _is_clamp_fp8(c) -> bool:
    if not _is_call(c, *_CLAMP):
        return False
    if c.target == _op("aten", "clamp"):
        lo = c.args[1] if len(c.args) > 1 else c.kwargs.get("min")
        hi = c.args[2] if len(c.args) > 2 else c.kwargs.get("max")
        return _scalar(lo) == -_F8_MAX and _scalar(hi) == _F8_MAX
    return False


def _fp8_of(c):
    """The e4m3 conversion of a [-448, 448] clamp result (also clamp_min/clamp_max pairs)."""
    node = c
    if _is_call(c, *_CLAMP) and c.target != _op("aten", "clamp"):
        # clamp_min(-448) -> clamp_max(448) or the other way round
        first_bound = _scalar(c.args[1])
        nxt = [u for u in c.users if _is_call(u, *_CLAMP) and u.target != c.target]
        if len(nxt) != 1:
            return None
        second = _scalar(nxt[0].args[1])
        if sorted([first_bound, second]) != [-_F8_MAX, _F8_MAX]:
            return None
        node = nxt[0]
    elif not _is_clamp_fp8(c):
        return None
    qs = [u for u in node.users if _convert_dtype(u) == torch.float8_e4m3fn]
    return (node, qs[0]) if len(qs) == 1 and len(node.users) == 1 else None


def _scale_floor_node(sc):
    """clamp_min(amax / 448, 1/(448*512)) in one of its spellings: returns the clamped node."""
    for u in sc.users:
        if (u.target == _op("aten", "clamp_min") and _scalar(u.args[1]) is not None
                and _f32(u.args[1]) == _MIN_FP8_SCALE):
            return u
        if u.target == _op("aten", "clamp"):
            lo = u.args[1] if len(u.args) > 1 else u.kwargs.get("min")
            hi = u.args[2] if len(u.args) > 2 else u.kwargs.get("max")
            if hi is None and _scalar(lo) is not None and _f32(lo) == _MIN_FP8_SCALE:
                return u
    return None


def _match_dynamic_fp8(o32, grouped: bool, hidden: int):
    """From the fp32 norm value (or its [T, H/128, 128] view): the per-token / per-group tail."""
    ndim = len(_shape(o32))
    for a in o32.users:
        if not _is_call(a, *_ABS):
            continue
        for m in a.users:
            if not _is_call(m, *_AMAX):
                continue
            dims = m.args[1] if len(m.args) > 1 else m.kwargs.get("dim")
            keep = m.args[2] if len(m.args) > 2 else m.kwargs.get("keepdim", False)
            if not _is_last_dim(dims, ndim) or not keep:
                continue
            divs = [d for d in m.users if _is_call(d, *_DIV) and d.args[0] is m
                    and _scalar(d.args[1]) == _F8_MAX]
            if len(divs) != 1:
                continue
            sc = _scale_floor_node(divs[0])
            if sc is None:
                continue
            qdivs = [d for d in sc.users if _is_call(d, *_DIV) and d.args[0] is o32 and d.args[1] is sc]
            if len(qdivs) != 1:
                continue
            fp8 = _fp8_of([u for u in qdivs[0].users][0]) if len(qdivs[0].users) == 1 else None
            if fp8 is None:
                continue
            clamp_end, q = fp8
            internal = {a, m, divs[0], qdivs[0], clamp_end, *qdivs[0].users}
            return q, sc, internal
    return None


def _match_quant(norm_out: fx.Node, hidden: int, rows_shape) -> _Quant:
    """The FP8 tail reading the norm (exactly arfusion's contract), or _NoMatch."""
    o32s = [u for u in norm_out.users if _convert_dtype(u) == torch.float32]
    views = [u for u in norm_out.users if _is_call(u, *_VIEW)]
    for o32 in o32s:
        # static per-tensor
        for d in o32.users:
            if _is_call(d, *_DIV) and d.args[0] is o32 and isinstance(d.args[1], fx.Node):
                s = d.args[1]
                sv = _val(s)
                if (isinstance(sv, torch.Tensor) and sv.dtype == torch.float32 and sv.numel() == 1
                        and len(d.users) == 1):
                    fp8 = _fp8_of(next(iter(d.users)))
                    if fp8 is not None:
                        clamp_end, q = fp8
                        return _Quant("fp8_per_tensor", q, None, s,
                                      {o32, d, clamp_end, *d.users})
        # per-token
        hit = _match_dynamic_fp8(o32, False, hidden)
        if hit is not None:
            q, sc, internal = hit
            return _Quant("fp8_per_token", q, sc, None, internal | {o32})
        # per-group: view [.., H/128, 128] of the fp32 value
        for v in o32.users:
            if _is_call(v, *_VIEW) and _shape(v) is not None and _shape(v)[-2:] == (hidden // 128, 128):
                hit = _match_dynamic_fp8(v, True, hidden)
                if hit is not None:
                    q3, sc, internal = hit
                    qv = [u for u in q3.users if _is_call(u, *_VIEW)]
                    q = qv[0] if len(qv) == 1 and len(q3.users) == 1 else q3
                    return _Quant("fp8_per_group", q, sc, None,
                                  internal | {o32, v} | ({q3} if q is not q3 else set()))
    for v in views:  # view of the activation-dtype norm, then convert
        if _shape(v) is not None and _shape(v)[-2:] == (hidden // 128, 128):
            for o32 in v.users:
                if _convert_dtype(o32) == torch.float32:
                    hit = _match_dynamic_fp8(o32, True, hidden)
                    if hit is not None:
                        q3, sc, internal = hit
                        qv = [u for u in q3.users if _is_call(u, *_VIEW)]
                        q = qv[0] if len(qv) == 1 and len(q3.users) == 1 else q3
                        return _Quant("fp8_per_group", q, sc, None,
                                      internal | {o32, v} | ({q3} if q is not q3 else set()))
    raise _NoMatch("no FP8 tail in arfusion's form")


# ---- the pass ------------------------------------------------------------------------------------


def _source_files() -> tuple:
    here = os.path.dirname(os.path.abspath(__file__))
    return tuple(os.path.join(here, f) for f in ("compile.py", "ops.py", "_comm.py"))


class AllReduceFusionPass(CustomGraphPass):
    """Inductor post-grad pass replacing all-reduce + residual add + RMSNorm (+ FP8 tail) with
    ``torch.ops.arfusion.fused_add_rms_norm_out`` / ``fused_add_rms_norm_quant``.

    communicators: a Communicator, a registry name, or a list of them (default: every
        communicator registered when the pass is made). A c10d all-reduce is mapped to the
        communicator whose ranks equal its process group's; ``group_map`` ({group name: registry
        name}) overrides (needed for torch.ops.vllm.all_reduce with several communicators).
    quant: also fuse recognised FP8 tails (default True).
    assume_max_tokens: fuse dynamic token counts without a known upper bound, promising calls
        stay within max_tokens (see the module docstring).
    fp32_residual_add: also match vLLM's native form, where the residual add runs in fp32 and the
        norm reads the unrounded fp32 sum (arfusion normalizes the rounded residual: results can
        differ by rounding). Off by default.
    then: a pass (callable on the graph) to run after this one, e.g. a previously configured
        post_grad_custom_post_pass (its uuid joins ours).
    algorithm: forced algorithm name for the replacements (default "auto").
    """

    def __init__(self, communicators=None, *, quant: bool = True, assume_max_tokens: bool = False,
                 fp32_residual_add: bool = False, group_map: dict | None = None,
                 then=None, algorithm: str = "auto"):
        if communicators is None:
            names = sorted(registered_communicators())
        elif isinstance(communicators, (str, Communicator)):
            names = [communicators if isinstance(communicators, str) else communicators.name]
        else:
            names = [c if isinstance(c, str) else c.name for c in communicators]
        if not names:
            raise ValueError("arfusion: AllReduceFusionPass needs at least one communicator "
                             "(create one with Communicator.from_group first)")
        self.comm_names = names
        self.quant = quant
        self.assume_max_tokens = assume_max_tokens
        self.fp32_residual_add = fp32_residual_add
        self.group_map = dict(group_map or {})
        self.then = then
        self.algorithm = algorithm
        _ops.algorithm_value(algorithm)
        self.stats = FusionStats()       # cumulative over every graph
        self.history: list[FusionStats] = []

    # -- cache key --
    def uuid(self) -> Any:
        h = hashlib.sha256()
        for path in _source_files():
            with open(path, "rb") as f:
                h.update(f.read())
        for name in self.comm_names:
            h.update(name.encode())
            comm = registered_communicators().get(name)
            if comm is not None:
                facts = comm.plan_facts()
                h.update(repr(sorted(facts.items())).encode())
                h.update(repr(getattr(comm, "ranks", None)).encode())
            else:
                h.update(b"<absent>")
        h.update(repr((self.quant, self.assume_max_tokens, self.fp32_residual_add,
                       sorted(self.group_map.items()), self.algorithm)).encode())
        if self.then is not None:
            then_uuid = self.then.uuid() if hasattr(self.then, "uuid") else None
            if then_uuid is None:
                return None  # the chained pass cannot be cached: neither can we
            h.update(repr(then_uuid).encode())
        return h.hexdigest()

    # -- entry point --
    def __call__(self, graph: fx.Graph) -> None:
        stats = FusionStats(graphs=1)
        try:
            self._run(graph, stats)
        finally:
            self.history.append(stats)
            self.stats.merge(stats)
            level = logging.INFO if stats.replaced or not stats.all_reduces else logging.WARNING
            if stats.all_reduces:
                log.log(level, "%s", stats.summary())
        if self.then is not None:
            self.then(graph)

    # -- communicator resolution --
    def _comms(self) -> list[Communicator]:
        out = []
        for name in self.comm_names:
            c = registered_communicators().get(name)
            if c is not None and c.alive:
                out.append(c)
        return out

    def _comm_for_group(self, group_name: str, comms) -> Communicator:
        if group_name in self.group_map:
            return get_communicator(self.group_map[group_name])
        try:
            import torch.distributed as dist
            from torch.distributed.distributed_c10d import _resolve_process_group

            ranks = list(dist.get_process_group_ranks(_resolve_process_group(group_name)))
        except Exception as e:  # noqa: BLE001
            raise _NoMatch(f"process group {group_name!r} cannot be resolved ({e}); "
                           "give group_map") from None
        hits = [c for c in comms if getattr(c, "ranks", None) == ranks]
        if len(hits) == 1:
            return hits[0]
        unknown = [c for c in comms if getattr(c, "ranks", None) is None
                   and c.world_size == len(ranks)]
        if not hits and len(unknown) == 1:
            return unknown[0]
        raise _NoMatch(f"no communicator of the pass has the ranks {ranks} of group "
                       f"{group_name!r} (communicators: "
                       + ", ".join(f"{c.name}={getattr(c, 'ranks', None)}" for c in comms) + ")")

    def _all_reduce_source(self, n, comms):
        """(input node, value node, nodes to erase, communicator) when n is an all-reduce."""
        if _is_call(n, *_C10D_AR):
            x = n.args[0]
            reduce_op = n.args[1] if len(n.args) > 1 else n.kwargs.get("reduceOp")
            group = n.args[2] if len(n.args) > 2 else n.kwargs.get("group_name")
            waits = list(n.users)
            if len(waits) != 1 or not _is_call(waits[0], *_C10D_WAIT):
                raise _NoMatch("the all_reduce is not followed by exactly one wait_tensor")
            if str(reduce_op).lower() != "sum":
                raise _NoMatch(f"reduce op {reduce_op!r} is not sum")
            return x, waits[0], [waits[0], n], self._comm_for_group(str(group), comms)
        vllm_ar = _op("vllm", "all_reduce")
        if vllm_ar is not None and _is_call(n, vllm_ar):
            group = n.args[1] if len(n.args) > 1 else n.kwargs.get("group_name")
            if str(group) in self.group_map:
                comm = get_communicator(self.group_map[str(group)])
            elif len(comms) == 1:
                comm = comms[0]
            else:
                raise _NoMatch(f"torch.ops.vllm.all_reduce group {group!r}: several "
                               "communicators and no group_map entry")
            return n.args[0], n, [n], comm
        arf_ar = _op("arfusion", "all_reduce")
        if arf_ar is not None and _is_call(n, arf_ar):
            return n.args[0], n, [n], get_communicator(n.args[1])
        return None

    def _run(self, graph: fx.Graph, stats: FusionStats) -> None:
        comms = self._comms()
        candidates = []
        for n in list(graph.nodes):
            if _is_call(n, *_C10D_AR) or _is_call(n, *_targets(("vllm", "all_reduce"),
                                                                 ("arfusion", "all_reduce"))):
                candidates.append(n)
        stats.all_reduces = len(candidates)
        if not candidates:
            return
        if not comms:
            for n in candidates:
                stats.rejected.append((n.name, "no live communicator among "
                                       f"{self.comm_names} in this process"))
            return
        changed = False
        self._erase_after_dce = []
        for n in candidates:
            try:
                done = self._try_fuse(graph, n, comms, stats)
                changed = changed or done
            except _NoMatch as e:
                stats.rejected.append((n.name, str(e)))
        if changed:
            graph.eliminate_dead_code()
            for node in self._erase_after_dce:  # in order: wait_tensor, then all_reduce
                if node.users:
                    stats.notes.append(f"{node.name}: still used after the fusion; kept")
                else:
                    graph.erase_node(node)
            graph.eliminate_dead_code()
            graph.lint()

    # -- one all-reduce --
    def _try_fuse(self, graph, ar_node, comms, stats) -> bool:
        src = self._all_reduce_source(ar_node, comms)
        if src is None:
            raise _NoMatch("not an all-reduce form the pass knows")
        x, ar_val, ar_nodes, comm = src
        xv = _val(x)
        if not isinstance(xv, torch.Tensor):
            raise _NoMatch("the all-reduce input has no tensor metadata")
        act = xv.dtype
        if act not in ACTIVATION_DTYPES:
            raise _NoMatch(f"dtype {act} (arfusion fuses bf16/fp16)")
        if act != comm.dtype:
            raise _NoMatch(f"dtype {act} differs from communicator {comm.name!r}'s {comm.dtype}")
        if xv.dim() < 1:
            raise _NoMatch("0-d all-reduce")
        hidden = xv.shape[-1]
        if not isinstance(hidden, int):
            raise _NoMatch("the hidden size is symbolic")
        shape = tuple(xv.shape)

        # residual add, or the first-layer form (norm reads the all-reduce)
        adds = [u for u in ar_val.users if _is_call(u, _op("aten", "add", "Tensor"))
                and u.kwargs.get("alpha", 1) == 1 and _other_operand(u, ar_val) is not ar_val
                and isinstance(_other_operand(u, ar_val), fx.Node)
                and _shape(u) == shape and _dtype(u) == act
                and _shape(_other_operand(u, ar_val)) == shape
                and _dtype(_other_operand(u, ar_val)) == act]
        residual = None
        y = ar_val
        form = "first_layer"
        norm = None
        errors = []
        if len(adds) == 1:
            try:
                norm = _match_norm(adds[0], hidden, act)
                residual = _other_operand(adds[0], ar_val)
                y = adds[0]
                form = "residual"
            except _NoMatch as e:
                errors.append(f"after the residual add: {e}")
        if norm is None:
            try:
                norm = _match_norm(ar_val, hidden, act)
            except _NoMatch as e:
                if not adds:
                    errors.append(f"no residual add of the same shape/dtype; {e}")
                else:
                    errors.append(f"on the all-reduce itself: {e}")
        if norm is None and self.fp32_residual_add:
            try:
                norm, residual, y = self._match_fp32_residual(ar_val, hidden, act, shape)
                form = "fp32_residual"
            except _NoMatch as e:
                errors.append(f"fp32 residual form: {e}")
        if norm is None:
            raise _NoMatch("; ".join(errors))
        stats.matched += 1
        if form in ("residual", "fp32_residual") and len(ar_val.users) > 1:
            raise _NoMatch("the all-reduce result has users besides the residual add "
                           f"({', '.join(u.name for u in ar_val.users if u is not y)})")

        # quantization tail
        quant = None
        if self.quant:
            try:
                quant = _match_quant(norm.out, hidden, shape[:-1])
            except _NoMatch:
                quant = None
        weight_dtype = _dtype(norm.weight) if norm.weight is not None else act
        rows = 1
        for d in shape[:-1]:
            rows = rows * d
        if quant is not None:
            try:
                self._check_plan(comm, _ops.quant_pattern(quant.kind), hidden, rows, weight_dtype,
                                 norm, quant)
            except _NoMatch as e:
                stats.notes.append(f"{ar_node.name}: {quant.kind} tail left unfused: {e}")
                quant = None
        if quant is None:
            self._check_plan(comm, Pattern.ResidualRmsNorm, hidden, rows, weight_dtype, norm, None)
        fp8_left = self.quant and quant is None and _has_fp8_consumer(norm.out)

        # order: the fused node goes after its last input, before the first user of any output
        order = {node: i for i, node in enumerate(graph.nodes)}
        inputs = [x] + [n for n in (residual, norm.weight, quant.scale_in if quant else None)
                        if isinstance(n, fx.Node)]
        last_input = max(inputs, key=lambda n: order[n])
        placeholders = [n for n in graph.nodes if n.op in ("placeholder", "get_attr")]
        if placeholders and order[placeholders[-1]] > order[last_input]:
            last_input = placeholders[-1]  # keep the graph's inputs ahead of every computation
        replaced_outputs = [y, norm.out] + ([quant.q, quant.scale_out] if quant else [])
        first_use = min((order[u] for o in replaced_outputs if o is not None for u in o.users),
                        default=len(order))
        if order[last_input] >= first_use:
            raise _NoMatch("graph order: an input of the fused op is defined after a use of its "
                           "outputs")

        with graph.inserting_after(last_input):
            weight_arg = norm.weight
            if weight_arg is None:
                weight_arg = graph.call_function(
                    aten.full.default, ([hidden], 1.0),
                    {"dtype": act, "device": xv.device, "pin_memory": False})
                _fake_meta(weight_arg, (hidden,), act, xv)
            if quant is None:
                target = _ops.op("fused_add_rms_norm_out")
                fargs = (x, residual, weight_arg, norm.eps, comm.name, norm.gamma_plus_one,
                         norm.rounding, self.algorithm)
            else:
                with_norm = bool(set(norm.out.users) - quant.internal)
                target = _ops.op("fused_add_rms_norm_quant")
                fargs = (x, residual, weight_arg, quant.scale_in, norm.eps, comm.name, quant.kind,
                         "row_major", "fp32", with_norm, norm.gamma_plus_one, norm.rounding,
                         self.algorithm, 0)
            fused = graph.call_function(target, fargs)
            _set_fake_val(fused, target, fargs)
            getters = []
            count = 2 if quant is None else 4
            with graph.inserting_after(fused):
                for i in reversed(range(count)):
                    g = graph.call_function(operator.getitem, (fused, i))
                    g.meta["val"] = fused.meta["val"][i]
                    getters.append(g)
            getters.reverse()

        if quant is None:
            norm_new, res_new = getters
            norm.out.replace_all_uses_with(norm_new)
        else:
            q_new, s_new, res_new, norm_new = getters
            _replace_with_view(graph, quant.q, q_new)
            if quant.scale_out is not None:
                _replace_with_view(graph, quant.scale_out, s_new)
            if with_norm:
                for u in list(norm.out.users):
                    if u not in quant.internal:
                        u.replace_input_with(norm.out, norm_new)
        y.replace_all_uses_with(res_new)
        # The unfused all-reduce goes once the dead chain is gone (wait_tensor is side-effecting:
        # dead-code elimination alone would keep it, and the collective would still run).
        self._erase_after_dce.extend(ar_nodes)
        stats.replaced += 1
        kind = f"{form}/{norm.form}/{norm.rounding}" + (f"+{quant.kind}" if quant else "")
        stats.kinds[kind] += 1
        if fp8_left:
            stats.notes.append(f"{ar_node.name}: an FP8 conversion follows the norm but not in "
                               "arfusion's form; it stays unfused")
        return True

    def _match_fp32_residual(self, ar_val, hidden, act, shape):
        """vLLM's native RMSNorm: s32 = f32(ar) + f32(residual); residual := round(s32); the
        norm reads s32. Returns (norm, residual node, the rounded-residual node to replace)."""
        for c in ar_val.users:
            if _convert_dtype(c) != torch.float32:
                continue
            for s32 in c.users:
                if not _is_call(s32, _op("aten", "add", "Tensor")) or s32.kwargs.get("alpha", 1) != 1:
                    continue
                other = _other_operand(s32, c)
                if _convert_dtype(other) != torch.float32:
                    continue
                res = other.args[0]
                if _dtype(res) != act or _shape(res) != shape:
                    continue
                rounded = [u for u in s32.users if _convert_dtype(u) == act]
                if len(rounded) != 1:
                    raise _NoMatch("the fp32 residual sum is not rounded to the activation dtype once")
                norm = _match_decomposed_from(s32, [s32], hidden, act)
                return norm, res, rounded[0]
        raise _NoMatch("no f32(all-reduce) + f32(residual)")

    def _check_plan(self, comm, pattern, hidden, rows, weight_dtype, norm, quant):
        def plan_at(t):
            args = comm.shape_args(int(pattern), hidden, int(t), gamma_dtype=weight_dtype,
                                   gamma_plus_one=norm.gamma_plus_one, eps=norm.eps,
                                   norm_rounding=_ops.norm_rounding_value(norm.rounding),
                                   algorithm=_ops.algorithm_value(self.algorithm))
            try:
                return comm.plan_shape(args)
            except ArfError as e:
                raise _NoMatch(f"arfPlanShape refuses T={t}, H={hidden} "
                               f"({_arf.pattern_name(pattern)}): {e.status}: {e.message}") from None

        if isinstance(rows, int):
            plan_at(rows)
            return
        lo, hi = _sym_bounds(rows)
        if hi is None:
            if not self.assume_max_tokens:
                raise _NoMatch("dynamic token count without an upper bound (mark_dynamic(..., "
                               "max=...) or assume_max_tokens=True)")
            hi = comm.max_tokens
        plan_at(max(1, lo))
        plan_at(hi)


def _sym_bounds(expr):
    """(lower, upper or None) of a SymInt row count."""
    try:
        node = expr.node
        vr = node.shape_env.bound_sympy(node.expr)
        lo = int(vr.lower) if vr.lower.is_finite else 1
        hi = int(vr.upper) if vr.upper.is_finite else None
        return lo, hi
    except Exception:  # noqa: BLE001
        return 1, None


def _has_fp8_consumer(node) -> bool:
    seen, todo = set(), [node]
    for _ in range(6):
        nxt = []
        for n in todo:
            for u in n.users:
                if _convert_dtype(u) == torch.float8_e4m3fn:
                    return True
                if u not in seen:
                    seen.add(u)
                    nxt.append(u)
        todo = nxt
    return False


def _fake_meta(node, shape, dtype, like):
    mode = _fake_mode([like])
    if mode is not None:
        with mode:
            node.meta["val"] = torch.empty(shape, dtype=dtype, device=like.device)


def _fake_mode(vals):
    from torch._guards import detect_fake_mode

    return detect_fake_mode([v for v in vals if isinstance(v, torch.Tensor)])


def _set_fake_val(node, target, args):
    vals = [_val(a) if isinstance(a, fx.Node) else a for a in args]
    mode = _fake_mode(vals)
    if mode is None:
        raise _NoMatch("no fake mode to compute the fused op's metadata")
    with mode:
        node.meta["val"] = target(*vals)


def _replace_with_view(graph, old: fx.Node, new: fx.Node) -> None:
    """Reroute old's users to new, through a view when the shapes differ (same numel)."""
    old_shape, new_shape = _shape(old), _shape(new)
    if old_shape == new_shape:
        old.replace_all_uses_with(new)
        return
    with graph.inserting_after(new):
        v = graph.call_function(aten.view.default, (new, list(old_shape)))
        mode = _fake_mode([_val(new)])
        with mode:
            v.meta["val"] = _val(new).view(old_shape)
    old.replace_all_uses_with(v)


def compile_options(communicators=None, **pass_options) -> dict:
    """Options for torch.compile(model, options=...) installing the pass (chaining a
    post_grad_custom_post_pass already set in torch._inductor.config)."""
    import torch._inductor.config as inductor_config

    existing = inductor_config.post_grad_custom_post_pass
    if existing is not None and "then" not in pass_options:
        pass_options["then"] = existing
    return {"post_grad_custom_post_pass": AllReduceFusionPass(communicators, **pass_options)}


__all__ = ["AllReduceFusionPass", "FusionStats", "compile_options"]

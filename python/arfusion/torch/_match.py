"""Pattern matching of the graph forms AllReduceFusionPass fuses (arfusion.torch.compile; its
docstring lists them): the residual add after an all-reduce, the RMSNorm forms torch produces
(aten._fused_rms_norm / aten.rms_norm, the decomposed fp32 chains) and the FP8 tails after the
norm. Every matcher returns what it found or raises _NoMatch with the reason the walk stopped; none
changes the graph.
"""

from __future__ import annotations

import dataclasses
import operator
import struct

import torch
import torch.fx as fx

from ._comm import ACTIVATION_DTYPES

_F8_MAX = 448.0


def _f32(x: float) -> float:
    return struct.unpack("f", struct.pack("f", float(x)))[0]


_MIN_FP8_SCALE = _f32(1.0 / (448.0 * 512.0))


class _NoMatch(Exception):
    """Raised inside matchers with the reason the walk stopped."""

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
            if not outs and any(_is_call(c, *_ABS) for c in u.users):
                # Inductor's pointless_convert folds fp32 -> bf16 -> fp32 when only the FP8 tail
                # reads the rounded norm: the compiled graph then quantizes the unrounded value.
                raise _NoMatch("the FP8 tail reads the unrounded fp32 norm (Inductor removes the "
                               "round trip through the activation dtype when nothing else reads "
                               "the rounded norm); arfusion quantizes the rounded norm, so fusing "
                               "would change the result")
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


# The scale rule of the dynamic tails this module matches. Their scale is amax / 448.0 with a
# Python-number divisor (_match_dynamic_fp8), which torch evaluates on a GPU as amax * fp32(1/448),
# eager CUDA (a CPU-scalar divisor becomes a multiplication by its fp32 reciprocal) and Inductor
# alike (measured on every scale by dev/python/
# probe_fp8_scale_rounding.py); arfFp8ScaleTimesReciprocal gives those bits, so fusing the tail
# does not change them. Static per-tensor tails have no computed scale: the default rule.
_DYNAMIC_SCALE_RULE = "times_reciprocal"


@dataclasses.dataclass
class _Quant:
    kind: str                     # fp8_per_tensor | fp8_per_token | fp8_per_group
    q: fx.Node                    # fp8 result as the graph uses it
    scale_out: fx.Node | None     # the computed scale the graph uses (dynamic kinds)
    scale_in: fx.Node | None      # static scale input
    internal: set                 # nodes of the tail (its intermediates)
    scale_rule: str = "divide"    # the fused op's scale_rule: _DYNAMIC_SCALE_RULE for dynamic kinds


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
    """From the fp32 norm value (or its [T, H/128, 128] view): the per-token / per-group tail.
    Its scale divides by the Python number 448, whose GPU arithmetic _DYNAMIC_SCALE_RULE states (a
    tensor divisor is not matched: how torch divides by one depends on where it lives)."""
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


def _depends_on(node: fx.Node, ancestor: fx.Node) -> bool:
    seen, todo = set(), [node]
    while todo:
        n = todo.pop()
        if n is ancestor:
            return True
        if n not in seen:
            seen.add(n)
            todo.extend(n.all_input_nodes)
    return False


def _per_group_quant(hit, viewed: set) -> _Quant:
    """The per-group tail from _match_dynamic_fp8's hit on a [.., H/128, 128] value: q is the view
    back to [.., H] when the graph has exactly that one, else the grouped e4m3 value itself.
    viewed: the convert and view nodes leading to the grouped value (part of the tail)."""
    q3, sc, internal = hit
    qv = [u for u in q3.users if _is_call(u, *_VIEW)]
    q = qv[0] if len(qv) == 1 and len(q3.users) == 1 else q3
    return _Quant("fp8_per_group", q, sc, None,
                  internal | viewed | ({q3} if q is not q3 else set()), _DYNAMIC_SCALE_RULE)


def _match_quant(norm_out: fx.Node, hidden: int, rows_shape) -> _Quant:
    """The FP8 tail reading the norm (exactly arfusion's contract), or _NoMatch."""
    o32s = [u for u in norm_out.users if _convert_dtype(u) == torch.float32]
    views = [u for u in norm_out.users if _is_call(u, *_VIEW)]
    for o32 in o32s:
        # per-token (first: with one token its [1, 1] scale also has one element)
        hit = _match_dynamic_fp8(o32, False, hidden)
        if hit is not None:
            q, sc, internal = hit
            return _Quant("fp8_per_token", q, sc, None, internal | {o32}, _DYNAMIC_SCALE_RULE)
        # static per-tensor: a one-element fp32 divisor that does not come from the norm
        for d in o32.users:
            if _is_call(d, *_DIV) and d.args[0] is o32 and isinstance(d.args[1], fx.Node):
                s = d.args[1]
                sv = _val(s)
                if (isinstance(sv, torch.Tensor) and sv.dtype == torch.float32 and sv.numel() == 1
                        and len(d.users) == 1 and not _depends_on(s, norm_out)):
                    fp8 = _fp8_of(next(iter(d.users)))
                    if fp8 is not None:
                        clamp_end, q = fp8
                        return _Quant("fp8_per_tensor", q, None, s,
                                      {o32, d, clamp_end, *d.users})
        # per-group: view [.., H/128, 128] of the fp32 value
        for v in o32.users:
            if _is_call(v, *_VIEW) and _shape(v) is not None and _shape(v)[-2:] == (hidden // 128, 128):
                hit = _match_dynamic_fp8(v, True, hidden)
                if hit is not None:
                    return _per_group_quant(hit, {o32, v})
    for v in views:  # view of the activation-dtype norm, then convert
        if _shape(v) is not None and _shape(v)[-2:] == (hidden // 128, 128):
            for o32 in v.users:
                if _convert_dtype(o32) == torch.float32:
                    hit = _match_dynamic_fp8(o32, True, hidden)
                    if hit is not None:
                        return _per_group_quant(hit, {o32, v})
    raise _NoMatch("no FP8 tail in arfusion's form")


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


# ---- residual add --------------------------------------------------------------------------------


def _match_fp32_residual(ar_val, hidden, act, shape, order: dict):
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
            if _dtype(res) != act or _shape(res) != shape or order[res] > order[ar_val]:
                continue
            rounded = [u for u in s32.users if _convert_dtype(u) == act]
            if len(rounded) != 1:
                raise _NoMatch("the fp32 residual sum is not rounded to the activation dtype once")
            norm = _match_decomposed_from(s32, [s32], hidden, act)
            return norm, res, rounded[0]
    raise _NoMatch("no f32(all-reduce) + f32(residual)")


def _match_residual_norm(ar_val, hidden, act, shape, fp32_residual_add: bool, order: dict):
    """The residual add (or the first-layer form: the norm reads the all-reduce) and the RMSNorm
    after the all-reduce value ar_val: (norm, residual node or None, the node the fused op's
    residual_out replaces, form), or _NoMatch with every form's reason. order: the graph's node
    positions. An add is this all-reduce's residual add only when its other operand is defined
    before ar_val: in `h = norm(ar1); ...; s = ar2 + ar1` the add belongs to ar2, and ar1 is the
    first layer's all-reduce whose value the next layer reads as its residual."""
    adds = [u for u in ar_val.users if _is_call(u, _op("aten", "add", "Tensor"))
            and u.kwargs.get("alpha", 1) == 1 and _other_operand(u, ar_val) is not ar_val
            and isinstance(_other_operand(u, ar_val), fx.Node)
            and order[_other_operand(u, ar_val)] < order[ar_val]
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
    if norm is None and fp32_residual_add:
        try:
            norm, residual, y = _match_fp32_residual(ar_val, hidden, act, shape, order)
            form = "fp32_residual"
        except _NoMatch as e:
            errors.append(f"fp32 residual form: {e}")
    if norm is None:
        raise _NoMatch("; ".join(errors))
    return norm, residual, y, form

"""FP8 tails after the rounded norm (AllReduceFusionPass, arfusion.torch.compile): the forms whose
every bit arfusion's quantized patterns reproduce, and for a tail that is not one of them, the
arithmetic step that differs.

Parsed backwards from the e4m3 conversion, so each step either matches or names itself:

  q      = e4m3(clamp(x32 / scale, -448, 448))      x32: the rounded norm in fp32 (convert, or the
           bf16 norm promoted by the division), or its groups of 128 (a view [..., 128], e.g.
           [T, H/128, 128] or [-1, 128])
  static = scale: an fp32 tensor of one element that does not depend on the norm (per-tensor)
  dynamic scale = clamp_min(amax / 448.0, 1/(448*512))   (per-token; per-group on groups of 128)
           amax = max |x| over the last dim with keepdim, of x32 or of the bf16 norm then converted
           (|x| and max are exact, so both give the same bits), amax(...) or max(dim)[0]
           `amax / 448.0` is what torch computes on a GPU as amax * fp32(1/448) (eager and
           Inductor), and `amax * (1/448)` is that product written out: both are
           scale_rule="times_reciprocal"

Refused, each with its cause: x * scale.reciprocal() (vLLM's QuantFP8.forward_native: the
reciprocal rounds before the product), an inverse scale 448 / amax (torchao), a floor other than
2^-9/448 or applied to amax before the division (SGLang's native fallbacks), no floor, a divisor
other than 448, an amax bounded above, one scale for the whole tensor (dynamic per-tensor), groups
other than 128, a power-of-two scale made with exp2(ceil(log2(.))), a range other than +-448, an
fp8 format other than e4m3fn. A norm read by an opaque quantization op is noted (the norm is fused,
the op stays).
"""

from __future__ import annotations

import dataclasses
import operator

import torch
import torch.fx as fx

from ._graph import (ABS, AMAX, CLAMP, DIV, MAX_DIM, MUL, RECIPROCAL, UNSQUEEZE, VIEW, NoMatch,
                     convert_dtype, depends_on, describe, dtype, f32, is_call, is_last_dim, op,
                     scalar, shape, val)

_F8_MAX = 448.0
_MIN_FP8_SCALE = f32(1.0 / (448.0 * 512.0))
_GROUP = 128
# The scale rule of every dynamic tail matched here (see the module docstring); static per-tensor
# tails have no computed scale and keep the default rule.
_DYNAMIC_SCALE_RULE = "times_reciprocal"
_FP8_TYPES = tuple(getattr(torch, n) for n in ("float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2",
                                               "float8_e5m2fnuz") if hasattr(torch, n))


@dataclasses.dataclass
class Quant:
    kind: str                     # fp8_per_tensor | fp8_per_token | fp8_per_group
    q: fx.Node                    # fp8 result as the graph uses it
    scale_out: fx.Node | None     # the computed scale the graph uses (dynamic kinds)
    scale_in: fx.Node | None      # static scale input
    internal: set                 # nodes of the tail (its intermediates)
    scale_rule: str = "divide"    # the fused op's scale_rule


# ---- helpers -------------------------------------------------------------------------------------


def _unclamp(c):
    """(inner value, clamp nodes) when c is clamp(x, -448, 448) or clamp_min / clamp_max of it in
    either order; NoMatch naming the bounds otherwise."""
    if is_call(c, op("aten", "clamp")):
        lo = c.args[1] if len(c.args) > 1 else c.kwargs.get("min")
        hi = c.args[2] if len(c.args) > 2 else c.kwargs.get("max")
        if scalar(lo) == -_F8_MAX and scalar(hi) == _F8_MAX:
            return c.args[0], [c]
        raise NoMatch(f"the FP8 tail clamps to [{lo}, {hi}], not [-448, 448]")
    if is_call(c, *CLAMP):
        inner = c.args[0]
        if is_call(inner, *CLAMP) and inner.target != c.target:
            bounds = sorted([scalar(c.args[1]), scalar(inner.args[1])], key=lambda b: b or 0)
            if bounds == [-_F8_MAX, _F8_MAX]:
                return inner.args[0], [c, inner]
            raise NoMatch(f"the FP8 tail clamps to {bounds}, not [-448, 448]")
    raise NoMatch("the e4m3 conversion's input is not clamped to [-448, 448] (an unclamped "
                  "conversion turns values beyond 448 into NaN; arfusion saturates)")


def _norm_source(n, norm_out):
    """(grouped shape or None, the nodes between) when n is the rounded norm norm_out in fp32 or in
    the activation dtype, possibly viewed into groups; else None."""
    nodes, s = [], n
    for _ in range(4):
        if s is norm_out:
            break
        if convert_dtype(s) == torch.float32 or is_call(s, *VIEW):
            nodes.append(s)
            s = s.args[0]
            continue
        return None
    if s is not norm_out:
        return None
    sh = shape(n)
    return (None if sh is None or sh[-1:] == shape(norm_out)[-1:] else sh), nodes


def _amax_source(a):
    """The |x| maximum over the last dim of a node: (x, nodes) for amax(abs(x), [-1], keepdim)
    or max(abs(x), -1)[0] (unsqueezed back, or keepdim), converted to fp32 when x is bf16 (|x| and
    max are exact: the same bits as the fp32 amax). NoMatch naming what differs."""
    nodes = []
    if convert_dtype(a) == torch.float32:
        nodes.append(a)
        a = a.args[0]
    if is_call(a, *UNSQUEEZE):
        nodes.append(a)
        a = a.args[0]
    if is_call(a, operator.getitem) and is_call(a.args[0], *MAX_DIM) and a.args[1] == 0:
        nodes.append(a)
        m = a.args[0]
        dims = [m.args[1] if len(m.args) > 1 else m.kwargs.get("dim")]
    elif is_call(a, *AMAX):
        m = a
        dims = m.args[1] if len(m.args) > 1 else m.kwargs.get("dim")
    elif is_call(a, op("aten", "max"), op("aten", "amax")) or is_call(a, *CLAMP):
        raise NoMatch(_amax_refusal(a))
    else:
        raise NoMatch(f"the scale is computed from {describe(a)}, not from max |x| of the norm")
    nodes.append(m)
    x_abs = m.args[0]
    if not is_call(x_abs, *ABS):
        raise NoMatch(f"the amax reads {describe(x_abs)}, not |x|")
    ndim = len(shape(x_abs))
    if dims in (None, [], ()) or (isinstance(dims, (list, tuple)) and len(dims) == ndim > 1):
        raise NoMatch("one scale for the whole tensor (dynamic per-tensor FP8): arfusion's dynamic "
                      "scales are per token or per group of 128")
    if not is_last_dim(dims if isinstance(dims, (list, tuple)) else [dims], ndim):
        raise NoMatch(f"the amax runs over dims {dims}, not the last")
    nodes.append(x_abs)
    return x_abs.args[0], nodes


def _amax_refusal(a):
    if is_call(a, *CLAMP):
        hi = a.args[2] if is_call(a, op("aten", "clamp")) and len(a.args) > 2 else (
            a.args[1] if a.target == op("aten", "clamp_max") else None)
        if hi is not None:
            return f"the amax is bounded above ({describe(a)}): arfusion's scale has no upper bound"
        return (f"a floor is applied to the amax before the division ({describe(a)}): arfusion "
                "floors the quotient amax / 448 at 2^-9/448, which gives other scales for small "
                "amax")
    return ("one scale for the whole tensor (dynamic per-tensor FP8): arfusion's dynamic scales "
            "are per token or per group of 128")


def _dynamic_scale(s):
    """(amax node, nodes, rule) of scale = clamp_min(amax / 448.0 | amax * (1/448), floor)."""
    lo = None
    if is_call(s, op("aten", "clamp_min")):
        lo = s.args[1]
    elif is_call(s, op("aten", "clamp")):
        lo = s.args[1] if len(s.args) > 1 else s.kwargs.get("min")
        hi = s.args[2] if len(s.args) > 2 else s.kwargs.get("max")
        if hi is not None:
            raise NoMatch(f"the scale is bounded above ({describe(s)})")
    else:
        if is_call(s, op("aten", "exp2")):
            raise NoMatch("the scale is rounded to a power of two with exp2(ceil(log2(s))): the "
                          "fp32 log2 can round an s just above a power of two down to it; "
                          "arfusion's UE8M0 formats round up exactly (and the pass fuses fp32 "
                          "scales only)")
        if is_call(s, *DIV, *MUL):
            _amax_source(s.args[0])  # a more specific cause first (per-tensor, floor on amax)
            raise NoMatch("the scale has no floor (clamp_min(amax / 448, 1/(448*512))): an all-zero "
                          "row divides 0 / 0; arfusion floors the scale at 2^-9/448")
        raise NoMatch(f"the FP8 divisor {describe(s)} is neither a static scale nor amax / 448")
    if scalar(lo) is None or f32(lo) != _MIN_FP8_SCALE:
        raise NoMatch(f"scale floor {lo}: arfusion's is 2^-9/448 = {_MIN_FP8_SCALE:.9g}, so small "
                      "amax give other scales")
    d = s.args[0]
    if is_call(d, *DIV) and scalar(d.args[1]) == _F8_MAX:
        rule = _DYNAMIC_SCALE_RULE
    elif is_call(d, *MUL) and scalar(d.args[1]) is not None and f32(d.args[1]) == f32(1.0 / 448.0):
        rule = _DYNAMIC_SCALE_RULE
    elif is_call(d, *DIV, *MUL):
        raise NoMatch(f"scale = {describe(d)} with {d.args[1]!r}: arfusion's is amax / 448 (a "
                      "Python-number divisor; a tensor divisor's arithmetic depends on its device)")
    else:
        raise NoMatch(f"the scale floor reads {describe(d)}, not amax / 448")
    return d.args[0], [s, d], rule


def _quotient(d):
    """(x, scale) of the e4m3 input x / scale; NoMatch naming the arithmetic otherwise."""
    if is_call(d, *DIV) and isinstance(d.args[1], fx.Node):
        if scalar(d.args[0]) is not None:
            raise NoMatch(f"the FP8 input divides a constant by {describe(d.args[1])}")
        return d.args[0], d.args[1]
    if is_call(d, *MUL):
        for a, b in ((d.args[0], d.args[1]), (d.args[1], d.args[0])):
            if convert_dtype(b) == torch.float32:
                b = b.args[0]
            inverse = (is_call(b, *DIV) and scalar(b.args[0]) is not None) or (
                is_call(b, *MUL) and any(is_call(o, *RECIPROCAL) for o in b.args)
                and any(scalar(o) is not None for o in b.args))
            if is_call(b, *RECIPROCAL):
                raise NoMatch("the FP8 tail computes x * scale.reciprocal() (vLLM's native "
                              "QuantFP8): the reciprocal rounds before the product, where arfusion "
                              "divides x / scale once (the e4m3 results differ for some x)")
            if inverse:
                raise NoMatch("the FP8 tail multiplies by 448 / amax (an inverse scale, "
                              "torchao's form): x * RN(448 / amax) rounds differently from "
                              "arfusion's x / RN(amax / 448)")
            if isinstance(b, fx.Node) and isinstance(val(b), torch.Tensor) and val(b).numel() == 1:
                raise NoMatch("the FP8 tail multiplies by a static inverse scale: arfusion divides "
                              "by the scale (x / s and x * (1 / s) round differently)")
    raise NoMatch(f"the e4m3 input is {describe(d)}, not x / scale")


def _check_private(internal, outputs):
    """Every intermediate of the tail is read only inside it or by its outputs (else the replaced
    nodes would stay alive for that reader)."""
    for n in internal - outputs:
        outside = [u for u in n.users if u not in internal and u not in outputs]
        if outside:
            raise NoMatch(f"the FP8 tail's intermediate {describe(n)} is also read by "
                          + ", ".join(describe(u) for u in outside))


# ---- the tail ------------------------------------------------------------------------------------


def _tail_nodes(q, norm_out):
    """The nodes between norm_out and q (q's ancestors that depend on norm_out)."""
    out, todo, seen = [], [q], set()
    while todo:
        n = todo.pop()
        if n in seen or n is norm_out or not isinstance(n, fx.Node):
            continue
        seen.add(n)
        if depends_on(n, norm_out):
            out.append(n)
            todo.extend(n.all_input_nodes)
    return out


def _parse(q, norm_out, hidden) -> Quant:
    """The tail ending in the e4m3 conversion q, read back to norm_out."""
    if convert_dtype(q) != torch.float8_e4m3fn:
        raise NoMatch(f"the FP8 format is {convert_dtype(q)}: arfusion's FP8 is float8_e4m3fn")
    for n in _tail_nodes(q, norm_out):
        if is_call(n, op("aten", "max")):
            raise NoMatch(_amax_refusal(n))
    inner = q.args[0]
    if convert_dtype(inner) in (torch.bfloat16, torch.float16):
        raise NoMatch(f"the FP8 tail rounds its values to {convert_dtype(inner)} before the e4m3 "
                      "conversion (it computes in the activation dtype, e.g. a bf16 norm divided "
                      "by a bf16 scale): arfusion's scale and x / scale are fp32")
    x_div, clamps = _unclamp(inner)
    x32, s = _quotient(x_div)
    if dtype(x_div) != torch.float32:
        raise NoMatch(f"the FP8 quotient is computed in {dtype(x_div)}, not fp32")
    src = _norm_source(x32, norm_out)
    if src is None:
        raise NoMatch(f"the quantized value {describe(x32)} is not the rounded norm")
    grouped, x_nodes = src
    internal = {q, x_div, *clamps, *x_nodes}
    sv = val(s)
    static = (isinstance(sv, torch.Tensor) and sv.dtype == torch.float32 and sv.numel() == 1
              and not depends_on(s, norm_out))
    if static:
        if grouped is not None:
            raise NoMatch("a static scale on grouped values is not an arfusion pattern")
        _check_private(internal, {q})
        return Quant("fp8_per_tensor", q, None, s, internal)
    amax, s_nodes, rule = _dynamic_scale(s)
    if shape(s) != shape(x32)[:-1] + (1,):
        raise NoMatch(f"the scale's shape {list(shape(s))} is not one per row of "
                      f"{list(shape(x32))}")
    a_src, a_nodes = _amax_source(amax)
    a_norm = _norm_source(a_src, norm_out)
    if a_norm is None:
        raise NoMatch(f"the amax reads {describe(a_src)}, not the rounded norm")
    if shape(a_src) != shape(x32):
        raise NoMatch(f"the amax groups {list(shape(a_src))} differ from the quantized values' "
                      f"{list(shape(x32))}")
    internal |= set(s_nodes) | set(a_nodes) | set(a_norm[1])
    internal.discard(s)  # the scale itself is an output
    _check_private(internal, {q, s})
    if grouped is None:
        return Quant("fp8_per_token", q, s, None, internal, rule)
    if grouped[-1] != _GROUP or hidden % _GROUP:
        raise NoMatch(f"groups of {grouped[-1]} elements: arfusion's per-group FP8 has groups of "
                      f"{_GROUP} (hidden {hidden})")
    qv = [u for u in q.users if is_call(u, *VIEW)]
    if len(qv) == 1 and len(q.users) == 1:
        internal.add(q)
        return Quant("fp8_per_group", qv[0], s, None, internal, rule)
    return Quant("fp8_per_group", q, s, None, internal, rule)


def _fp8_conversions(norm_out, depth=8):
    """The fp8 conversions reachable from norm_out within `depth` nodes."""
    seen, todo, found = set(), [norm_out], []
    for _ in range(depth):
        nxt = []
        for n in todo:
            for u in n.users:
                if u in seen:
                    continue
                seen.add(u)
                if convert_dtype(u) in _FP8_TYPES:
                    found.append(u)
                else:
                    nxt.append(u)
        todo = nxt
    return found


def match_quant(norm_out: fx.Node, hidden: int) -> Quant:
    """The FP8 tail reading the norm (exactly arfusion's contract), or NoMatch with the cause;
    NoMatch("no FP8 tail") when nothing fp8 follows the norm."""
    convs = _fp8_conversions(norm_out)
    if not convs:
        raise NoMatch("no FP8 tail")
    reasons = []
    for q in convs:
        try:
            return _parse(q, norm_out, hidden)
        except NoMatch as e:
            reasons.append(str(e))
    raise NoMatch("; ".join(dict.fromkeys(reasons)))


def opaque_quant_readers(norm_out: fx.Node) -> list[str]:
    """Ops named like a quantization that read the norm (directly, through a view, or as an
    in-place op's argument): the pass cannot fuse what it cannot see."""
    out = []
    readers = list(norm_out.users)
    readers += [w for u in norm_out.users if is_call(u, *VIEW) for w in u.users]
    for u in readers:
        target = u.target
        if isinstance(target, torch._ops.HigherOrderOperator) and u.args:
            target = u.args[0]
        name = getattr(target, "_opname", None)
        ns = getattr(target, "namespace", None)
        if name and "quant" in name.lower():
            out.append(f"{ns}.{name}")
    return sorted(set(out))

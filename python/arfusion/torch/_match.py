"""Pattern matching of AllReduceFusionPass (arfusion.torch.compile; its docstring lists the forms):
from an all-reduce's value through views to the residual add and the RMSNorm. Every matcher returns
what it found or raises NoMatch with the reason the walk stopped, naming the real cause (a bias, an
add of another tensor, an fp32 residual, ...); none changes the graph.
"""

from __future__ import annotations

import dataclasses
import operator

import torch
import torch.fx as fx

from ._comm import ACTIVATION_DTYPES
from ._graph import (ADD, ADD_TENSOR, CONVERT, FUSED_RMS, MEAN, MUL, POW, RSQRT, VIEW,
                     NoMatch, convert_dtype, describe, dtype, is_call, is_last_dim, numel, op,
                     other_operand, scalar, shape)
from ._residual_forms import diagnose, match_fp32_residual, unnormalized

_NoMatch = NoMatch  # the name the pass's other modules import


@dataclasses.dataclass
class Norm:
    out: fx.Node | None       # the rounded norm (activation dtype); None: nothing reads it (below)
    weight: fx.Node | None    # gamma node (None: no weight -> ones)
    eps: float
    gamma_plus_one: bool
    rounding: str             # "once" | "before_weight"
    form: str                 # for stats
    unrounded_reader: str | None = None  # out is None: what reads the unrounded fp32 norm instead


@dataclasses.dataclass
class Site:
    """A matched all-reduce: the norm, the residual (None: first layer), the node whose users get
    the fused op's residual_out (y), the form, and the fused op's shape: the all-reduce's, or that
    of the views between it and the add (``views``; ``shape_arg`` is the last one's shape argument,
    which the pass gives the all-reduce's input)."""

    norm: Norm
    residual: fx.Node | None
    y: fx.Node
    form: str                     # residual | first_layer | fp32_residual | sandwich
    views: list
    shape: tuple
    shape_arg: object = None
    post_norm: str | None = None  # first_layer then a residual add: "sandwich" | "post_norm"
    post: Norm | None = None      # form sandwich: the norm before the residual add (post_weight)


# ---- RMSNorm -------------------------------------------------------------------------------------


def _match_fused_rms(y, hidden) -> Norm:
    for u in y.users:
        if not is_call(u, *FUSED_RMS) or u.args[0] is not y:
            continue
        shape_ = u.args[1] if len(u.args) > 1 else u.kwargs.get("normalized_shape")
        weight = u.args[2] if len(u.args) > 2 else u.kwargs.get("weight")
        eps = u.args[3] if len(u.args) > 3 else u.kwargs.get("eps")
        if list(shape_ or []) != [hidden]:
            raise NoMatch(f"{u.target}: normalized_shape {shape_} is not [hidden={hidden}]")
        if eps is None:
            raise NoMatch(f"{u.target}: eps=None (the default eps) is not matched; pass eps")
        if scalar(eps) is None:
            raise NoMatch(f"{u.target}: eps is not a constant")
        if weight is not None and shape(weight) != (hidden,):
            raise NoMatch(f"{u.target}: weight shape {shape(weight)} is not [{hidden}]")
        if u.target == op("aten", "rms_norm"):
            out = u
        else:  # _fused_rms_norm -> (out, rstd)
            outs = [g for g in u.users if is_call(g, operator.getitem) and g.args[1] == 0]
            if len(outs) != 1:
                raise NoMatch(f"{u.target}: output 0 not used exactly once")
            out = outs[0]
        if dtype(out) != dtype(y):
            raise NoMatch(f"{u.target}: output dtype {dtype(out)} is not the input's")
        return Norm(out, weight, float(eps), False, "once", str(u.target))
    raise NoMatch("no RMSNorm op")


def _match_weight_operand(g, hidden):
    """g multiplies the fp32 normalized value: returns (weight node, gamma_plus_one)."""
    if not isinstance(g, fx.Node) or shape(g) != (hidden,):
        raise NoMatch(f"the normalized value is multiplied by {g} (shape {shape(g)}), not a "
                      f"[{hidden}] weight")
    if is_call(g, *ADD):
        # Gemma: (1 + w.float()) or (w.float() + 1) in fp32
        a, b = g.args[0], g.args[1]
        one, w = (a, b) if scalar(a) is not None else (b, a)
        if scalar(one) != 1.0 or g.kwargs.get("alpha", 1) != 1 or dtype(g) != torch.float32:
            raise NoMatch(f"weight operand {g} is an add that is not fp32 (1 + w)")
        if convert_dtype(w) == torch.float32:
            w = w.args[0]
        if dtype(w) not in (torch.float32, *ACTIVATION_DTYPES) or shape(w) != (hidden,):
            raise NoMatch(f"Gemma weight {w} has dtype {dtype(w)}")
        return w, True
    if convert_dtype(g) == torch.float32:
        w = g.args[0]
        if dtype(w) in ACTIVATION_DTYPES and shape(w) == (hidden,):
            return w, False
        raise NoMatch(f"weight {w} converted to fp32 has dtype {dtype(w)}")
    if dtype(g) in (torch.float32, *ACTIVATION_DTYPES):
        return g, False
    raise NoMatch(f"weight {g} has dtype {dtype(g)}")


def _inverse_sqrt(e):
    """The users of `mean + eps` that are 1/sqrt of it: rsqrt(.), or pow(., -0.5). Both are
    s = 1/sqrt(mean + eps) in fp32, the one product y * s of the contract following; they differ
    from the fused kernel's rsqrt only in the last bits of s, as torch's rsqrt does (the contract
    bounds the norm within 1 ulp of the exact value either way)."""
    return [u for u in e.users if is_call(u, *RSQRT)
            or (is_call(u, *POW) and u.args[0] is e and scalar(u.args[1]) == -0.5)]


def _match_decomposed(y, hidden, act_dtype) -> Norm:
    y32s = [u for u in y.users if convert_dtype(u) == torch.float32]
    if not y32s:
        raise NoMatch("no fp32 conversion of the residual sum (no RMSNorm found)")
    why = []
    for y32 in y32s:
        try:
            return match_decomposed_from(y32, y32s, hidden, act_dtype)
        except NoMatch as e:
            why.append(str(e))
    raise NoMatch("; ".join(why))


def match_decomposed_from(y32, y32s, hidden, act_dtype) -> Norm:
    """The decomposed fp32 RMSNorm chain reading the fp32 value y32 (y32s: every fp32 copy of the
    same value, any of which the chain may read)."""
    ndim = len(shape(y32))
    sq = [u for u in y32.users
          if (is_call(u, *POW) and u.args[0] is y32 and scalar(u.args[1]) == 2.0)
          or (is_call(u, *MUL) and u.args[0] is y32 and u.args[1] is y32)]
    if len(sq) != 1:
        raise NoMatch("no unique square (pow 2 / x*x) of the fp32 value")
    sq = sq[0]
    means = [u for u in sq.users if is_call(u, *MEAN) and u.args[0] is sq]
    if len(means) != 1:
        raise NoMatch("the square has no unique mean")
    m = means[0]
    dims = m.args[1] if len(m.args) > 1 else m.kwargs.get("dim")
    keep = m.args[2] if len(m.args) > 2 else m.kwargs.get("keepdim", False)
    if not is_last_dim(dims, ndim) or not keep:
        raise NoMatch(f"mean over {dims} keepdim={keep}, not the last dim with keepdim")
    adds = [u for u in m.users if is_call(u, *ADD) and scalar(other_operand(u, m)) is not None
            and u.kwargs.get("alpha", 1) == 1]
    if len(adds) != 1:
        raise NoMatch("the mean square has no unique `+ eps` with a constant eps")
    e = adds[0]
    eps = scalar(other_operand(e, m))
    rs = _inverse_sqrt(e)
    if len(rs) != 1:
        raise NoMatch("no unique rsqrt (or pow -0.5) of mean + eps")
    r = rs[0]
    # x * rsqrt: the fp32 value, or the activation-dtype value itself (aten.rms_norm's
    # input.mul(rsqrt(...)), promoted to fp32: the same products)
    y = y32.args[0]
    ns = [u for u in r.users if is_call(u, *MUL)
          and (other_operand(u, r) in y32s or other_operand(u, r) is y)
          and dtype(u) == torch.float32]
    if len(ns) != 1:
        raise NoMatch("the rsqrt does not multiply the fp32 value exactly once")
    return _norm_tail(ns[0], eps, hidden, act_dtype)


def _norm_tail(n, eps, hidden, act_dtype) -> Norm:
    """What follows the fp32 normalized value n: the weight and the rounding."""
    tails = []
    for u in n.users:
        if convert_dtype(u) == act_dtype:
            # round before the weight: convert -> * weight (activation dtype), or no weight
            ws = [w for w in u.users if is_call(w, *MUL) and dtype(w) == act_dtype]
            if len(ws) == 1 and len(u.users) == 1:
                w = other_operand(ws[0], u)
                if isinstance(w, fx.Node) and shape(w) == (hidden,) and dtype(w) == act_dtype:
                    tails.append(Norm(ws[0], w, eps, False, "before_weight",
                                      "decomposed: weight * x.to(dtype)"))
                    continue
            tails.append(Norm(u, None, eps, False, "once", "decomposed: no weight"))
        elif is_call(u, *MUL) and dtype(u) == torch.float32:
            g = other_operand(u, n)
            w, plus_one = _match_weight_operand(g, hidden)
            form = "decomposed: (1 + w) in fp32" if plus_one else (
                "decomposed: fp32 weight" if dtype(w) == torch.float32 else
                "decomposed: x * w in fp32")
            outs = [c for c in u.users if convert_dtype(c) == act_dtype]
            if not outs:
                # Inductor folds fp32 -> bf16 -> fp32 when only an fp32 reader follows (torch
                # 2.10's pointless_convert): the graph then reads the unrounded weighted norm
                readers = ", ".join(describe(c) for c in u.users)
                tails.append(Norm(None, w, eps, plus_one, "once", form,
                                  unrounded_reader=readers or "nothing"))
                continue
            if len(outs) != 1:
                raise NoMatch("the weighted fp32 norm is converted to the activation dtype more "
                              "than once")
            tails.append(Norm(outs[0], w, eps, plus_one, "once", form))
    if len(tails) != 1:
        raise NoMatch(f"the normalized fp32 value has {len(tails)} recognised tails (need 1)")
    return tails[0]


def match_norm(y, hidden, act_dtype) -> Norm:
    errors = []
    for matcher in (_match_fused_rms, lambda y_, h_: _match_decomposed(y_, h_, act_dtype)):
        try:
            return matcher(y, hidden)
        except NoMatch as e:
            errors.append(str(e))
    raise NoMatch("RMSNorm not recognised: " + " | ".join(errors))


# ---- from the all-reduce to the norm -------------------------------------------------------------


def _view_chain(ar_val, hidden):
    """The views (reshape / view / _unsafe_view) the all-reduce's value goes through before
    anything else reads it, each the only reader of the one before and keeping the rows of
    [hidden] elements (e.g. an MoE block's [B*S, H] sum viewed as [B, S, H], or a no-op view)."""
    views, v = [], ar_val
    while len(v.users) == 1:
        u = next(iter(v.users))
        s = shape(u)
        if not is_call(u, *VIEW) or s is None or not s or s[-1] != hidden:
            break
        views.append(u)
        v = u
    return views, v


def _add_operands(v, act, shape_):
    """Each same-dtype add reading v: (add node, the other operand)."""
    out = []
    for u in v.users:
        if not is_call(u, *ADD_TENSOR) or u.kwargs.get("alpha", 1) != 1:
            continue
        other = other_operand(u, v)
        if other is v or other is None:
            continue
        out.append((u, other))
    return out


def _residual_adds(v, ar_val, act, shape_, order):
    """Adds of v and a residual: the other operand an activation-dtype tensor of v's shape defined
    before the all-reduce (in `h = norm(ar1); ...; s = ar2 + ar1` the add belongs to ar2)."""
    return [(u, o) for u, o in _add_operands(v, act, shape_)
            if isinstance(o, fx.Node) and order[o] < order[ar_val] and shape(u) == shape_
            and dtype(u) == act and shape(o) == shape_ and dtype(o) == act]


def _post_norm(norm, ar_val, act, shape_, hidden, order):
    """For a first-layer match: "sandwich" when the norm's output is added to a residual and the sum
    normalized again (Gemma 2/3's post-attention norm), "post_norm" when it is added to a residual
    only (OLMo 2), else None."""
    if norm.out is None:
        return None
    adds = _residual_adds(norm.out, ar_val, act, shape_, order)
    if len(adds) != 1:
        return None
    try:
        match_norm(adds[0][0], hidden, act)
        return "sandwich"
    except NoMatch:
        return "post_norm"


def match_site(ar_val, hidden, act, fp32_residual_add: bool, order: dict) -> Site:
    """The residual add (or the first-layer form: the norm reads the all-reduce) and the RMSNorm
    after the all-reduce value ar_val, through views; NoMatch with the reason otherwise. order: the
    graph's node positions."""
    views, v = _view_chain(ar_val, hidden)
    shape_ = shape(v)
    shape_arg = views[-1].args[1] if views else None
    where = f" (after the view{'s' if len(views) > 1 else ''} to {list(shape_)})" if views else ""
    adds = _residual_adds(v, ar_val, act, shape_, order)
    errors = []
    if len(adds) == 1:
        add, residual = adds[0]
        readers = [u for u in v.users if u is not add]
        try:
            norm = match_norm(add, hidden, act)
            if readers or len(ar_val.users) > 1:
                raise NoMatch("the all-reduce result is read besides the residual add, by "
                              + ", ".join(describe(u) for u in (readers or ar_val.users)
                                          if u is not add)
                              + ": the fused op returns the residual sum, not the bare all-reduce")
            return Site(norm, residual, add, "residual", views, shape_, shape_arg)
        except NoMatch as e:
            errors.append(f"after the residual add {describe(add)}{where}: {e}")
    try:
        norm = match_norm(v, hidden, act)
        post = _post_norm(norm, ar_val, act, shape_, hidden, order)
        return Site(norm, None, v, "first_layer", views, shape_, shape_arg, post_norm=post)
    except NoMatch as e:
        if not adds:
            errors.append(f"the all-reduce{where}: {e}")
    fp32 = match_fp32_residual(v, ar_val, hidden, act, shape_, order, match_decomposed_from)
    if fp32 is not None:
        norm, residual, y = fp32
        if fp32_residual_add:
            return Site(norm, residual, y, "fp32_residual", views, shape_, shape_arg)
        raise NoMatch("the residual add runs in fp32 and the norm reads the unrounded fp32 sum "
                      "(vLLM's native RMSNorm); arfusion normalizes the rounded residual, a "
                      "rounding difference: pass fp32_residual_add=True to fuse it anyway")
    cause = diagnose(v, ar_val, hidden, act, shape_, order)
    if cause is not None:
        raise NoMatch(cause + where)
    if not adds and not any(convert_dtype(u) == torch.float32 or is_call(u, *FUSED_RMS)
                            for u in v.users):
        raise NoMatch(unnormalized(v) + where)
    raise NoMatch("; ".join(errors))


__all__ = ["CONVERT", "Norm", "Site", "match_decomposed_from", "match_norm", "match_site"]
